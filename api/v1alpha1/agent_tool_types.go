package v1alpha1

// ToolEffect is what a tool call may do to the world, which decides its tool
// Step, its retries and its default approval.
// +kubebuilder:validation:Enum=read;idempotent_write;non_idempotent_write;unclassified
type ToolEffect string

// Tool effects.
const (
	// ToolEffectRead changes nothing: retried up to 3 attempts, then failed.
	ToolEffectRead ToolEffect = "read"
	// ToolEffectIdempotentWrite may be repeated with the same idempotency key:
	// retried up to 3 attempts, then outcome unknown.
	ToolEffectIdempotentWrite ToolEffect = "idempotent_write"
	// ToolEffectNonIdempotentWrite must not be repeated: one attempt, then
	// outcome unknown; needs approval by default.
	ToolEffectNonIdempotentWrite ToolEffect = "non_idempotent_write"
	// ToolEffectUnclassified is treated as a non-idempotent write.
	ToolEffectUnclassified ToolEffect = "unclassified"
)

// ToolPolicy sets the effect class and approval of one tool.
type ToolPolicy struct {
	// Name of the tool as the model sees it.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=64
	// +kubebuilder:validation:Pattern=`^[A-Za-z0-9_-]+$`
	Name string `json:"name"`

	// Effect is the tool's effect class.
	// +required
	Effect ToolEffect `json:"effect"`

	// RequiresApproval says whether each call waits for a person to approve
	// it. Unset, non_idempotent_write and unclassified tools need approval and
	// read and idempotent_write tools do not.
	// +optional
	RequiresApproval *bool `json:"requiresApproval,omitempty"`
}

// BuiltInTool names a tool the session itself provides.
// +kubebuilder:validation:Enum=ask_user;durable_wait;write_todos
type BuiltInTool string

// Built-in tools.
const (
	// BuiltInToolAskUser asks the user a question and waits for the answer.
	BuiltInToolAskUser BuiltInTool = "ask_user"
	// BuiltInToolDurableWait waits on an engine timer, holding no worker.
	BuiltInToolDurableWait BuiltInTool = "durable_wait"
	// BuiltInToolWriteTodos replaces the session's plan.
	BuiltInToolWriteTodos BuiltInTool = "write_todos"
)
