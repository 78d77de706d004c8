package v1alpha1

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
