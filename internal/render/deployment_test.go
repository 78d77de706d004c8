package render

import (
	"maps"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/util/intstr"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"

	agentsv1 "github.com/stepwise-run/stepwise/api/v1alpha1"
	"github.com/stepwise-run/stepwise/internal/flowclaim"
	"github.com/stepwise-run/stepwise/internal/tenancy"
	"github.com/stepwise-run/stepwise/internal/version"
)

func TestRenderWorkerDeployment(t *testing.T) {
	tests := []struct {
		name  string
		agent *agentsv1.Agent
		obs   Observed
		check func(t *testing.T, w *WorkerObjects)
	}{
		{
			name:  "defaults: one replica, the stock image, the operator's ServiceAccount",
			agent: testAgent(),
			check: func(t *testing.T, w *WorkerObjects) {
				spec := w.Deployment.Spec
				if *spec.Replicas != 1 {
					t.Errorf("replicas = %d, want 1", *spec.Replicas)
				}
				if got := *spec.Template.Spec.Containers[0].Image; got != "worker:stock" {
					t.Errorf("image = %s, want the stock image", got)
				}
				if w.ServiceAccount == nil || *spec.Template.Spec.ServiceAccountName != "support-worker" {
					t.Errorf("service account = %v, want support-worker created", spec.Template.Spec.ServiceAccountName)
				}
				if got := spec.Template.Labels[LabelEngineVersion]; got != version.EngineVersion {
					t.Errorf("engine version label = %q", got)
				}
				if w.Deployment.Labels[flowclaim.LabelFlowClaim] != (flowclaim.Claim{EngineID: testEngineID, Names: tenancy.Tenant("team", "SupportAgent")}).Label() {
					t.Errorf("Deployment labels = %v, want the claim of the Agent's own names", w.Deployment.Labels)
				}
				if _, ok := w.Deployment.Labels[flowclaim.LabelSharedFlowClaim]; ok || w.EngineSecret != nil {
					t.Errorf("Deployment labels = %v, engine Secret %v; want no shared claim and no credentials to carry", w.Deployment.Labels, w.EngineSecret)
				}
				if got := *w.ConfigMap.Name; got != ConfigMapName("support", w.ConfigDigest) || !*w.ConfigMap.Immutable {
					t.Errorf("config ConfigMap %s, want an immutable one named by the digest", got)
				}
				if ConfigMapOf(applyConfig[corev1.PodTemplateSpec](w.Deployment.Spec.Template)) != *w.ConfigMap.Name {
					t.Error("the pod template does not mount the config ConfigMap")
				}
				if spec.Selector.MatchLabels[LabelAgent] != "support" || len(spec.Selector.MatchLabels) != 2 {
					t.Errorf("selector = %v, want the two stable labels", spec.Selector.MatchLabels)
				}
				if got := spec.Template.Annotations[AnnotationConfigDigest]; got != w.ConfigDigest {
					t.Errorf("pod digest = %s, want %s", got, w.ConfigDigest)
				}
			},
		},
		{
			name: "an Agent's own image, ServiceAccount, scheduling and env, of an engine version whose sessions an earlier operator ran under the shared names",
			agent: testAgent(func(a *agentsv1.Agent) {
				a.Status.TaskQueue = "stepwise/SupportAgent"
				a.Spec.Workers = &agentsv1.WorkersSpec{
					Image: "team/worker:2", EngineVersion: "0.2.0", Replicas: new(int32(3)),
					ServiceAccountName: "cloud", NodeSelector: map[string]string{"pool": "agents"},
					Tolerations: []corev1.Toleration{{Key: "agents", Operator: corev1.TolerationOpExists}},
					Env:         []corev1.EnvVar{{Name: "LOG_LEVEL", Value: "debug"}},
					Resources:   corev1.ResourceRequirements{Limits: corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("1Gi")}},
				}
			}),
			check: func(t *testing.T, w *WorkerObjects) {
				pod := w.Deployment.Spec.Template.Spec
				if w.ServiceAccount != nil || *pod.ServiceAccountName != "cloud" {
					t.Errorf("service account: created %v, used %s; want none created and cloud used", w.ServiceAccount != nil, *pod.ServiceAccountName)
				}
				c := pod.Containers[0]
				if *c.Image != "team/worker:2" || w.Deployment.Spec.Template.Labels[LabelEngineVersion] != "0.2.0" {
					t.Errorf("image %s version %s", *c.Image, w.Deployment.Spec.Template.Labels[LabelEngineVersion])
				}
				if *w.Deployment.Spec.Replicas != 3 || pod.NodeSelector["pool"] != "agents" || *pod.Tolerations[0].Key != "agents" {
					t.Error("replicas, node selector or tolerations not passed through")
				}
				env := envNames(c.Env)
				if env[len(env)-1] != "LOG_LEVEL" {
					t.Errorf("env = %v, want the Agent's env last", env)
				}
				if got := (*c.Resources.Limits)[corev1.ResourceMemory]; got.String() != "1Gi" {
					t.Errorf("memory limit = %s", got.String())
				}
			},
		},
		{
			name: "values the API server defaults or rounds are rendered as it stores them",
			agent: testAgent(func(a *agentsv1.Agent) {
				a.Spec.Workers = &agentsv1.WorkersSpec{
					Env: []corev1.EnvVar{
						{Name: "NODE", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "spec.nodeName"}}},
						{Name: "TOKEN", ValueFrom: &corev1.EnvVarSource{FileKeyRef: &corev1.FileKeySelector{VolumeName: "tmp", Path: "env", Key: "TOKEN"}}},
					},
					Resources: corev1.ResourceRequirements{
						Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("100u")},
						Limits:   corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("0.5")},
					},
				}
			}),
			check: func(t *testing.T, w *WorkerObjects) {
				c := w.Deployment.Spec.Template.Spec.Containers[0]
				from := map[string]*corev1ac.EnvVarSourceApplyConfiguration{}
				for _, e := range c.Env {
					from[*e.Name] = e.ValueFrom
				}
				for _, name := range []string{EnvPodName, "NODE"} {
					if ref := from[name].FieldRef; ref.APIVersion == nil || *ref.APIVersion != "v1" {
						t.Errorf("%s field reference API version = %v, want v1", name, ref.APIVersion)
					}
				}
				if ref := from["TOKEN"].FileKeyRef; ref.Optional == nil || *ref.Optional {
					t.Errorf("file key reference optional = %v, want false", ref.Optional)
				}
				if got := (*c.Resources.Requests)[corev1.ResourceCPU]; got.String() != "1m" {
					t.Errorf("cpu request = %s, want 100u rounded up to 1m", got.String())
				}
				if got := (*c.Resources.Limits)[corev1.ResourceCPU]; got.String() != "500m" {
					t.Errorf("cpu limit = %s, want 500m", got.String())
				}
			},
		},
		{
			name:  "engine TLS mounts the Secret and names only the files it has",
			agent: testAgent(withEngineTLS("engine-tls")),
			obs:   observed(secret("engine-tls", map[string]string{"ca.crt": "ca"})),
			check: func(t *testing.T, w *WorkerObjects) {
				tls := w.Config.Engine.TLS
				if tls == nil || tls.CAFile != EngineTLSDir+"/ca.crt" || tls.CertFile != "" {
					t.Errorf("TLS config = %+v, want only the CA file", tls)
				}
				if !hasVolume(w, "engine-tls") {
					t.Error("no engine-tls volume")
				}
			},
		},
		{
			name:  "a local directory MediaStore with a claim is mounted at its root",
			agent: testAgent(withMediaStoreRef("media")),
			obs: observed(readyMediaStore("media", func(ms *agentsv1.MediaStore) {
				ms.Spec.LocalDirectory.PersistentVolumeClaimName = "media-pvc"
			})),
			check: func(t *testing.T, w *WorkerObjects) {
				if !hasVolume(w, "media") {
					t.Fatal("no media volume")
				}
				for _, m := range w.Deployment.Spec.Template.Spec.Containers[0].VolumeMounts {
					if *m.Name == "media" && *m.MountPath != "/media" {
						t.Errorf("media mounted at %s, want /media", *m.MountPath)
					}
				}
			},
		},
		{
			name:  "a local directory MediaStore without a claim is the node's directory",
			agent: testAgent(withMediaStoreRef("media")),
			obs:   observed(readyMediaStore("media")),
			check: func(t *testing.T, w *WorkerObjects) {
				for _, v := range w.Deployment.Spec.Template.Spec.Volumes {
					if *v.Name == "media" {
						if v.HostPath == nil || *v.HostPath.Path != "/media" || *v.HostPath.Type != corev1.HostPathDirectory {
							t.Errorf("media volume = %+v, want hostPath /media of type Directory", v)
						}
						return
					}
				}
				t.Error("no media volume")
			},
		},
		{
			name:  "S3 credentials come from the Secret's conventional keys",
			agent: testAgent(withMediaStoreRef("media")),
			obs: observed(readyMediaStore("media", func(ms *agentsv1.MediaStore) {
				ms.Spec = agentsv1.MediaStoreSpec{S3: &agentsv1.S3MediaStore{Bucket: "b", Prefix: "p",
					CredentialsSecretRef: &agentsv1.SecretReference{Name: "s3"}}}
			}), secret("s3", map[string]string{S3AccessKeyIDKey: "id", S3SecretAccessKeyKey: "key"})),
			check: func(t *testing.T, w *WorkerObjects) {
				s3 := w.Config.MediaStore.S3
				if s3.AccessKeyID.Key != S3AccessKeyIDKey || s3.SecretAccessKey.Key != S3SecretAccessKeyKey || s3.SessionToken != nil {
					t.Errorf("S3 credentials = %+v", s3)
				}
				if w.Config.MediaStore.StoreURI != "s3://b/p" {
					t.Errorf("store URI = %s", w.Config.MediaStore.StoreURI)
				}
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.check(t, render(t, tt.agent, tt.obs))
		})
	}
}

