package render

import (
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1ac "k8s.io/client-go/applyconfigurations/meta/v1"

	agentsv1 "github.com/stepwise-run/stepwise/api/v1alpha1"
)

// Labels and annotations on the objects the operator owns.
const (
	// LabelAgent names the Agent that owns an object; with LabelName it
	// selects the Agent's worker pods.
	LabelAgent = "agents.stepwise.run/agent"
	// LabelEngineVersion is the session engine version of a worker pod.
	LabelEngineVersion = "agents.stepwise.run/engine-version"
	// LabelName, LabelInstance and LabelManagedBy are the recommended labels.
	LabelName      = "app.kubernetes.io/name"
	LabelInstance  = "app.kubernetes.io/instance"
	LabelManagedBy = "app.kubernetes.io/managed-by"
	// LabelMediaStore marks an Agent's worker Deployment with the
	// MediaStore its workers use, so the store is kept while they do.
	LabelMediaStore = "agents.stepwise.run/media-store"
	// LabelComponent says which part of an Agent's workers an object is.
	LabelComponent = "app.kubernetes.io/component"
	// ComponentWorkerConfig is the LabelComponent value of worker
	// configuration ConfigMaps.
	ComponentWorkerConfig = "worker-config"
	// MetricsPortName names the worker container's metrics port, which the
	// chart's PodMonitor scrapes.
	MetricsPortName = "metrics"
	// ComponentWorker is the LabelComponent value of worker Deployments
	// and pods; the chart's PodMonitor selects pods by it.
	ComponentWorker = "worker"
	// AnnotationConfigDigest is the config digest a pod template was rendered
	// with; a new digest rolls the workers.
	AnnotationConfigDigest = "agents.stepwise.run/config-digest"
	// AnnotationGraphDigest is the digest of a published Flow graph.
	AnnotationGraphDigest = "agents.stepwise.run/graph-digest"

	// FieldOwner is the field manager of every object the operator applies.
	FieldOwner = "stepwise-operator"

	// ManagedBy is the value of LabelManagedBy on every owned object; the
	// operator caches only objects that carry it.
	ManagedBy = "stepwise-operator"

	workerAppName          = "agent-worker"
	configVolume           = "config"
	componentSessionGraph  = "session-graph"
	componentEventHubToken = "event-hub-token"
	// componentEngineCredentials labels the Secret that carries a
	// ClusterEngine's credentials to an Agent's workers.
	componentEngineCredentials = "engine-credentials"
)

// WorkerName is the name of an Agent's Deployment and ServiceAccount.
func WorkerName(agentName string) string { return agentName + "-worker" }

// ConfigMapName is the name of the immutable worker configuration ConfigMap
// with a config digest. Each configuration gets its own, so pods of an
// earlier rollout, and a rollback, keep reading the configuration their
// template names.
func ConfigMapName(agentName, configDigest string) string {
	sum := strings.TrimPrefix(configDigest, "sha256:")
	return agentName + "-worker-config-" + sum[:min(10, len(sum))]
}

// GraphConfigMapName is the name of an Agent's session Flow graph ConfigMap.
func GraphConfigMapName(agentName string) string { return agentName + "-session-graph" }

// GraphFileName is the key of the graph document in its ConfigMap.
const GraphFileName = "graph.json"

// ConfigMapOf names the worker configuration ConfigMap a pod template
// mounts, or "".
func ConfigMapOf(template *corev1.PodTemplateSpec) string {
	for _, v := range template.Spec.Volumes {
		if v.Name == configVolume && v.ConfigMap != nil {
			return v.ConfigMap.Name
		}
	}
	return ""
}

// SelectorLabels select an Agent's worker pods. They never change, because
// a Deployment's selector cannot.
func SelectorLabels(agentName string) map[string]string {
	return map[string]string{LabelName: workerAppName, LabelAgent: agentName}
}

// Selector is SelectorLabels as the text the scale subresource reports.
func Selector(agentName string) string {
	return LabelAgent + "=" + agentName + "," + LabelName + "=" + workerAppName
}

// EventHubSecretName is the Secret holding an Agent's event hub publish
// token, under EventHubTokenKey.
func EventHubSecretName(agentName string) string { return agentName + "-event-hub" }

// EventHubTokenKey is the key of the publish token in its Secret.
const EventHubTokenKey = "token"

// DisruptionBudgetName is the name of an Agent's worker PodDisruptionBudget.
func DisruptionBudgetName(agentName string) string { return WorkerName(agentName) }

// NetworkPolicyName is the name of an Agent's worker NetworkPolicy.
func NetworkPolicyName(agentName string) string { return WorkerName(agentName) }

func objectLabels(agentName, component string) map[string]string {
	return map[string]string{
		LabelName:      workerAppName,
		LabelInstance:  agentName,
		LabelComponent: component,
		LabelManagedBy: ManagedBy,
		LabelAgent:     agentName,
	}
}

func ownerReference(agent *agentsv1.Agent) *metav1ac.OwnerReferenceApplyConfiguration {
	return metav1ac.OwnerReference().
		WithAPIVersion(agentsv1.GroupVersion.String()).
		WithKind("Agent").
		WithName(agent.Name).
		WithUID(agent.UID).
		WithController(true).
		WithBlockOwnerDeletion(true)
}
