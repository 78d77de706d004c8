package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// WorkerVersionState is where one worker version stands in a rollout.
// +kubebuilder:validation:Enum=Pending;Ramping;Current;Draining;Drained
type WorkerVersionState string

// Worker version states.
const (
	// WorkerVersionPending: the desired version waits for workers it may
	// not run beside to stop.
	WorkerVersionPending WorkerVersionState = "Pending"
	// WorkerVersionRamping: the desired version is starting.
	WorkerVersionRamping WorkerVersionState = "Ramping"
	// WorkerVersionCurrent: the desired version runs, fully available.
	WorkerVersionCurrent WorkerVersionState = "Current"
	// WorkerVersionDraining: an earlier version whose workers are stopping,
	// or, in a versioned rollout, whose sessions are moving to the current
	// version between turns.
	WorkerVersionDraining WorkerVersionState = "Draining"
	// WorkerVersionDrained: an earlier version without workers whose
	// record the engine still keeps; the operator deletes it once the
	// engine lets it.
	WorkerVersionDrained WorkerVersionState = "Drained"
)

// WorkerVersion is one version of the Agent's workers: an image carrying
// an engine version.
type WorkerVersion struct {
	// BuildID names the version: its engine version and a digest of its
	// image.
	// +required
	BuildID string `json:"buildID"`
	// EngineVersion is the session engine version these workers run.
	// +required
	EngineVersion string `json:"engineVersion"`
	// Image is the worker image.
	// +optional
	Image string `json:"image,omitempty"`
	// Replicas is how many worker pods run this version, terminating ones
	// left out.
	// +optional
	Replicas int32 `json:"replicas"`
	// ReadyReplicas is how many of them are ready.
	// +optional
	ReadyReplicas int32 `json:"readyReplicas"`
	// TerminatingReplicas is how many of its pods are terminating.
	// +optional
	TerminatingReplicas int32 `json:"terminatingReplicas"`
	// State is where the version stands in the rollout.
	// +required
	State WorkerVersionState `json:"state"`
	// Since is when the version entered its state.
	// +optional
	Since metav1.Time `json:"since,omitempty"`
}

// PublishedFlowGraph locates the session Flow graph the operator published.
type PublishedFlowGraph struct {
	// ConfigMapName is the ConfigMap, in the Agent's namespace, that holds the
	// graph document.
	// +required
	ConfigMapName string `json:"configMapName"`

	// Digest is the SHA-256 of the graph document.
	// +required
	Digest string `json:"digest"`
}

// AgentStatus reports what the operator applied and what is running.
type AgentStatus struct {
	// ObservedGeneration is the generation of the last pass that reached a
	// verdict: applied, or blocked for the reason Ready gives. A pass that
	// failed to read or write leaves it alone.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`

	// Conditions report the Agent's state; see the Condition* constants.
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`

	// Replicas is the number of worker pods, of any version. A pass that
	// could not read the workers leaves it as it was.
	// +optional
	// +kubebuilder:default=0
	Replicas int32 `json:"replicas"`

	// ReadyReplicas is the number of ready worker pods. A pass that could
	// not read the workers leaves it as it was.
	// +optional
	// +kubebuilder:default=0
	ReadyReplicas int32 `json:"readyReplicas"`

	// Selector is the label selector of the worker pods, for the scale
	// subresource.
	// +optional
	Selector string `json:"selector,omitempty"`

	// WorkerVersions lists the desired worker version first, then every
	// other version that still has pods, a Deployment, or an engine record.
	// +optional
	// +listType=map
	// +listMapKey=buildID
	WorkerVersions []WorkerVersion `json:"workerVersions,omitempty"`
	// RolloutStrategy is how the rollout to the desired worker version moves
	// the workers: Versioned where the engine offers Worker Deployments and
	// the engine versions let sessions move between turns, otherwise
	// Rolling where the worker version rules let the versions run beside
	// each other, and StopOldFirst where they do not.
	// +optional
	// +kubebuilder:validation:Enum=Versioned;Rolling;StopOldFirst
	RolloutStrategy string `json:"rolloutStrategy,omitempty"`
	// SessionFeatures lists the session features in effect: those every
	// worker that can take a session of the Flow type serves. Clients
	// refuse the others.
	// +optional
	// +listType=set
	SessionFeatures []string `json:"sessionFeatures,omitempty"`

	// TaskQueue is the engine task queue new sessions start on:
	// stepwise/<namespace>/<flowType> once workers of engine 0.8.0 or later
	// take them, the shared stepwise/<flowType> before.
	// +optional
	TaskQueue string `json:"taskQueue,omitempty"`

	// SharedTaskQueue is set while the Agent's workers serve sessions
	// under the names one Flow type shares across a Temporal namespace,
	// which workers of engine 0.7.0 and earlier use: the shared task
	// queue. Workers of 0.8.0 and later move those sessions to the
	// Agent's own names between turns; once none is left, it is cleared,
	// and the Agent never takes the shared names again.
	// +optional
	SharedTaskQueue string `json:"sharedTaskQueue,omitempty"`

	// EngineID is the engine's ID of the Temporal namespace the workers run
	// on, which Flow type claims are keyed by.
	// +optional
	EngineID string `json:"engineID,omitempty"`

	// ConfigDigest is the digest of the applied worker configuration, with
	// the hashes of the Secret values it references. Workers roll when it
	// changes.
	// +optional
	ConfigDigest string `json:"configDigest,omitempty"`

	// SessionFlowGraph is the published session Flow graph.
	// +optional
	SessionFlowGraph *PublishedFlowGraph `json:"sessionFlowGraph,omitempty"`

	// Spend is what the Agent's sessions spent in the current window of
	// its agent budget, as the engine's counter last answered; unset
	// without an agent budget.
	// +optional
	Spend *SpendStatus `json:"spend,omitempty"`
}

// SpendStatus is an Agent's spend against its agent budget in one window.
type SpendStatus struct {
	// WindowStart is when the current window began.
	WindowStart metav1.Time `json:"windowStart"`
	// WindowEnd is when the current window ends and the counts start again
	// from zero.
	WindowEnd metav1.Time `json:"windowEnd"`
	// Tokens are the input and output tokens spent in the window.
	Tokens int64 `json:"tokens"`
	// TokenBudget is the agent budget's tokens; unset without one.
	// +optional
	TokenBudget *int64 `json:"tokenBudget,omitempty"`
	// Cost is the cost spent in the window, in the currency of prices, as a
	// decimal.
	// +optional
	Cost string `json:"cost,omitempty"`
	// CostBudget is the agent budget's cost; unset without one.
	// +optional
	CostBudget string `json:"costBudget,omitempty"`
	// ModelCalls counts the model calls the window recorded.
	ModelCalls int64 `json:"modelCalls"`
	// Reached is true when the window's spend reached the budget: no more
	// model calls are made until the window ends.
	Reached bool `json:"reached"`
}
