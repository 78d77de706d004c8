package render

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	appsv1ac "k8s.io/client-go/applyconfigurations/apps/v1"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"
	networkingv1ac "k8s.io/client-go/applyconfigurations/networking/v1"
	policyv1ac "k8s.io/client-go/applyconfigurations/policy/v1"

	agentsv1 "github.com/stepwise-run/stepwise/api/v1alpha1"
	"github.com/stepwise-run/stepwise/internal/session"
	"github.com/stepwise-run/stepwise/pkg/workerconfig"
)

// Paths and ports inside a worker pod.
const (
	ConfigDir    = "/etc/stepwise/worker"
	EngineTLSDir = "/etc/stepwise/engine-tls"
	// TracingCAFile is where a worker reads the CA certificates of the
	// Agent's OTLP endpoint.
	TracingCAFile = "/etc/stepwise/tracing-ca/ca.crt"
	HealthPort    = 8080
	healthAddress = ":8080"
	// MetricsPort serves /metrics for Prometheus, apart from the probes.
	MetricsPort    = 9090
	metricsAddress = ":9090"
	// debugAddress serves one session's recent events inside the pod
	// only; `kubectl port-forward` reaches it for those Kubernetes allows.
	debugAddress = "127.0.0.1:8081"

	// EnvPodName carries the pod's name, the worker's identity on the engine.
	EnvPodName = "STEPWISE_POD_NAME"
	// secretEnvPrefix starts the names of variables that carry Secret values.
	secretEnvPrefix = "STEPWISE_SECRET_"

	// maxConfigBytes keeps the config document well under a ConfigMap's
	// 1 MiB limit.
	maxConfigBytes = 900 * 1024

	// maxStopTimeout caps how long a stopping worker waits for its running
	// Steps: the longest tool attempt. A Step still running after it is
	// retried or recorded outcome_unknown by its effect class.
	maxStopTimeout = session.ToolAttemptTimeout
	// stopMargin is what the kubelet allows beyond the worker's own stop
	// timeout, for the worker to leave its polls and exit.
	stopMargin = 15 * time.Second
)

// StopTimeout is how long a stopping worker lets its running Steps finish:
// the longest Step attempt the Agent allows, capped at an hour. A model
// call may take ModelAttemptTimeout; an MCP tool call its source's request
// timeout, and a stdio task poll its task wait besides; a worker image of
// the team's own may hold function tools, which may take ToolAttemptTimeout.
// The pod's grace period is this plus a margin, so a drain or a rollout
// never kills a Step the Agent lets run.
func StopTimeout(r *Resolved) time.Duration {
	longest := session.ModelAttemptTimeout
	if w := workers(r.Agent); w.Image != "" {
		longest = max(longest, session.ToolAttemptTimeout)
	}
	for _, ts := range r.ToolSources {
		d := durationOr(ts.Spec.RequestTimeout, fallbackRequestTimeout).Duration
		if ts.Spec.MCP.Stdio != nil {
			d += durationOr(ts.Spec.TaskWaitTimeout, fallbackTaskWaitTimeout).Duration
		}
		longest = max(longest, d)
	}
	return min(longest, maxStopTimeout)
}

// WorkerObjects is everything the operator applies for one Agent's workers.
type WorkerObjects struct {
	Config         workerconfig.Config
	ConfigDocument []byte
	// ConfigDigest covers the config document and the hashes of the Secret
	// values the workers receive.
	ConfigDigest   string
	ConfigMap      *corev1ac.ConfigMapApplyConfiguration
	ServiceAccount *corev1ac.ServiceAccountApplyConfiguration // nil when the Agent names its own
	Deployment     *appsv1ac.DeploymentApplyConfiguration
	// DisruptionBudget lets a node drain evict one worker at a time, so the
	// others keep their task slots while it stops.
	DisruptionBudget *policyv1ac.PodDisruptionBudgetApplyConfiguration
	// NetworkPolicy opens the workers' probe port to all and their metrics
	// port to the metrics namespace only; nil when the operator makes no
	// NetworkPolicies.
	NetworkPolicy *networkingv1ac.NetworkPolicyApplyConfiguration
	// EventHubSecret holds the Agent's publish token; nil when the operator
	// has no event hub.
	EventHubSecret *corev1ac.SecretApplyConfiguration
	// EngineSecret carries the ClusterEngine's credentials to the workers;
	// nil for an engine of the namespace's own, or one that takes none.
	EngineSecret *corev1ac.SecretApplyConfiguration
}

// PublishedGraph is the session Flow graph of one Agent, as published.
type PublishedGraph struct {
	Digest    string
	ConfigMap *corev1ac.ConfigMapApplyConfiguration
}

