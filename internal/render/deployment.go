package render

import (
	"encoding/json"
	"fmt"
	"maps"
	"path"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/util/intstr"
	appsv1ac "k8s.io/client-go/applyconfigurations/apps/v1"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"
	metav1ac "k8s.io/client-go/applyconfigurations/meta/v1"
	networkingv1ac "k8s.io/client-go/applyconfigurations/networking/v1"
	policyv1ac "k8s.io/client-go/applyconfigurations/policy/v1"

	agentsv1 "github.com/stepwise-run/stepwise/api/v1alpha1"
	"github.com/stepwise-run/stepwise/internal/flowclaim"
	"github.com/stepwise-run/stepwise/pkg/workerconfig"
)

// DesiredReplicas is how many workers an Agent asks for.
func DesiredReplicas(agent *agentsv1.Agent) int32 {
	if w := workers(agent); w.Replicas != nil {
		return *w.Replicas
	}
	return 1
}

// WorkerOf reads the engine version and image a worker pod, or a pod
// template, runs.
func WorkerOf(labels map[string]string, spec *corev1.PodSpec) (engineVersion, image string) {
	for _, c := range spec.Containers {
		if c.Name == workerAppName {
			image = c.Image
		}
	}
	return labels[LabelEngineVersion], image
}

func deployment(r *Resolved, envs secretEnvs, serviceAccount, digest string) *appsv1ac.DeploymentApplyConfiguration {
	agent := r.Agent
	w := workers(agent)
	replicas := DesiredReplicas(agent)
	stopTimeout := StopTimeout(r)

	podLabels := objectLabels(agent.Name, ComponentWorker)
	podLabels[LabelEngineVersion] = r.EngineVersion
	deploymentLabels := objectLabels(agent.Name, ComponentWorker)
	maps.Copy(deploymentLabels, flowclaim.Labels(r.Claims()))
	if r.MediaStore != nil {
		deploymentLabels[LabelMediaStore] = r.MediaStore.Name
	}

	// The field reference is spelled as the API server stores it; see envVar.
	env := []*corev1ac.EnvVarApplyConfiguration{
		corev1ac.EnvVar().WithName(EnvPodName).WithValueFrom(
			corev1ac.EnvVarSource().WithFieldRef(corev1ac.ObjectFieldSelector().WithAPIVersion("v1").WithFieldPath("metadata.name"))),
	}
	env = append(env, envs.envVars()...)
	for i := range w.Env {
		env = append(env, envVar(&w.Env[i]))
	}

	var initContainers []*corev1ac.ContainerApplyConfiguration
	volumes := []*corev1ac.VolumeApplyConfiguration{
		corev1ac.Volume().WithName(configVolume).WithConfigMap(
			corev1ac.ConfigMapVolumeSource().WithName(ConfigMapName(agent.Name, digest))),
		corev1ac.Volume().WithName("tmp").WithEmptyDir(corev1ac.EmptyDirVolumeSource()),
	}
	mounts := []*corev1ac.VolumeMountApplyConfiguration{
		corev1ac.VolumeMount().WithName(configVolume).WithMountPath(ConfigDir).WithReadOnly(true),
		corev1ac.VolumeMount().WithName("tmp").WithMountPath("/tmp"),
	}
	if ref := tracingCA(agent.Spec.Tracing); ref != nil {
		volumes = append(volumes, corev1ac.Volume().WithName("tracing-ca").WithSecret(
			corev1ac.SecretVolumeSource().WithSecretName(ref.Name).WithDefaultMode(0o440).
				WithItems(corev1ac.KeyToPath().WithKey(ref.Key).WithPath(path.Base(TracingCAFile)))))
		mounts = append(mounts, corev1ac.VolumeMount().WithName("tracing-ca").WithMountPath(path.Dir(TracingCAFile)).WithReadOnly(true))
	}
	if tls := r.Engine.TLS; tls != nil && tls.SecretRef != nil {
		volumes = append(volumes, corev1ac.Volume().WithName("engine-tls").WithSecret(
			corev1ac.SecretVolumeSource().WithSecretName(tls.SecretRef.Name).WithDefaultMode(0o440)))
		mounts = append(mounts, corev1ac.VolumeMount().WithName("engine-tls").WithMountPath(EngineTLSDir).WithReadOnly(true))
	}
	if ms := r.MediaStore; ms != nil && ms.Spec.LocalDirectory != nil {
		// checkMediaVolume let only a root outside the system directories
		// through, and a hostPath only under an allowed host directory. The
		// volume is exactly the store: the whole claim, or the node's
		// directory root and nothing above it. Workers write images, so it
		// is mounted read-write, at root, where image URIs point.
		local := ms.Spec.LocalDirectory
		media := corev1ac.Volume().WithName("media")
		if local.PersistentVolumeClaimName != "" {
			media.WithPersistentVolumeClaim(corev1ac.PersistentVolumeClaimVolumeSource().WithClaimName(local.PersistentVolumeClaimName))
		} else {
			// Single-node use: every worker on the node shares the directory.
			// It must exist: the kubelet would create a missing one owned by
			// root, which the workers, never root, could not write to.
			media.WithHostPath(corev1ac.HostPathVolumeSource().WithPath(local.Root).WithType(corev1.HostPathDirectory))
			// The kubelet follows symbolic links on the node, which a
			// lexical check of the root cannot see.
			base, _ := HostPathBase(local.Root, agent.Namespace, r.MediaHostPathRoots)
			volumes = append(volumes, corev1ac.Volume().WithName("media-base").WithHostPath(
				corev1ac.HostPathVolumeSource().WithPath(base).WithType(corev1.HostPathDirectory)))
			initContainers = append(initContainers, mediaRootCheck(r.StockWorkerImage, base, local.Root))
		}
		volumes = append(volumes, media)
		mounts = append(mounts, corev1ac.VolumeMount().WithName("media").WithMountPath(local.Root))
	}

	probe := func(path string) *corev1ac.ProbeApplyConfiguration {
		return corev1ac.Probe().WithHTTPGet(corev1ac.HTTPGetAction().WithPath(path).WithPort(intstr.FromString("health"))).
			WithPeriodSeconds(10).WithFailureThreshold(3)
	}

	container := corev1ac.Container().
		WithName(workerAppName).
		WithImage(r.WorkerImage).
		WithArgs("--config="+ConfigDir+"/"+workerconfig.FileName, "--stop-timeout="+stopTimeout.String()).
		WithPorts(corev1ac.ContainerPort().WithName("health").WithContainerPort(HealthPort).WithProtocol(corev1.ProtocolTCP),
			corev1ac.ContainerPort().WithName(MetricsPortName).WithContainerPort(MetricsPort).WithProtocol(corev1.ProtocolTCP)).
		WithEnv(env...).
		WithVolumeMounts(mounts...).
		WithLivenessProbe(probe("/healthz")).
		WithReadinessProbe(probe("/readyz")).
		WithSecurityContext(corev1ac.SecurityContext().
			WithAllowPrivilegeEscalation(false).
			WithReadOnlyRootFilesystem(true).
			WithCapabilities(corev1ac.Capabilities().WithDrop("ALL")))
	container.WithResources(resources(w.Resources))

	pod := corev1ac.PodSpec().
		WithServiceAccountName(serviceAccount).
		// Workers never call the Kubernetes API.
		WithAutomountServiceAccountToken(false).
		WithTerminationGracePeriodSeconds(int64((stopTimeout + stopMargin) / time.Second)).
		WithSecurityContext(corev1ac.PodSecurityContext().
			WithRunAsNonRoot(true).
			WithSeccompProfile(corev1ac.SeccompProfile().WithType(corev1.SeccompProfileTypeRuntimeDefault))).
		WithInitContainers(initContainers...).
		WithContainers(container).
		WithVolumes(volumes...)
	if len(w.NodeSelector) > 0 {
		pod.WithNodeSelector(w.NodeSelector)
	}
	for i := range w.Tolerations {
		pod.WithTolerations(toleration(&w.Tolerations[i]))
	}
	for _, s := range w.ImagePullSecrets {
		pod.WithImagePullSecrets(corev1ac.LocalObjectReference().WithName(s.Name))
	}

	maxSurge, maxUnavailable := intstr.FromString("25%"), intstr.FromInt32(0)
	return appsv1ac.Deployment(WorkerName(agent.Name), agent.Namespace).
		WithLabels(deploymentLabels).
		WithOwnerReferences(ownerReference(agent)).
		WithSpec(appsv1ac.DeploymentSpec().
			WithReplicas(replicas).
			WithSelector(metav1ac.LabelSelector().WithMatchLabels(SelectorLabels(agent.Name))).
			WithStrategy(appsv1ac.DeploymentStrategy().
				WithType(appsv1.RollingUpdateDeploymentStrategyType).
				WithRollingUpdate(appsv1ac.RollingUpdateDeployment().WithMaxSurge(maxSurge).WithMaxUnavailable(maxUnavailable))).
			WithTemplate(corev1ac.PodTemplateSpec().
				WithLabels(podLabels).
				WithAnnotations(map[string]string{AnnotationConfigDigest: digest}).
				WithSpec(pod)))
}