func hasVolume(w *WorkerObjects, name string) bool {
	for _, v := range w.Deployment.Spec.Template.Spec.Volumes {
		if *v.Name == name {
			return true
		}
	}
	return false
}

func TestWorkersGetResourcesTheAgentCanOverride(t *testing.T) {
	q := resource.MustParse
	cases := []struct {
		name     string
		spec     corev1.ResourceRequirements
		requests corev1.ResourceList
		limits   corev1.ResourceList
	}{
		{"none named", corev1.ResourceRequirements{},
			corev1.ResourceList{corev1.ResourceCPU: q("50m"), corev1.ResourceMemory: q("128Mi")},
			corev1.ResourceList{corev1.ResourceMemory: q("1Gi")}},
		{"a larger memory limit", corev1.ResourceRequirements{Limits: corev1.ResourceList{corev1.ResourceMemory: q("4Gi")}},
			corev1.ResourceList{corev1.ResourceCPU: q("50m"), corev1.ResourceMemory: q("128Mi")},
			corev1.ResourceList{corev1.ResourceMemory: q("4Gi")}},
		{"a memory limit below the default request", corev1.ResourceRequirements{Limits: corev1.ResourceList{corev1.ResourceMemory: q("64Mi")}},
			corev1.ResourceList{corev1.ResourceCPU: q("50m"), corev1.ResourceMemory: q("64Mi")},
			corev1.ResourceList{corev1.ResourceMemory: q("64Mi")}},
		{"a memory request above the default limit", corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceMemory: q("2Gi")}},
			corev1.ResourceList{corev1.ResourceCPU: q("50m"), corev1.ResourceMemory: q("2Gi")},
			corev1.ResourceList{corev1.ResourceMemory: q("2Gi")}},
		{"a CPU limit below the default request", corev1.ResourceRequirements{Limits: corev1.ResourceList{corev1.ResourceCPU: q("20m")}},
			corev1.ResourceList{corev1.ResourceCPU: q("20m"), corev1.ResourceMemory: q("128Mi")},
			corev1.ResourceList{corev1.ResourceCPU: q("20m"), corev1.ResourceMemory: q("1Gi")}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			agent := testAgent()
			if agent.Spec.Workers == nil {
				agent.Spec.Workers = &agentsv1.WorkersSpec{}
			}
			agent.Spec.Workers.Resources = c.spec
			resolved, blocker := Resolve(agent, observed(), testDefaults)
			if blocker != nil {
				t.Fatal(blocker)
			}
			w, err := Worker(resolved)
			if err != nil {
				t.Fatal(err)
			}
			got := w.Deployment.Spec.Template.Spec.Containers[0].Resources
			for _, want := range []struct {
				what      string
				got, want corev1.ResourceList
			}{{"requests", *got.Requests, c.requests}, {"limits", *got.Limits, c.limits}} {
				if len(want.got) != len(want.want) {
					t.Errorf("%s = %v, want %v", want.what, want.got, want.want)
				}
				for name, q := range want.want {
					if g := want.got[name]; g.Cmp(q) != 0 {
						t.Errorf("%s[%s] = %s, want %s", want.what, name, g.String(), q.String())
					}
				}
			}
		})
	}
}

