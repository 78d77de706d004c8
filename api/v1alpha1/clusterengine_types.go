package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// ClusterEngineSpec is a Temporal service that an administrator lets
// Agents of some Kubernetes namespaces run their sessions on. The address,
// the Temporal namespace and the credentials are the administrator's
// choice alone: an Agent names the ClusterEngine, never an address, and the
// credentials stay in the operator's namespace, out of the tenants' reach
// until the operator hands them to the workers of an Agent it lets use the
// engine.
//
// +kubebuilder:validation:XValidation:rule="!has(self.apiKeySecretRef) || has(self.tls)",message="tls is required with apiKeySecretRef: the API key must not travel in clear text",fieldPath=".tls"
type ClusterEngineSpec struct {
	// Address is the host:port of the Temporal frontend, as for an Agent's
	// spec.engine.address.
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

	// TLS turns on TLS to the engine. Its Secret is in the operator's
	// namespace.
	// +optional
	TLS *EngineTLS `json:"tls,omitempty"`

	// APIKeySecretRef selects the key of a Secret in the operator's
	// namespace that holds an engine API key.
	// +optional
	APIKeySecretRef *SecretKeyReference `json:"apiKeySecretRef,omitempty"`

	// NamespaceSelector selects the Kubernetes namespaces whose Agents may
	// use the engine, by the namespaces' labels: {} selects every
	// namespace. An Agent of a namespace the selector leaves out is not
	// Ready (EngineNotAllowed) and keeps no workers.
	// +required
	NamespaceSelector *metav1.LabelSelector `json:"namespaceSelector"`
}

// ClusterEngineStatus is what the operator learnt of the engine.
type ClusterEngineStatus struct {
	// ObservedGeneration is the generation the conditions describe.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`

	// Conditions: Ready says the operator reached the engine, learnt who it
	// is and registered the search attributes sessions need.
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`

	// NamespaceID is the engine's ID of its Temporal namespace: the one
	// identity of the engine, whatever address reaches it. Flow type
	// claims are keyed by it, so two spellings, two load balancers or an
	// IP address of one engine are one engine.
	// +optional
	NamespaceID string `json:"namespaceID,omitempty"`

	// ClusterID is the ID of the Temporal cluster the address reaches.
	// +optional
	ClusterID string `json:"clusterID,omitempty"`

	// ServerVersion is the Temporal server's version.
	// +optional
	ServerVersion string `json:"serverVersion,omitempty"`
}

// ClusterEngine is a Temporal service, chosen by an administrator, that
// Agents of the namespaces it selects run their sessions on.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:scope=Cluster,shortName=ceng,categories=stepwise
// +kubebuilder:printcolumn:name="Address",type=string,JSONPath=`.spec.address`
// +kubebuilder:printcolumn:name="Namespace",type=string,JSONPath=`.spec.namespace`
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="Reason",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].reason`,priority=1
// +kubebuilder:printcolumn:name="Namespace ID",type=string,JSONPath=`.status.namespaceID`,priority=1
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type ClusterEngine struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// Spec is the engine and who may use it.
	// +required
	Spec ClusterEngineSpec `json:"spec"`

	// Status is what the operator learnt of it.
	// +optional
	Status ClusterEngineStatus `json:"status,omitempty"`
}

// ClusterEngineList is a list of ClusterEngines.
//
// +kubebuilder:object:root=true
type ClusterEngineList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	// Items are the ClusterEngines.
	Items []ClusterEngine `json:"items"`
}

// EngineReference names a ClusterEngine.
type EngineReference struct {
	// Name of the ClusterEngine.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`
	Name string `json:"name"`
}

// EngineAddressesAnnotation marks a Secret that an Agent's spec.engine
// takes an API key or a client certificate from with the engine addresses
// it may be presented to, separated by commas: host names compared in lower
// case without a trailing dot, IP addresses in canonical form, ports as
// numbers. Whoever writes the Secret chooses them: an Agent naming the
// Secret and another address is not Ready, so the operator, the gateway
// and the workers never send the credential where its owner did not say.
const EngineAddressesAnnotation = "agents.stepwise.run/engine-addresses"
