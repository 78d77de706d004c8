package v1alpha1

import (
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// PlanningToolChoice says whether a planning turn forces a write_todos call.
// +kubebuilder:validation:Enum=auto;required
type PlanningToolChoice string

// PlanModeSpec configures plan mode.
type PlanModeSpec struct {
	// Enabled turns plan mode on. It needs write_todos in builtInTools.
	// +required
	Enabled bool `json:"enabled"`

	// PlanningToolChoice is auto to let a planning turn answer in text, such
	// as with a clarifying question, or required to force write_todos on the
	// first model call of a planning turn while no draft exists.
	// +optional
	// +kubebuilder:default=auto
	PlanningToolChoice PlanningToolChoice `json:"planningToolChoice,omitempty"`
}

// CompactionSpec is the compaction policy.
//
// +kubebuilder:validation:XValidation:rule="self.keepRatio < self.triggerRatio",message="keepRatio must be less than triggerRatio, or a compaction would not bring the input under the trigger",fieldPath=".keepRatio"
type CompactionSpec struct {
	// ContextWindowTokens is the model's context window, in tokens.
	// +required
	// +kubebuilder:validation:Minimum=1024
	// +kubebuilder:validation:Maximum=100000000
	ContextWindowTokens int64 `json:"contextWindowTokens"`

	// TriggerRatio is the share of the context window at which a model call
	// first compacts the conversation. Between 0 and 1, exclusive.
	// +optional
	// +kubebuilder:default=0.85
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:ExclusiveMinimum=true
	// +kubebuilder:validation:Maximum=1
	// +kubebuilder:validation:ExclusiveMaximum=true
	TriggerRatio float64 `json:"triggerRatio,omitempty"`

	// KeepRatio is the share of the context window that the newest messages
	// may keep unsummarized. Between 0 and 1, exclusive, and below
	// triggerRatio.
	// +optional
	// +kubebuilder:default=0.3
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:ExclusiveMinimum=true
	// +kubebuilder:validation:Maximum=1
	// +kubebuilder:validation:ExclusiveMaximum=true
	KeepRatio float64 `json:"keepRatio,omitempty"`

	// RetainedMessageLimit is how many of the newest messages retention
	// always keeps; older messages that a summary covers are deleted. 0 keeps
	// every message.
	// +optional
	// +kubebuilder:default=1000
	// +kubebuilder:validation:Minimum=0
	RetainedMessageLimit *int32 `json:"retainedMessageLimit,omitempty"`
}

// LimitsSpec bounds what one session may do.
type LimitsSpec struct {
	// MaxModelCallsPerTurn is how many model calls one turn may make. The call
	// after the last offers no tools, and a tool call the model makes anyway
	// is not run.
	// +optional
	// +kubebuilder:default=100
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=10000
	MaxModelCallsPerTurn int32 `json:"maxModelCallsPerTurn,omitempty"`

	// InterruptDeadline is how long an approval or a question waits for a
	// person before it expires, on the engine's clock. Unset, they wait until
	// answered.
	// +optional
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:Pattern=`^([0-9]+(\.[0-9]+)?(ns|us|ms|s|m|h))+$`
	// +kubebuilder:validation:XValidation:rule="duration(self) >= duration('1s')",message="interruptDeadline must be at least 1s"
	InterruptDeadline *metav1.Duration `json:"interruptDeadline,omitempty"`

	// MaxDurableWait is the longest wait the durable_wait tool accepts.
	// +optional
	// +kubebuilder:default="8760h"
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:Pattern=`^([0-9]+(\.[0-9]+)?(ns|us|ms|s|m|h))+$`
	// +kubebuilder:validation:XValidation:rule="duration(self) >= duration('1s')",message="maxDurableWait must be at least 1s"
	MaxDurableWait *metav1.Duration `json:"maxDurableWait,omitempty"`

	// EventStreamCapacity is how many bytes of live session events, such as
	// text deltas, a session keeps for browsers that reconnect.
	// +optional
	// +kubebuilder:default="10Mi"
	// +kubebuilder:validation:XValidation:rule="quantity(string(self)).compareTo(quantity('64Ki')) >= 0 && quantity(string(self)).compareTo(quantity('1Gi')) <= 0",message="eventStreamCapacity must be between 64Ki and 1Gi"
	EventStreamCapacity *resource.Quantity `json:"eventStreamCapacity,omitempty"`
}