func TestWorkerNetworkPolicyComesWithTheOperatorsSetting(t *testing.T) {
	for _, p := range []*WorkerNetworkPolicy{nil, {}, {MetricsNamespace: "monitoring"}} {
		defaults := testDefaults
		defaults.WorkerNetworkPolicy = p
		resolved, blocker := Resolve(testAgent(), observed(), defaults)
		if blocker != nil {
			t.Fatal(blocker)
		}
		w, err := Worker(resolved)
		if err != nil {
			t.Fatal(err)
		}
		if p == nil {
			if w.NetworkPolicy != nil {
				t.Error("an operator that makes no NetworkPolicies rendered one")
			}
			continue
		}
		spec := w.NetworkPolicy.Spec
		if len(spec.Ingress) != 2 || *spec.Ingress[0].Ports[0].Port != intstr.FromInt32(HealthPort) || len(spec.Ingress[0].From) != 0 ||
			*spec.Ingress[1].Ports[0].Port != intstr.FromInt32(MetricsPort) {
			t.Fatalf("ingress = %+v, want the probe port from anywhere and the metrics port", spec.Ingress)
		}
		from := spec.Ingress[1].From
		if p.MetricsNamespace == "" && len(from) != 0 {
			t.Errorf("with no metrics namespace, metrics are let in from %+v", from)
		}
		if p.MetricsNamespace != "" && (len(from) != 1 || from[0].NamespaceSelector.MatchLabels[corev1.LabelMetadataName] != "monitoring") {
			t.Errorf("metrics are let in from %+v, want the monitoring namespace only", from)
		}
		if !maps.Equal(spec.PodSelector.MatchLabels, SelectorLabels(testAgent().Name)) {
			t.Errorf("the policy selects %v", spec.PodSelector.MatchLabels)
		}
	}
}
