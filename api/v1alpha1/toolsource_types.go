package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// ToolSourceSpec defines tools that are listed at run time: one MCP server.
//
// +kubebuilder:validation:XValidation:rule="has(self.sourceName) == has(oldSelf.sourceName)",message="sourceName cannot be added or removed: stored tool calls reach their source by this name",fieldPath=".sourceName"
type ToolSourceSpec struct {
	// SourceName names the source in tool names (`<sourceName>__<tool>`) and in
	// every stored tool call, so a call reaches its source on any worker. It
	// must be unique among an Agent's ToolSources and cannot change. Unset, it
	// is the ToolSource's name, which must then be a valid source name.
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=32
	// +kubebuilder:validation:Pattern=`^[A-Za-z0-9_-]+$`
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="sourceName is immutable: stored tool calls reach their source by this name"
	// +kubebuilder:validation:XValidation:rule="!self.contains('__') && !self.startsWith('_') && !self.endsWith('_')",message="sourceName may not contain '__' or start or end with '_': tool names join it to the tool's name with '__'"
	SourceName string `json:"sourceName,omitempty"`

	// MCP is the MCP server that lists and runs the tools.
	// +required
	MCP MCPServer `json:"mcp"`

	// TrustToolAnnotations takes the server's readOnlyHint and idempotentHint
	// annotations, and its declared effects, as the tools' effect classes.
	// Off by default: a server that marks a destructive tool read-only
	// would skip its approval, so only a server whose hints you control
	// should be trusted. Untrusted, its tools keep the Agent's
	// defaultToolEffect unless a policy names them.
	// +optional
	// +kubebuilder:default=false
	TrustToolAnnotations *bool `json:"trustToolAnnotations,omitempty"`

	// ListingTTL is how long a worker offers a listing before it lists the
	// server again in the background.
	// +optional
	// +kubebuilder:default="5m"
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:Pattern=`^([0-9]+(\.[0-9]+)?(ns|us|ms|s|m|h))+$`
	// +kubebuilder:validation:XValidation:rule="duration(self) >= duration('1s') && duration(self) <= duration('24h')",message="listingTTL must be between 1s and 24h"
	ListingTTL *metav1.Duration `json:"listingTTL,omitempty"`

	// ConnectionTimeout bounds connecting to the server and each handshake
	// request.
	// +optional
	// +kubebuilder:default="30s"
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:Pattern=`^([0-9]+(\.[0-9]+)?(ns|us|ms|s|m|h))+$`
	// +kubebuilder:validation:XValidation:rule="duration(self) >= duration('100ms') && duration(self) <= duration('10m')",message="connectionTimeout must be between 100ms and 10m"
	ConnectionTimeout *metav1.Duration `json:"connectionTimeout,omitempty"`

	// RequestTimeout bounds one tools/call request.
	// +optional
	// +kubebuilder:default="10m"
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:Pattern=`^([0-9]+(\.[0-9]+)?(ns|us|ms|s|m|h))+$`
	// +kubebuilder:validation:XValidation:rule="duration(self) >= duration('1s') && duration(self) <= duration('1h')",message="requestTimeout must be between 1s and 1h"
	RequestTimeout *metav1.Duration `json:"requestTimeout,omitempty"`

	// TaskWaitTimeout bounds how long a tool Step polls a task a stdio
	// server started, inside the call; a task that outlasts it is sent
	// again for a read or an idempotent write, and recorded
	// outcome_unknown otherwise. A Streamable HTTP server's tasks are polled
	// by the session instead, for as long as they run.
	// +optional
	// +kubebuilder:default="10m"
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:Pattern=`^([0-9]+(\.[0-9]+)?(ns|us|ms|s|m|h))+$`
	// +kubebuilder:validation:XValidation:rule="duration(self) >= duration('1s') && duration(self) <= duration('24h')",message="taskWaitTimeout must be between 1s and 24h"
	TaskWaitTimeout *metav1.Duration `json:"taskWaitTimeout,omitempty"`

	// ResourceAndPromptTools also offers the read tools
	// mcp_list_resources_and_prompts, mcp_read_resource and mcp_get_prompt.
	// Enable them on one ToolSource of an Agent only.
	// +optional
	ResourceAndPromptTools bool `json:"resourceAndPromptTools,omitempty"`
}

// MCPServer is one MCP server, reached over exactly one transport.
//
// +kubebuilder:validation:XValidation:rule="has(self.stdio) != has(self.streamableHTTP)",message="exactly one of stdio or streamableHTTP must be set"
type MCPServer struct {
	// Stdio runs the server as a process in the worker container, one
	// process per request. The command runs with the worker's privileges, so
	// it comes only from this resource, never from session input.
	// +optional
	Stdio *MCPStdio `json:"stdio,omitempty"`

	// StreamableHTTP reaches the server over MCP Streamable HTTP.
	// +optional
	StreamableHTTP *MCPStreamableHTTP `json:"streamableHTTP,omitempty"`
}

