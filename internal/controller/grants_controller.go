package controller

import (
	"context"
	"encoding/json"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/stepwise-run/stepwise/internal/grants"
	"github.com/stepwise-run/stepwise/internal/render"
)

// GrantsPublisher publishes the application tokens of the labeled Secrets
// for the gateways: a ConfigMap in the operator's namespace with each
// token's grant under its SHA-256, so the gateways, the most exposed
// component, need read no Secret. The operator already reads Secrets.
type GrantsPublisher struct {
	client.Client
	// APIReader reads the labeled Secrets' data, which the operator does
	// not cache.
	APIReader client.Reader
	// Namespace and Name are the ConfigMap's.
	Namespace, Name string
}

// Reconcile publishes every labeled Secret's grant; any change to one, and
// any change to the ConfigMap, publishes them all again.
func (p *GrantsPublisher) Reconcile(ctx context.Context, _ ctrl.Request) (ctrl.Result, error) {
	var secrets corev1.SecretList
	if err := p.APIReader.List(ctx, &secrets, client.MatchingLabelsSelector{Selector: grants.Selector()}); err != nil {
		return ctrl.Result{}, fmt.Errorf("listing application token Secrets: %w", err)
	}
	published := grants.Publish(secrets.Items)
	for _, problem := range published.Problems {
		log.FromContext(ctx).Info("an application token is not used", "problem", problem)
	}
	doc, err := json.Marshal(published)
	if err != nil {
		return ctrl.Result{}, err
	}
	cm := corev1ac.ConfigMap(p.Name, p.Namespace).
		WithLabels(map[string]string{render.LabelManagedBy: render.ManagedBy, render.LabelComponent: "gateway-grants"}).
		WithData(map[string]string{grants.PublishedKey: string(doc)})
	if err := p.Apply(ctx, cm, client.FieldOwner(render.FieldOwner), client.ForceOwnership); err != nil {
		return ctrl.Result{}, fmt.Errorf("publishing the gateways' grants: %w", err)
	}
	return ctrl.Result{}, nil
}

// SetupWithManager watches the labeled Secrets, by metadata, and the
// ConfigMap, so an edit or a deletion of it is undone.
func (p *GrantsPublisher) SetupWithManager(mgr ctrl.Manager) error {
	only := func(context.Context, client.Object) []reconcile.Request {
		return []reconcile.Request{{NamespacedName: types.NamespacedName{Namespace: p.Namespace, Name: p.Name}}}
	}
	labeled := func(obj client.Object) bool { return obj.GetLabels()[grants.LabelApplicationToken] == "true" }
	tokens := predicate.Funcs{
		CreateFunc:  func(e event.CreateEvent) bool { return labeled(e.Object) },
		UpdateFunc:  func(e event.UpdateEvent) bool { return labeled(e.ObjectOld) || labeled(e.ObjectNew) },
		DeleteFunc:  func(e event.DeleteEvent) bool { return labeled(e.Object) },
		GenericFunc: func(e event.GenericEvent) bool { return labeled(e.Object) },
	}
	itself := predicate.NewPredicateFuncs(func(obj client.Object) bool {
		return obj.GetNamespace() == p.Namespace && obj.GetName() == p.Name
	})
	return ctrl.NewControllerManagedBy(mgr).
		Named("gateway-grants").
		WatchesMetadata(&corev1.Secret{}, handler.EnqueueRequestsFromMapFunc(only), builder.WithPredicates(tokens)).
		Watches(&corev1.ConfigMap{}, handler.EnqueueRequestsFromMapFunc(only), builder.WithPredicates(itself)).
		Complete(p)
}
