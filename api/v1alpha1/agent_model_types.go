package v1alpha1

// ModelProvider names a family of model APIs.
// +kubebuilder:validation:Enum=openai;openai-compatible;anthropic;scripted
type ModelProvider string

// Model providers.
const (
	// ModelProviderOpenAI is the OpenAI Responses API.
	ModelProviderOpenAI ModelProvider = "openai"
	// ModelProviderOpenAICompatible is the Chat Completions API of an
	// OpenAI-compatible server at spec.model.baseURL (vLLM, Ollama, LM Studio,
	// gateways).
	ModelProviderOpenAICompatible ModelProvider = "openai-compatible"
	// ModelProviderAnthropic is the Anthropic Messages API.
	ModelProviderAnthropic ModelProvider = "anthropic"
	// ModelProviderScripted answers from a script built into the worker, with
	// no model key: for demos, tutorials and tests.
	ModelProviderScripted ModelProvider = "scripted"
)

// ModelSpec selects the model client and model.
//
// +kubebuilder:validation:XValidation:rule="self.provider != 'openai-compatible' || has(self.baseURL)",message="baseURL is required for provider openai-compatible",fieldPath=".baseURL"
// +kubebuilder:validation:XValidation:rule="!(self.provider in ['openai', 'anthropic']) || has(self.apiKeySecretRef)",message="apiKeySecretRef is required for providers openai and anthropic",fieldPath=".apiKeySecretRef"
// +kubebuilder:validation:XValidation:rule="self.provider != 'scripted' || (!has(self.baseURL) && !has(self.apiKeySecretRef))",message="a scripted model takes neither baseURL nor apiKeySecretRef",fieldPath=".provider"
type ModelSpec struct {
	// Provider is the model API to call.
	// +required
	Provider ModelProvider `json:"provider"`

	// Name is the model name the provider knows, such as gpt-5-mini, or for
	// the scripted provider the name of a script built into the worker.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=256
	Name string `json:"name"`

	// BaseURL overrides the provider's API endpoint. Required for
	// openai-compatible.
	// +optional
	// +kubebuilder:validation:MaxLength=2048
	// +kubebuilder:validation:Pattern=`^https?://[^\s]+$`
	BaseURL string `json:"baseURL,omitempty"`

	// APIKeySecretRef selects the Secret key that holds the API key. The key
	// reaches workers through their environment and never appears in session
	// state, events, logs or errors.
	// +optional
	APIKeySecretRef *SecretKeyReference `json:"apiKeySecretRef,omitempty"`

	// Settings tune every model call.
	// +optional
	Settings *ModelSettings `json:"settings,omitempty"`
}

// ModelChoice is a model a session may choose by name.
type ModelChoice struct {
	// Choice is the value of the "model" session setting that selects this
	// model.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=100
	// +kubebuilder:validation:Pattern=`^[A-Za-z0-9][A-Za-z0-9._:/-]*$`
	Choice string `json:"choice"`

	// Model selects the model client and model of this choice.
	// +required
	Model ModelSpec `json:"model"`
}

// ReasoningEffort asks a reasoning model for more or less thinking.
// +kubebuilder:validation:Enum=none;minimal;low;medium;high;xhigh
type ReasoningEffort string

// ModelSettings tune every model call.
type ModelSettings struct {
	// MaxOutputTokens caps the tokens of one model response.
	// +optional
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=1048576
	MaxOutputTokens *int32 `json:"maxOutputTokens,omitempty"`

	// ReasoningEffort asks a reasoning model for more or less thinking.
	// +optional
	ReasoningEffort ReasoningEffort `json:"reasoningEffort,omitempty"`
}