// MediaRootCheckCommand is the stock worker's command that checks a
// hostPath MediaStore's root before a worker pod starts.
const MediaRootCheckCommand = "check-media-root"

// Where the media root check sees the allowed directory and the store.
const (
	mediaBaseDir  = "/stepwise/media-base"
	mediaStoreDir = "/stepwise/media-store"
)

// mediaRootCheck is the init container that refuses to start a worker whose
// hostPath store the kubelet mounted through a symbolic link: from the
// allowed directory down to the store's root, no component may be one, and
// the directory mounted must be the one the path names. It runs the stock
// worker image, which the operator chose, whatever image the Agent names,
// and sees the allowed directory read-only.
func mediaRootCheck(image, base, root string) *corev1ac.ContainerApplyConfiguration {
	rel := strings.TrimPrefix(strings.TrimPrefix(root, base), "/")
	return corev1ac.Container().
		WithName("media-root-check").
		WithImage(image).
		WithArgs(MediaRootCheckCommand, "--base="+mediaBaseDir, "--store="+mediaStoreDir, "--path="+rel).
		WithVolumeMounts(
			corev1ac.VolumeMount().WithName("media-base").WithMountPath(mediaBaseDir).WithReadOnly(true),
			corev1ac.VolumeMount().WithName("media").WithMountPath(mediaStoreDir).WithReadOnly(true)).
		WithResources(corev1ac.ResourceRequirements().
			WithRequests(corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("10m"), corev1.ResourceMemory: resource.MustParse("16Mi")}).
			WithLimits(corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("64Mi")})).
		WithSecurityContext(corev1ac.SecurityContext().
			WithAllowPrivilegeEscalation(false).
			WithReadOnlyRootFilesystem(true).
			WithCapabilities(corev1ac.Capabilities().WithDrop("ALL")))
}

