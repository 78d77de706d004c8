package v1alpha1

import (
	corev1 "k8s.io/api/core/v1"
)

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
