package v1alpha1

import (
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