// MCPStdio is an MCP server run as a process.
type MCPStdio struct {
	// Command is the executable, a path or a name on the worker image's PATH.
	// It is run as given, never through a shell, so it may not start or end
	// with whitespace or contain control characters: no executable is named
	// so.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=4096
	// +kubebuilder:validation:XValidation:rule="!self.matches(r'^\\s|\\s$')",message="command may not start or end with whitespace: it names an executable and is run without a shell"
	// +kubebuilder:validation:XValidation:rule="!self.matches(r'[\\x00-\\x1f\\x7f]')",message="command may not contain control characters"
	Command string `json:"command"`

	// Args are the command's arguments. An argument may not contain a NUL
	// byte, which no process argument can carry.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=256
	// +kubebuilder:validation:items:MaxLength=32768
	// +kubebuilder:validation:XValidation:rule="self.all(a, !a.contains('\\u0000'))",message="args may not contain NUL characters: no process argument can carry one"
	Args []string `json:"args,omitempty"`

	// Env sets environment variables of the server process.
	// +optional
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MaxItems=64
	Env []ValueVar `json:"env,omitempty"`
}

// MCPStreamableHTTP is an MCP server reached over Streamable HTTP.
type MCPStreamableHTTP struct {
	// URL is the server's MCP endpoint: an http or https URL with a host.
	// +required
	// +kubebuilder:validation:MaxLength=2048
	// +kubebuilder:validation:Pattern=`^https?://[^\s]+$`
	// +kubebuilder:validation:XValidation:rule="isURL(self) && url(self).getHostname() != ''",message="url must be an http or https URL with a host"
	URL string `json:"url"`

	// Headers are sent with every request, such as Authorization from a
	// Secret.
	// +optional
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MaxItems=64
	// +kubebuilder:validation:XValidation:rule="self.all(h, self.filter(o, o.name.lowerAscii() == h.name.lowerAscii()).size() == 1)",message="header names must be unique regardless of case"
	Headers []HTTPHeader `json:"headers,omitempty"`
}

// ValueVar is a named value, given inline or taken from a Secret.
//
// +kubebuilder:validation:XValidation:rule="has(self.value) != has(self.valueFrom)",message="exactly one of value or valueFrom must be set"
type ValueVar struct {
	// Name of the variable.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=256
	// +kubebuilder:validation:Pattern=`^[A-Za-z_][A-Za-z0-9_]*$`
	Name string `json:"name"`

	// Value given inline. Do not put secrets here; use valueFrom. It may not
	// contain a NUL byte, which no environment variable can carry; a value
	// from a Secret is checked by the operator and the worker instead.
	// +optional
	// +kubebuilder:validation:MaxLength=32768
	// +kubebuilder:validation:XValidation:rule="!self.contains('\\u0000')",message="value may not contain NUL characters: no environment variable can carry one"
	Value *string `json:"value,omitempty"`

	// ValueFrom takes the value from a Secret.
	// +optional
	ValueFrom *SecretValueSource `json:"valueFrom,omitempty"`
}

// HTTPHeader is a request header, given inline or taken from a Secret.
//
// +kubebuilder:validation:XValidation:rule="has(self.value) != has(self.valueFrom)",message="exactly one of value or valueFrom must be set"
type HTTPHeader struct {
	// Name of the header, an HTTP token.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=256
	// +kubebuilder:validation:Pattern=`^[!#$%&'*+.^_|~0-9A-Za-z-]+$`
	Name string `json:"name"`

	// Value given inline. Do not put secrets here; use valueFrom. It may not
	// contain control characters other than tab, such as CR or LF, which no
	// HTTP header value can carry; a value from a Secret is checked by the
	// operator and the worker instead.
	// +optional
	// +kubebuilder:validation:MaxLength=8192
	// +kubebuilder:validation:XValidation:rule="!self.matches(r'[\\x00-\\x08\\x0a-\\x1f\\x7f]')",message="value may not contain control characters such as CR or LF: an HTTP header value cannot carry them"
	Value *string `json:"value,omitempty"`

	// ValueFrom takes the value from a Secret, such as "Bearer <token>" for
	// an Authorization header. A value with control characters, such as a
	// trailing newline, leaves the ToolSource not Ready (SecretValueInvalid).
	// +optional
	ValueFrom *SecretValueSource `json:"valueFrom,omitempty"`
}

// ToolSourceStatus reports the ToolSource's state.
type ToolSourceStatus struct {
	// ObservedGeneration is the generation of the last pass that reached a
	// verdict: applied, or blocked for the reason Ready gives. A pass that
	// failed to read or write leaves it alone.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`

	// Conditions report the ToolSource's state.
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`

	// SourceName is the source name in effect: spec.sourceName, or the
	// resource's name.
	// +optional
	SourceName string `json:"sourceName,omitempty"`
}

// ToolSource is an MCP server whose tools Agents offer to their models.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:shortName=ts,categories=stepwise
// +kubebuilder:validation:XValidation:rule="has(self.spec.sourceName) || self.metadata.name.matches('^[A-Za-z0-9_-]{1,32}$')",message="spec.sourceName is required when metadata.name is not a valid source name (letters, digits, '_' and '-', at most 32 characters)"
// +kubebuilder:printcolumn:name="Source Name",type=string,JSONPath=`.status.sourceName`
// +kubebuilder:printcolumn:name="URL",type=string,JSONPath=`.spec.mcp.streamableHTTP.url`
// +kubebuilder:printcolumn:name="Command",type=string,JSONPath=`.spec.mcp.stdio.command`
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="Reason",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].reason`,priority=1
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type ToolSource struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// Spec is the desired tool source.
	// +required
	Spec ToolSourceSpec `json:"spec"`

	// Status is what the operator observed.
	// +optional
	Status ToolSourceStatus `json:"status,omitempty"`
}

// ToolSourceList is a list of ToolSources.
//
// +kubebuilder:object:root=true
type ToolSourceList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	// Items are the ToolSources.
	Items []ToolSource `json:"items"`
}
