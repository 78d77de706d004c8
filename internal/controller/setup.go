package controller

import (
	"context"
	"fmt"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	agentsv1 "github.com/stepwise-run/stepwise/api/v1alpha1"
	"github.com/stepwise-run/stepwise/internal/render"
)

// NewScheme returns a scheme with the built-in kinds and this API.
func NewScheme() (*runtime.Scheme, error) {
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		return nil, err
	}
	if err := agentsv1.AddToScheme(scheme); err != nil {
		return nil, err
	}
	return scheme, nil
}

// CacheOptions limits the manager's cache of built-in kinds to the objects
// the operator manages, so it never holds every ConfigMap or Deployment of
// a large cluster. Secrets are watched by metadata only and read directly.
func CacheOptions() cache.Options {
	managed := labels.SelectorFromSet(labels.Set{render.LabelManagedBy: render.ManagedBy})
	return cache.Options{ByObject: map[client.Object]cache.ByObject{
		&corev1.ConfigMap{}:      {Label: managed},
		&corev1.ServiceAccount{}: {Label: managed},
		&appsv1.Deployment{}:     {Label: managed},
		&appsv1.ReplicaSet{}:     {Label: managed},
	}}
}

// Setup registers the field indexes and every reconciler with a manager.
func Setup(ctx context.Context, mgr ctrl.Manager, defaults render.Defaults) error {
	if err := SetupIndexes(ctx, mgr, defaults); err != nil {
		return err
	}
	reader := mgr.GetAPIReader()
	if err := (&AgentReconciler{Client: mgr.GetClient(), APIReader: reader, Defaults: defaults}).SetupWithManager(mgr); err != nil {
		return fmt.Errorf("setting up the Agent controller: %w", err)
	}
	if err := (&ToolSourceReconciler{Client: mgr.GetClient(), APIReader: reader}).SetupWithManager(mgr); err != nil {
		return fmt.Errorf("setting up the ToolSource controller: %w", err)
	}
	if err := (&MediaStoreReconciler{Client: mgr.GetClient(), APIReader: reader}).SetupWithManager(mgr); err != nil {
		return fmt.Errorf("setting up the MediaStore controller: %w", err)
	}
	return nil
}