// disruptionBudget allows one voluntary eviction at a time across every
// worker version. A worker that is not ready may always be evicted: it
// holds no Step, and a crash-looping pod must not block a node drain.
func disruptionBudget(agent *agentsv1.Agent) *policyv1ac.PodDisruptionBudgetApplyConfiguration {
	return policyv1ac.PodDisruptionBudget(DisruptionBudgetName(agent.Name), agent.Namespace).
		WithLabels(objectLabels(agent.Name, ComponentWorker)).
		WithOwnerReferences(ownerReference(agent)).
		WithSpec(policyv1ac.PodDisruptionBudgetSpec().
			WithMaxUnavailable(intstr.FromInt32(1)).
			WithSelector(metav1ac.LabelSelector().WithMatchLabels(SelectorLabels(agent.Name))).
			WithUnhealthyPodEvictionPolicy(policyv1.AlwaysAllow))
}

// networkPolicy lets into the workers only the kubelet's probes and the
// metrics scrapers: the workers call out, to the engine, models, tools and
// the event hub, and serve nothing else; their debug events listen on
// loopback alone.
func networkPolicy(agent *agentsv1.Agent, p WorkerNetworkPolicy) *networkingv1ac.NetworkPolicyApplyConfiguration {
	metrics := networkingv1ac.NetworkPolicyIngressRule().
		WithPorts(networkingv1ac.NetworkPolicyPort().WithPort(intstr.FromInt32(MetricsPort)).WithProtocol(corev1.ProtocolTCP))
	if p.MetricsNamespace != "" {
		metrics.WithFrom(networkingv1ac.NetworkPolicyPeer().WithNamespaceSelector(
			metav1ac.LabelSelector().WithMatchLabels(map[string]string{corev1.LabelMetadataName: p.MetricsNamespace})))
	}
	return networkingv1ac.NetworkPolicy(NetworkPolicyName(agent.Name), agent.Namespace).
		WithLabels(objectLabels(agent.Name, ComponentWorker)).
		WithOwnerReferences(ownerReference(agent)).
		WithSpec(networkingv1ac.NetworkPolicySpec().
			WithPodSelector(metav1ac.LabelSelector().WithMatchLabels(SelectorLabels(agent.Name))).
			WithPolicyTypes(networkingv1.PolicyTypeIngress).
			WithIngress(
				networkingv1ac.NetworkPolicyIngressRule().
					WithPorts(networkingv1ac.NetworkPolicyPort().WithPort(intstr.FromInt32(HealthPort)).WithProtocol(corev1.ProtocolTCP)),
				metrics))
}

