package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// MediaStoreSpec says where the image bytes of sessions live. Session state
// holds only references; each image is one object keyed by its SHA-256.
//
// +kubebuilder:validation:XValidation:rule="has(self.s3) != has(self.localDirectory)",message="exactly one of s3 or localDirectory must be set"
type MediaStoreSpec struct {
	// S3 keeps images in an S3-compatible bucket, for workers on many
	// machines.
	// +optional
	S3 *S3MediaStore `json:"s3,omitempty"`

	// LocalDirectory keeps images in a directory, for a client and workers
	// that share one file system.
	// +optional
	LocalDirectory *LocalDirectoryMediaStore `json:"localDirectory,omitempty"`
}

// S3MediaStore is a bucket and prefix in an S3-compatible service. An
// image's URI is s3://<bucket>/<prefix>/sha256/<sha256>.
//
// The rule counts the URI's bytes: 77 fixed bytes, the bucket, and the
// prefix with its separator, as UTF-8.
//
// +kubebuilder:validation:XValidation:rule="77 + size(self.bucket) + (has(self.prefix) ? 1 + size(self.prefix) + size(self.prefix.findAll(r'[\\x{80}-\\x{10FFFF}]')) + size(self.prefix.findAll(r'[\\x{800}-\\x{10FFFF}]')) + size(self.prefix.findAll(r'[\\x{10000}-\\x{10FFFF}]')) : 0) <= 1024",message="bucket and prefix make image URIs (s3://<bucket>/<prefix>/sha256/<64 hex digits>) longer than 1024 bytes",fieldPath=".prefix"
type S3MediaStore struct {
	// Bucket is the bucket name.
	// +required
	// +kubebuilder:validation:MinLength=3
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[a-z0-9][a-z0-9.-]*[a-z0-9]$`
	// +kubebuilder:validation:XValidation:rule="!self.contains('..') && !self.matches(r'^[0-9]+\\.[0-9]+\\.[0-9]+\\.[0-9]+$')",message="bucket must be a valid S3 bucket name: no '..' and not an IP address"
	Bucket string `json:"bucket"`

	// Prefix is the key prefix of every image, without a leading or trailing
	// slash.
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=1024
	// +kubebuilder:validation:Pattern=`^[^/](.*[^/])?$`
	Prefix string `json:"prefix,omitempty"`

	// Endpoint is the service's URL, for an S3-compatible service other than
	// AWS S3.
	// +optional
	// +kubebuilder:validation:MaxLength=2048
	// +kubebuilder:validation:Pattern=`^https?://[^\s]+$`
	Endpoint string `json:"endpoint,omitempty"`

	// Region of the bucket.
	// +optional
	// +kubebuilder:validation:MaxLength=64
	// +kubebuilder:validation:Pattern=`^[a-z0-9-]+$`
	Region string `json:"region,omitempty"`

	// ForcePathStyle addresses the bucket in the URL path instead of the host
	// name, as many S3-compatible services need.
	// +optional
	ForcePathStyle bool `json:"forcePathStyle,omitempty"`

	// CredentialsSecretRef names a Secret with AWS_ACCESS_KEY_ID and
	// AWS_SECRET_ACCESS_KEY, and optionally AWS_SESSION_TOKEN. Unset, workers
	// use the standard AWS credential chain, such as the pod's own identity.
	// +optional
	CredentialsSecretRef *SecretReference `json:"credentialsSecretRef,omitempty"`
}

