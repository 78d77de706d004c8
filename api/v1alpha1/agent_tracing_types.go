package v1alpha1

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
