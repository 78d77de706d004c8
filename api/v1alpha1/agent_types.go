package v1alpha1

import (
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// AgentSpec defines one agent session Flow type: its model, tools, policies
// and limits, and the pool of workers that runs its sessions.
//
// +kubebuilder:validation:XValidation:rule="!has(self.planMode) || !self.planMode.enabled || (has(self.builtInTools) && 'write_todos' in self.builtInTools)",message="planMode.enabled requires write_todos in builtInTools: a planning turn writes its plan with write_todos",fieldPath=".planMode.enabled"
// +kubebuilder:validation:XValidation:rule="!has(self.toolPolicies) || !has(self.builtInTools) || self.toolPolicies.all(p, !(p.name in self.builtInTools))",message="toolPolicies may not name an enabled built-in tool: its name is reserved and it always runs as a read without approval",fieldPath=".toolPolicies"
// +kubebuilder:validation:XValidation:rule="!(has(self.engine) && has(self.engineRef))",message="engine and engineRef are exclusive: name a ClusterEngine, or an engine of the namespace's own",fieldPath=".engineRef"
// +kubebuilder:validation:XValidation:rule="!has(self.spendLimit) || !has(self.spendLimit.agent) || !has(self.spendLimit.agent.cost) || (has(self.spendLimit.prices) && self.spendLimit.prices.exists(p, p.model == self.model.name) && (!has(self.modelChoices) || self.modelChoices.all(c, self.spendLimit.prices.exists(p, p.model == c.model.name))))",message="a cost budget needs a price for spec.model and every model choice",fieldPath=".spendLimit.prices"
type AgentSpec struct {
	// FlowType is the session Flow type name: the Temporal workflow type of
	// every session of this Agent. Its sessions' names on the engine carry
	// it with the Agent's Kubernetes namespace, so at most one Agent of a
	// namespace may claim a Flow type on one engine, and another namespace
	// may use the same Flow type without ever meeting its sessions. It
	// cannot change, because running sessions are registered under it.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=100
	// +kubebuilder:validation:Pattern=`^[A-Za-z][A-Za-z0-9_-]*$`
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="flowType is immutable: running sessions are registered under it; create a new Agent for a new Flow type"
	FlowType string `json:"flowType"`

	// Instructions are the system instructions the model receives on every
	// model call of a session.
	// +optional
	// +kubebuilder:validation:MaxLength=131072
	Instructions string `json:"instructions,omitempty"`

	// Model selects the model client and the model every model call uses,
	// unless the session settings choose one of ModelChoices.
	// +required
	Model ModelSpec `json:"model"`

	// ModelChoices are further models a session may choose with its
	// settings: {"model": "<choice>"} selects the model of that choice from
	// the next turn on. Settings only choose among these; they never name an
	// endpoint or key.
	// +optional
	// +listType=map
	// +listMapKey=choice
	// +kubebuilder:validation:MaxItems=16
	ModelChoices []ModelChoice `json:"modelChoices,omitempty"`

	// ToolSources lists the ToolSources, in this namespace, whose tools the
	// model is offered, in this order, after the worker's function tools and
	// before the built-in tools.
	// +optional
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MaxItems=32
	ToolSources []LocalObjectReference `json:"toolSources,omitempty"`

	// ToolPolicies set the effect class and approval of tools by name. A
	// policy wins over what a tool source says of its tools. For an MCP tool,
	// the name is `<sourceName>__<tool>`.
	// +optional
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MaxItems=256
	ToolPolicies []ToolPolicy `json:"toolPolicies,omitempty"`

	// DefaultToolEffect is the effect class of a tool that has no policy and
	// says nothing of its own effect.
	// +optional
	// +kubebuilder:default=unclassified
	DefaultToolEffect ToolEffect `json:"defaultToolEffect,omitempty"`

	// BuiltInTools enables the session's built-in tools. An enabled name is
	// reserved: no other tool may use it.
	// +optional
	// +listType=set
	// +kubebuilder:validation:MaxItems=3
	BuiltInTools []BuiltInTool `json:"builtInTools,omitempty"`

	// PlanMode lets a user review a plan before the agent executes it.
	// +optional
	PlanMode *PlanModeSpec `json:"planMode,omitempty"`

	// Compaction keeps the model input under the context window by
	// summarizing older messages, and lets retention bound stored messages.
	// Without it, every model call sends every stored message and nothing is
	// deleted.
	// +optional
	Compaction *CompactionSpec `json:"compaction,omitempty"`

	// Limits bound what one session may do.
	// +optional
	// +kubebuilder:default={}
	Limits *LimitsSpec `json:"limits,omitempty"`

	// SpendLimit bounds what the Agent's model calls spend: a budget per
	// window shared by all its sessions, and a budget per session. A model
	// call past a budget is not made; its turn fails with a last turn error
	// that names the budget. Without it, nothing is checked.
	// +optional
	SpendLimit *SpendLimitSpec `json:"spendLimit,omitempty"`

	// Tracing sends the sessions' OpenTelemetry spans to an OTLP receiver:
	// one trace per activation (a user message, or an approval's answer,
	// and the Steps it starts), with a span per model call and tool Step
	// attempt. Without it, the operator's default endpoint is used, if it
	// has one; with neither, nothing is traced.
	// +optional
	Tracing *TracingSpec `json:"tracing,omitempty"`

	// MediaStore names the MediaStore, in this namespace, that holds the
	// image bytes of this Agent's sessions. Without it, sessions refuse
	// images.
	// +optional
	MediaStore *LocalObjectReference `json:"mediaStore,omitempty"`

	// EngineRef names the ClusterEngine, chosen by an administrator, that
	// runs this Agent's sessions. Without it and without engine, the
	// operator's default ClusterEngine is used.
	// +optional
	EngineRef *EngineReference `json:"engineRef,omitempty"`

	// Engine is a Temporal service this namespace chooses itself, with
	// credentials from this namespace's Secrets. The operator accepts it
	// only where an administrator allows namespaces their own engines
	// (--allow-namespace-engines); a Secret it takes an API key or a
	// client certificate from must name this address in its
	// agents.stepwise.run/engine-addresses annotation.
	// +optional
	Engine *EngineSpec `json:"engine,omitempty"`

	// Workers is the pool of worker pods that runs this Agent's sessions.
	// +optional
	// +kubebuilder:default={}
	Workers *WorkersSpec `json:"workers,omitempty"`
}

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

// TracingSpec says where and how an Agent's sessions are traced.
//
// +kubebuilder:validation:XValidation:rule="!has(self.endpoint) || self.protocol == 'http/protobuf' || self.endpoint.matches('^https?://[^/]+/?$')",message="an endpoint may carry a path only with protocol http/protobuf",fieldPath=".endpoint"
// +kubebuilder:validation:XValidation:rule="!has(self.caSecretRef) || (has(self.endpoint) && self.endpoint.startsWith('https://'))",message="a caSecretRef needs an https:// endpoint",fieldPath=".caSecretRef"
type TracingSpec struct {
	// Enabled false traces nothing for this Agent, even where the operator
	// has a default endpoint.
	// +optional
	// +kubebuilder:default=true
	Enabled *bool `json:"enabled,omitempty"`

	// Endpoint is the OTLP receiver, http://host:port, or https://host:port
	// for TLS; with protocol http/protobuf it may carry the path,
	// /v1/traces by default. Without it, the operator's default endpoint.
	// +optional
	// +kubebuilder:validation:MaxLength=2048
	// +kubebuilder:validation:Pattern=`^https?://[^/?#@\s]+(/[^?#@\s]*)?$`
	Endpoint string `json:"endpoint,omitempty"`

	// Protocol is the OTLP protocol the endpoint speaks.
	// +optional
	// +kubebuilder:default=grpc
	// +kubebuilder:validation:Enum=grpc;http/protobuf
	Protocol string `json:"protocol,omitempty"`

	// CASecretRef names a Secret key holding the PEM certificates of the
	// authorities that sign the https endpoint's certificate, for a
	// receiver with a private CA; without it, the system's authorities.
	// +optional
	CASecretRef *SecretKeyReference `json:"caSecretRef,omitempty"`

	// Headers are sent with every export, such as a tracing backend's API
	// key from a Secret.
	// +optional
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MaxItems=16
	// +kubebuilder:validation:XValidation:rule="self.all(h, self.filter(o, o.name.lowerAscii() == h.name.lowerAscii()).size() == 1)",message="header names must be unique regardless of case"
	Headers []HTTPHeader `json:"headers,omitempty"`

	// SamplePercent is the share of activations traced. The decision is
	// made from the trace ID, so all of an activation's spans are kept or
	// dropped together, whichever worker emits them.
	// +optional
	// +kubebuilder:default=100
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=100
	SamplePercent *int32 `json:"samplePercent,omitempty"`

	// AgentName is gen_ai.agent.name and names the invoke_agent spans;
	// without it, the Flow type.
	// +optional
	// +kubebuilder:validation:MaxLength=256
	AgentName string `json:"agentName,omitempty"`

	// CaptureMessageContent puts message text, tool arguments and tool
	// results on spans. Off, spans carry content by reference only: the
	// session ID, message sequence numbers and tool call IDs, which read
	// the content from the session. Content can be sensitive and large;
	// capture it only where the tracing backend may store it.
	// +optional
	CaptureMessageContent bool `json:"captureMessageContent,omitempty"`

	// SemanticConventions is the version of the GenAI semantic conventions
	// the spans follow: 1.42.0-dev, or 1.36.0 for backends that read the
	// older names (gen_ai.system, no cache or reasoning token counts, and
	// never content).
	// +optional
	// +kubebuilder:default="1.42.0-dev"
	// +kubebuilder:validation:Enum="1.42.0-dev";"1.36.0"
	SemanticConventions string `json:"semanticConventions,omitempty"`
}

// TracingEnabled reports whether the Agent's sessions may be traced.
func (t *TracingSpec) TracingEnabled() bool {
	return t == nil || t.Enabled == nil || *t.Enabled
}

// SpendLimitSpec is an Agent's budget.
//
// +kubebuilder:validation:XValidation:rule="has(self.agent) || has(self.session)",message="a spendLimit needs an agent or a session budget"
// +kubebuilder:validation:XValidation:rule="!has(self.agent) || !has(self.agent.cost) || (has(self.prices) && size(self.prices) > 0)",message="a cost budget needs prices",fieldPath=".prices"
type SpendLimitSpec struct {
	// Window is how long each window of the agent budget lasts. Windows
	// start at whole multiples of it since 1970-01-01T00:00:00Z, so a 24h
	// window starts at midnight UTC and every worker agrees on it.
	// +optional
	// +kubebuilder:default="24h"
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:Pattern=`^([0-9]+(\.[0-9]+)?(ns|us|ms|s|m|h))+$`
	// +kubebuilder:validation:XValidation:rule="duration(self) >= duration('1m') && duration(self) <= duration('8784h')",message="window must be between 1m and 8784h"
	Window *metav1.Duration `json:"window,omitempty"`

	// Agent bounds what all the Agent's sessions spend in one window.
	// +optional
	Agent *AgentBudget `json:"agent,omitempty"`

	// Session bounds what one session spends over its life.
	// +optional
	Session *SessionBudget `json:"session,omitempty"`

	// Prices are what each model charges per million tokens, for a cost
	// budget: every model the Agent may call needs one. A call is charged
	// by the model that answered, or by spec.model's price when the answer
	// names none.
	// +optional
	// +listType=map
	// +listMapKey=model
	// +kubebuilder:validation:MaxItems=64
	Prices []ModelPrice `json:"prices,omitempty"`
}

// DefaultSpendWindow is the window of an agent budget that names none.
const DefaultSpendWindow = 24 * time.Hour

// WindowLength is the length of the agent budget's windows.
func (l *SpendLimitSpec) WindowLength() time.Duration {
	if l.Window == nil {
		return DefaultSpendWindow
	}
	return l.Window.Duration
}

// HasAgentBudget reports whether the limit has a budget shared by all the
// Agent's sessions.
func (l *SpendLimitSpec) HasAgentBudget() bool {
	return l != nil && l.Agent != nil
}

// AgentBudget bounds what all of an Agent's sessions spend in one window.
// Model calls that run at once are each admitted while the window's spend,
// plus what the calls already running may spend, is under the budget, so
// the budget holds within about one call's usage.
//
// +kubebuilder:validation:XValidation:rule="has(self.tokens) || has(self.cost)",message="an agent budget needs tokens or cost"
type AgentBudget struct {
	// Tokens bounds the input and output tokens, as the providers count
	// them.
	// +optional
	// +kubebuilder:validation:Minimum=1
	Tokens *int64 `json:"tokens,omitempty"`

	// Cost bounds the cost, in the currency of prices, as a decimal such as
	// "25" or "2.50", with up to six decimal places.
	// +optional
	// +kubebuilder:validation:MaxLength=19
	// +kubebuilder:validation:Pattern=`^[0-9]{1,12}(\.[0-9]{1,6})?$`
	// +kubebuilder:validation:XValidation:rule="self.matches('[1-9]')",message="cost must be more than 0"
	Cost *string `json:"cost,omitempty"`
}

// SessionBudget bounds what one session spends over its life.
type SessionBudget struct {
	// Tokens bounds the input and output tokens of the session's model
	// calls.
	// +required
	// +kubebuilder:validation:Minimum=1
	Tokens int64 `json:"tokens"`
}

// ModelPrice is what one model charges per million tokens, each price a
// decimal such as "3" or "0.15", with up to six decimal places.
type ModelPrice struct {
	// Model is the model name, as spec.model and the provider's answers
	// name it.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=256
	Model string `json:"model"`

	// InputPerMillion is the price of a million input tokens.
	// +required
	// +kubebuilder:validation:MaxLength=12
	// +kubebuilder:validation:Pattern=`^[0-9]{1,5}(\.[0-9]{1,6})?$`
	InputPerMillion string `json:"inputPerMillion"`

	// CachedInputPerMillion is the price of a million input tokens read
	// from the provider's cache; unset, they cost as other input.
	// +optional
	// +kubebuilder:validation:MaxLength=12
	// +kubebuilder:validation:Pattern=`^[0-9]{1,5}(\.[0-9]{1,6})?$`
	CachedInputPerMillion *string `json:"cachedInputPerMillion,omitempty"`

	// OutputPerMillion is the price of a million output tokens.
	// +required
	// +kubebuilder:validation:MaxLength=12
	// +kubebuilder:validation:Pattern=`^[0-9]{1,5}(\.[0-9]{1,6})?$`
	OutputPerMillion string `json:"outputPerMillion"`
}

// EngineSpec locates the Temporal service.
//
// +kubebuilder:validation:XValidation:rule="!has(self.apiKeySecretRef) || has(self.tls)",message="tls is required with apiKeySecretRef: the API key must not travel in clear text",fieldPath=".tls"
type EngineSpec struct {
	// Address is the host:port of the Temporal frontend: a host name, an
	// IPv4 address or a bracketed IPv6 address, and a port. The port is
	// required: without one the worker's gRPC client would dial 443, not
	// Temporal's 7233. The addresses a credential's Secret names are
	// compared with it case-insensitively, without a trailing dot and with
	// the port as a number.
	// +required
	// +kubebuilder:validation:MinLength=3
	// +kubebuilder:validation:MaxLength=512
	// +kubebuilder:validation:Pattern=`^([^\s/:\[\]@]+|\[[0-9A-Fa-f:.]+\]):[0-9]{1,5}$`
	// +kubebuilder:validation:XValidation:rule="int(self.substring(self.lastIndexOf(':') + 1)) >= 1 && int(self.substring(self.lastIndexOf(':') + 1)) <= 65535",message="address must end in a port from 1 to 65535"
	Address string `json:"address"`

	// Namespace is the Temporal namespace of the sessions.
	// +optional
	// +kubebuilder:default=default
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=255
	// +kubebuilder:validation:Pattern=`^[A-Za-z0-9][A-Za-z0-9._-]*$`
	Namespace string `json:"namespace,omitempty"`

	// TLS turns on TLS to the engine.
	// +optional
	TLS *EngineTLS `json:"tls,omitempty"`

	// APIKeySecretRef selects the Secret key that holds an engine API key.
	// +optional
	APIKeySecretRef *SecretKeyReference `json:"apiKeySecretRef,omitempty"`
}

// EngineTLS configures TLS to the engine. Without a Secret, the system's
// certificate authorities verify the server.
type EngineTLS struct {
	// SecretRef names a Secret with ca.crt, to verify the server with a
	// private authority, and/or tls.crt and tls.key, for a client certificate.
	// +optional
	SecretRef *SecretReference `json:"secretRef,omitempty"`

	// ServerName overrides the name the server's certificate is checked
	// against.
	// +optional
	// +kubebuilder:validation:MaxLength=253
	ServerName string `json:"serverName,omitempty"`
}

// WorkersSpec is the pool of worker pods.
//
// +kubebuilder:validation:XValidation:rule="has(self.image) == has(self.engineVersion)",message="image and engineVersion are set together: rollouts follow the engine version the image carries",fieldPath=".engineVersion"
type WorkersSpec struct {
	// Image is the worker image: the stock agent-worker, or a team's own
	// worker built on the public Go API. Unset, the operator's stock worker
	// image is used.
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=1024
	Image string `json:"image,omitempty"`

	// EngineVersion is the version of the session engine the image carries.
	// The operator plans rollouts and gates session features by it. Set with
	// image; unset, the stock image's version is used.
	// Pre-release versions are allowed; build metadata (+...) is not,
	// because the version labels the worker pods.
	// +optional
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^v?[0-9]+\.[0-9]+\.[0-9]+(-[0-9A-Za-z]([0-9A-Za-z-]*[0-9A-Za-z])?(\.[0-9A-Za-z]([0-9A-Za-z-]*[0-9A-Za-z])?)*)?$`
	EngineVersion string `json:"engineVersion,omitempty"`

	// Replicas is the desired number of worker pods. The Agent's scale
	// subresource reads and writes it, so HorizontalPodAutoscalers, KEDA and
	// kubectl scale target the Agent. At most 1000: every worker polls the
	// engine, so a mistyped count would load the engine every tenant
	// shares.
	// +optional
	// +kubebuilder:default=1
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=1000
	Replicas *int32 `json:"replicas,omitempty"`

	// TaskSlots is how many Steps one worker runs at once. Tool calls of one
	// model response run in parallel, so give at least the largest batch of
	// tool calls a model makes.
	// +optional
	// +kubebuilder:default=100
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=10000
	TaskSlots int32 `json:"taskSlots,omitempty"`

	// Resources of the worker container. What is left unset is defaulted:
	// a request of 50m CPU and 128Mi of memory, and a memory limit of 1Gi,
	// each kept within what is set (a request never above its limit).
	// Dynamic resource claims are not supported.
	// +optional
	// +kubebuilder:validation:XValidation:rule="!has(self.claims) || size(self.claims) == 0",message="resources.claims is not supported for workers"
	Resources corev1.ResourceRequirements `json:"resources,omitempty"`

	// NodeSelector constrains worker pods to nodes with these labels.
	// +optional
	NodeSelector map[string]string `json:"nodeSelector,omitempty"`

	// Tolerations of worker pods.
	// +optional
	// +listType=atomic
	Tolerations []corev1.Toleration `json:"tolerations,omitempty"`

	// ServiceAccountName runs workers as this existing ServiceAccount, such as
	// one bound to a cloud identity. Unset, the operator creates one.
	// +optional
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`
	ServiceAccountName string `json:"serviceAccountName,omitempty"`

	// ImagePullSecrets for the worker image.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=16
	ImagePullSecrets []corev1.LocalObjectReference `json:"imagePullSecrets,omitempty"`

	// Env adds environment variables to the worker container, such as
	// credentials a team's own tools read. Names starting with STEPWISE_ are
	// reserved.
	// +optional
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MaxItems=128
	// +kubebuilder:validation:XValidation:rule="self.all(e, !e.name.startsWith('STEPWISE_'))",message="env names starting with STEPWISE_ are reserved for the operator"
	Env []corev1.EnvVar `json:"env,omitempty"`
}

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

// Agent is one agent session Flow type and the workers that run its
// sessions.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:subresource:scale:specpath=.spec.workers.replicas,statuspath=.status.replicas,selectorpath=.status.selector
// +kubebuilder:resource:shortName=agt,categories=stepwise
// +kubebuilder:validation:XValidation:rule="self.metadata.name.matches('^[a-z0-9]([-a-z0-9]{0,47}[a-z0-9])?$')",message="metadata.name must be a DNS label of at most 49 characters, so the names of the objects the Agent owns stay valid"
// +kubebuilder:printcolumn:name="Flow Type",type=string,JSONPath=`.spec.flowType`
// +kubebuilder:printcolumn:name="Provider",type=string,JSONPath=`.spec.model.provider`
// +kubebuilder:printcolumn:name="Model",type=string,JSONPath=`.spec.model.name`
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="Desired",type=integer,JSONPath=`.spec.workers.replicas`
// +kubebuilder:printcolumn:name="Available",type=integer,JSONPath=`.status.readyReplicas`
// +kubebuilder:printcolumn:name="Reason",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].reason`,priority=1
// +kubebuilder:printcolumn:name="Task Queue",type=string,JSONPath=`.status.taskQueue`,priority=1
// +kubebuilder:printcolumn:name="Tokens Spent",type=integer,JSONPath=`.status.spend.tokens`,priority=1
// +kubebuilder:printcolumn:name="Budget Reached",type=boolean,JSONPath=`.status.spend.reached`,priority=1
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type Agent struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// Spec is the desired agent.
	// +required
	Spec AgentSpec `json:"spec"`

	// Status is what the operator observed and applied. It defaults to an
	// empty status, so replicas and readyReplicas read 0 before the first
	// pass.
	// +optional
	// +kubebuilder:default={}
	Status AgentStatus `json:"status,omitempty"`
}

// AgentList is a list of Agents.
//
// +kubebuilder:object:root=true
type AgentList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	// Items are the Agents.
	Items []Agent `json:"items"`
}