// Worker builds the worker objects of a resolved Agent.
func Worker(r *Resolved) (*WorkerObjects, error) {
	if b := checkMediaVolume(r); b != nil {
		return nil, b
	}
	envs := secretEnvs{}
	cfg, err := workerConfig(r, envs)
	if err != nil {
		return nil, err
	}
	secretDigests := r.SecretDigests
	var hubSecret *corev1ac.SecretApplyConfiguration
	if hub := r.EventHub; hub != nil {
		token := r.EventHubToken
		if token == "" {
			return nil, errors.New("the Agent has an event hub but no publish token was signed for it")
		}
		name := EventHubSecretName(r.Agent.Name)
		cfg.EventHub = &workerconfig.EventHub{URL: hub.URL, Token: *envs.ref(name, EventHubTokenKey)}
		hubSecret = corev1ac.Secret(name, r.Agent.Namespace).
			WithLabels(objectLabels(r.Agent.Name, componentEventHubToken)).
			WithOwnerReferences(ownerReference(r.Agent)).
			WithType(corev1.SecretTypeOpaque).
			WithData(map[string][]byte{EventHubTokenKey: []byte(token)})
		// A new token rolls the workers, which read it at start.
		sum := sha256.Sum256([]byte(token))
		secretDigests = append(slices.Clip(secretDigests), SecretKeyDigest{Secret: name, Key: EventHubTokenKey, SHA256: hex.EncodeToString(sum[:])})
	}
	doc, err := cfg.Encode()
	if err != nil {
		return nil, err
	}
	if len(doc) > maxConfigBytes {
		return nil, &Blocker{Reason: agentsv1.ReasonInvalidSpec, Message: fmt.Sprintf(
			"the rendered worker configuration is %d bytes, over the limit of %d; shorten spec.instructions or the tool sources", len(doc), maxConfigBytes)}
	}
	digest := configDigest(doc, secretDigests)
	agent := r.Agent
	w := &WorkerObjects{Config: cfg, ConfigDocument: doc, ConfigDigest: digest, EventHubSecret: hubSecret}
	if data := r.EngineCredentials.secretData(); r.ClusterEngine != "" && len(data) > 0 {
		w.EngineSecret = corev1ac.Secret(EngineSecretName(r.Agent.Name), r.Agent.Namespace).
			WithLabels(objectLabels(r.Agent.Name, componentEngineCredentials)).
			WithOwnerReferences(ownerReference(r.Agent)).
			WithType(corev1.SecretTypeOpaque).
			WithData(data)
	}

	w.ConfigMap = corev1ac.ConfigMap(ConfigMapName(agent.Name, digest), agent.Namespace).
		WithLabels(objectLabels(agent.Name, ComponentWorkerConfig)).
		WithAnnotations(map[string]string{AnnotationConfigDigest: digest}).
		WithOwnerReferences(ownerReference(agent)).
		WithImmutable(true).
		WithData(map[string]string{workerconfig.FileName: string(doc)})

	serviceAccount := workers(agent).ServiceAccountName
	if serviceAccount == "" {
		serviceAccount = WorkerName(agent.Name)
		w.ServiceAccount = corev1ac.ServiceAccount(serviceAccount, agent.Namespace).
			WithLabels(objectLabels(agent.Name, ComponentWorker)).
			WithOwnerReferences(ownerReference(agent))
	}
	w.Deployment = deployment(r, envs, serviceAccount, digest)
	w.DisruptionBudget = disruptionBudget(r.Agent)
	if r.WorkerNetworkPolicy != nil {
		w.NetworkPolicy = networkPolicy(r.Agent, *r.WorkerNetworkPolicy)
	}
	return w, nil
}

// Graph builds the published session Flow graph of an Agent: the graph of
// the engine version its workers run, which may be older than the
// operator's own.
func Graph(agent *agentsv1.Agent, engineVersion string) (*PublishedGraph, error) {
	graph, err := session.Graph(agent.Spec.FlowType, engineVersion)
	if err != nil {
		return nil, err
	}
	doc, digest, err := graph.Document()
	if err != nil {
		return nil, err
	}
	cm := corev1ac.ConfigMap(GraphConfigMapName(agent.Name), agent.Namespace).
		WithLabels(objectLabels(agent.Name, componentSessionGraph)).
		WithAnnotations(map[string]string{AnnotationGraphDigest: digest}).
		WithOwnerReferences(ownerReference(agent)).
		WithData(map[string]string{GraphFileName: string(doc)})
	return &PublishedGraph{Digest: digest, ConfigMap: cm}, nil
}

func orDefault[T comparable](v, fallback T) T {
	var zero T
	if v == zero {
		return fallback
	}
	return v
}

func durationOr(d *metav1.Duration, fallback time.Duration) metav1.Duration {
	if d == nil {
		return metav1.Duration{Duration: fallback}
	}
	return *d
}