// Convert turns a typed API value into its apply configuration, or an
// apply configuration that the client filled with the API server's answer
// into its typed value. The two share one JSON form, so the round trip
// through JSON is exact.
func Convert[T any](from any) (*T, error) {
	data, err := json.Marshal(from)
	if err != nil {
		return nil, fmt.Errorf("encoding %T: %w", from, err)
	}
	out := new(T)
	if err := json.Unmarshal(data, out); err != nil {
		return nil, fmt.Errorf("decoding %T: %w", out, err)
	}
	return out, nil
}

// applyConfig converts a typed value the builders hold; that cannot fail.
func applyConfig[T any](typed any) *T {
	out, err := Convert[T](typed)
	if err != nil {
		panic(err)
	}
	return out
}

// The worker Deployment is rendered as the API server stores it, so that an
// unchanged Agent renders exactly what the Deployment holds and the
// operator sends no apply. The values the server defaults inside atomic
// fields (applied, and so owned, as a whole) and the quantities it rounds
// are spelled out here, as the server would store them.

// envVar is a variable of spec.workers.env as the API server stores it.
func envVar(e *corev1.EnvVar) *corev1ac.EnvVarApplyConfiguration {
	e = e.DeepCopy()
	if from := e.ValueFrom; from != nil {
		if from.FieldRef != nil && from.FieldRef.APIVersion == "" {
			from.FieldRef.APIVersion = "v1"
		}
		if from.FileKeyRef != nil && from.FileKeyRef.Optional == nil {
			from.FileKeyRef.Optional = new(false)
		}
	}
	return applyConfig[corev1ac.EnvVarApplyConfiguration](e)
}

func toleration(t *corev1.Toleration) *corev1ac.TolerationApplyConfiguration {
	return applyConfig[corev1ac.TolerationApplyConfiguration](t)
}

// resources are the worker container's resources as the API server stores
// them: it rounds quantities up to thousandths of a unit.
// Worker resources where the Agent names none: a request the scheduler can
// place many of, and a memory limit so one runaway worker cannot take its
// node's memory. No CPU limit, which would throttle Steps for nothing.
var (
	DefaultWorkerCPURequest    = resource.MustParse("50m")
	DefaultWorkerMemoryRequest = resource.MustParse("128Mi")
	DefaultWorkerMemoryLimit   = resource.MustParse("1Gi")
)

// resources are the Agent's worker resources, each unset one defaulted so
// that a request never exceeds its limit.
func resources(r corev1.ResourceRequirements) *corev1ac.ResourceRequirementsApplyConfiguration {
	r = *r.DeepCopy()
	if r.Requests == nil {
		r.Requests = corev1.ResourceList{}
	}
	if r.Limits == nil {
		r.Limits = corev1.ResourceList{}
	}
	if _, ok := r.Requests[corev1.ResourceCPU]; !ok {
		request := DefaultWorkerCPURequest
		if limit, ok := r.Limits[corev1.ResourceCPU]; ok && limit.Cmp(request) < 0 {
			request = limit
		}
		r.Requests[corev1.ResourceCPU] = request
	}
	if _, ok := r.Limits[corev1.ResourceMemory]; !ok {
		limit := DefaultWorkerMemoryLimit
		if request, ok := r.Requests[corev1.ResourceMemory]; ok && request.Cmp(limit) > 0 {
			limit = request
		}
		r.Limits[corev1.ResourceMemory] = limit
	}
	if _, ok := r.Requests[corev1.ResourceMemory]; !ok {
		request := DefaultWorkerMemoryRequest
		if limit := r.Limits[corev1.ResourceMemory]; limit.Cmp(request) < 0 {
			request = limit
		}
		r.Requests[corev1.ResourceMemory] = request
	}
	for _, list := range []corev1.ResourceList{r.Limits, r.Requests} {
		for name, q := range list {
			q.RoundUp(-3)
			list[name] = q
		}
	}
	return applyConfig[corev1ac.ResourceRequirementsApplyConfiguration](&r)
}
