package workerconfig

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Definition is the agent definition.
type Definition struct {
	Name              string        `json:"name"`
	Instructions      string        `json:"instructions,omitempty"`
	Model             Model         `json:"model"`
	ModelChoices      []ModelChoice `json:"modelChoices,omitempty"`
	ToolPolicies      []ToolPolicy  `json:"toolPolicies,omitempty"`
	DefaultToolEffect string        `json:"defaultToolEffect"`
	BuiltInTools      []string      `json:"builtInTools,omitempty"`
	PlanMode          *PlanMode     `json:"planMode,omitempty"`
	Compaction        *Compaction   `json:"compaction,omitempty"`
	Limits            Limits        `json:"limits"`
}

// Model selects the model client.
type Model struct {
	Provider        string     `json:"provider"`
	Name            string     `json:"name"`
	BaseURL         string     `json:"baseURL,omitempty"`
	APIKey          *SecretEnv `json:"apiKey,omitempty"`
	MaxOutputTokens *int32     `json:"maxOutputTokens,omitempty"`
	ReasoningEffort string     `json:"reasoningEffort,omitempty"`
}

// ModelChoice is a model a session chooses with its "model" setting.
type ModelChoice struct {
	Choice string `json:"choice"`
	Model  Model  `json:"model"`
}

// ToolPolicy sets the effect class and approval of one tool.
type ToolPolicy struct {
	Name             string `json:"name"`
	Effect           string `json:"effect"`
	RequiresApproval *bool  `json:"requiresApproval,omitempty"`
}

// PlanMode configures plan mode.
type PlanMode struct {
	PlanningToolChoice string `json:"planningToolChoice"`
}

// Compaction is the compaction policy.
type Compaction struct {
	ContextWindowTokens int64   `json:"contextWindowTokens"`
	TriggerRatio        float64 `json:"triggerRatio"`
	KeepRatio           float64 `json:"keepRatio"`
	// RetainedMessageLimit is how many newest messages retention keeps; 0
	// keeps every message.
	RetainedMessageLimit int32 `json:"retainedMessageLimit"`
}

// Limits bound one session.
type Limits struct {
	MaxModelCallsPerTurn int32 `json:"maxModelCallsPerTurn"`
	// InterruptDeadline is zero when interrupts never expire.
	InterruptDeadline        metav1.Duration `json:"interruptDeadline"`
	MaxDurableWait           metav1.Duration `json:"maxDurableWait"`
	EventStreamCapacityBytes int64           `json:"eventStreamCapacityBytes"`
}