// LocalDirectoryMediaStore is a directory on the workers' file system. An
// image's URI is file://<root>/sha256/<sha256>, with every byte of the root
// other than ASCII letters, digits, "-._~" and "/" percent-encoded.
type LocalDirectoryMediaStore struct {
	// Root is the directory's absolute path, without a trailing slash.
	// Worker pods mount the store read-write at this path, so it may not be
	// a system directory or lie under one: /bin, /boot, /dev, /efi, /etc,
	// /home, /lib*, /nix, /opt, /proc, /root, /run, /sbin, /snap, /sys,
	// /tmp, /usr and /var are refused, whatever the store's volume.
	//
	// The length rule counts the URI's bytes: 79 fixed bytes and the
	// percent-encoded root.
	// +required
	// +kubebuilder:validation:MinLength=2
	// +kubebuilder:validation:MaxLength=1024
	// +kubebuilder:validation:Pattern=`^/.*[^/]$`
	// +kubebuilder:validation:XValidation:rule="!self.contains('//') && !self.contains('/./') && !self.endsWith('/.') && !self.contains('/../') && !self.endsWith('/..') && !self.matches(r'[\\x00-\\x1f\\x7f]')",message="root must be a clean absolute path, without empty, '.' or '..' segments, a trailing slash or control characters"
	// +kubebuilder:validation:XValidation:rule="!self.matches(r'^/lib[^/]*(/|$)') && !['/bin', '/boot', '/dev', '/efi', '/etc', '/home', '/nix', '/opt', '/proc', '/root', '/run', '/sbin', '/snap', '/sys', '/tmp', '/usr', '/var'].exists(d, self == d || self.startsWith(d + '/'))",message="root may not be a system directory or lie under one (/bin, /boot, /dev, /efi, /etc, /home, /lib*, /nix, /opt, /proc, /root, /run, /sbin, /snap, /sys, /tmp, /usr, /var): worker pods mount the store read-write at root"
	// +kubebuilder:validation:XValidation:rule="79 + size(self) + 2 * size(self.findAll('[^A-Za-z0-9._~/-]')) + 3 * size(self.findAll(r'[\\x{80}-\\x{10FFFF}]')) + 3 * size(self.findAll(r'[\\x{800}-\\x{10FFFF}]')) + 3 * size(self.findAll(r'[\\x{10000}-\\x{10FFFF}]')) <= 1024",message="root makes image URIs (file://<percent-encoded root>/sha256/<64 hex digits>) longer than 1024 bytes"
	Root string `json:"root"`

	// PersistentVolumeClaimName mounts this PersistentVolumeClaim, in the
	// MediaStore's namespace, at root in every worker pod. Unset, worker pods
	// mount the node's directory root (hostPath), which suits single-node
	// clusters only, and only where the operator allows host directories
	// (--media-host-path-roots): root must be one of them or lie under one,
	// or the MediaStore is not Ready (HostPathNotAllowed).
	// +optional
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`
	PersistentVolumeClaimName string `json:"persistentVolumeClaimName,omitempty"`
}

// MediaStoreStatus reports the MediaStore's state.
type MediaStoreStatus struct {
	// ObservedGeneration is the generation of the last pass that reached a
	// verdict: applied, or blocked for the reason Ready gives. A pass that
	// failed to read or write leaves it alone.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`

	// Conditions report the MediaStore's state.
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`

	// StoreURI is the location every image URI of this store starts with.
	// +optional
	StoreURI string `json:"storeURI,omitempty"`
}

// MediaStore is where the image bytes of Agents' sessions live.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:shortName=mst,categories=stepwise
// +kubebuilder:validation:XValidation:rule="size(self.metadata.name) <= 63",message="metadata.name must be at most 63 characters: it labels the worker Deployments that use the store"
// +kubebuilder:printcolumn:name="Store URI",type=string,JSONPath=`.status.storeURI`
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="In Use",type=string,JSONPath=`.status.conditions[?(@.type=="InUse")].status`
// +kubebuilder:printcolumn:name="Reason",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].reason`,priority=1
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type MediaStore struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// Spec is the desired media store.
	// +required
	Spec MediaStoreSpec `json:"spec"`

	// Status is what the operator observed.
	// +optional
	Status MediaStoreStatus `json:"status,omitempty"`
}

// MediaStoreList is a list of MediaStores.
//
// +kubebuilder:object:root=true
type MediaStoreList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	// Items are the MediaStores.
	Items []MediaStore `json:"items"`
}
