// Package v1alpha1 holds the agents.stepwise.run API: Agent, ToolSource and
// MediaStore, the resources a platform team applies to run durable agent
// sessions, and ClusterEngine, the engines an administrator lets them use.
//
// +kubebuilder:object:generate=true
// +groupName=agents.stepwise.run
package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

var (
	// GroupVersion is the group and version of every kind in this package.
	GroupVersion = schema.GroupVersion{Group: "agents.stepwise.run", Version: "v1alpha1"}

	// SchemeBuilder registers the kinds of this package with a runtime scheme.
	SchemeBuilder = runtime.NewSchemeBuilder(addKnownTypes)

	// AddToScheme adds the kinds of this package to a scheme.
	AddToScheme = SchemeBuilder.AddToScheme
)

func addKnownTypes(scheme *runtime.Scheme) error {
	scheme.AddKnownTypes(GroupVersion,
		&Agent{}, &AgentList{},
		&ToolSource{}, &ToolSourceList{},
		&MediaStore{}, &MediaStoreList{},
		&ClusterEngine{}, &ClusterEngineList{},
	)
	metav1.AddToGroupVersion(scheme, GroupVersion)
	return nil
}
