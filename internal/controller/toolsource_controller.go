package controller

import (
	"context"
	"errors"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	agentsv1 "github.com/stepwise-run/stepwise/api/v1alpha1"
	"github.com/stepwise-run/stepwise/internal/render"
)

// ToolSourceReconciler reports whether a ToolSource can be used: its
// Secrets exist and hold the keys it names. It checks nothing over the
// network; workers reach the server.
type ToolSourceReconciler struct {
	client.Client
	// APIReader reads Secrets straight from the API server.
	APIReader client.Reader
}

// +kubebuilder:rbac:groups=agents.stepwise.run,resources=toolsources,verbs=get;list;watch
// +kubebuilder:rbac:groups=agents.stepwise.run,resources=toolsources/status,verbs=get;update;patch

// Reconcile checks one ToolSource and writes its status once.
func (r *ToolSourceReconciler) Reconcile(ctx context.Context, req ctrl.Request) (result ctrl.Result, retErr error) {
	ts := &agentsv1.ToolSource{}
	if err := r.Get(ctx, req.NamespacedName, ts); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if !ts.DeletionTimestamp.IsZero() {
		return ctrl.Result{}, nil
	}
	before := ts.DeepCopy()
	uses := render.ToolSourceSecretUses(ts, "")
	secrets, err := secretsByName(ctx, r.APIReader, ts.Namespace, secretNames(uses))
	var blocker *render.Blocker
	if err == nil {
		blocker = render.CheckSecrets(uses, secrets)
	}
	ts.Status.SourceName = render.EffectiveSourceName(ts)
	setReferenceReadyCondition(&ts.Status.Conditions, &ts.Status.ObservedGeneration, ts.Generation, blocker, err)
	if patchErr := r.Status().Patch(ctx, ts, client.MergeFrom(before)); patchErr != nil && !apierrors.IsNotFound(patchErr) {
		err = errors.Join(err, fmt.Errorf("writing ToolSource status: %w", patchErr))
	}
	return ctrl.Result{}, err
}

// setReferenceReadyCondition sets Ready on a ToolSource or MediaStore from
// this pass: a read error, a blocker, or success, which alone stamps the
// generation.
func setReferenceReadyCondition(conditions *[]metav1.Condition, observedGeneration *int64, generation int64, blocker *render.Blocker, err error) {
	c := metav1.Condition{Type: agentsv1.ConditionReady, ObservedGeneration: generation}
	switch {
	case err != nil:
		c.Status, c.Reason, c.Message = metav1.ConditionUnknown, agentsv1.ReasonReconcileFailed, err.Error()
	case blocker != nil:
		c.Status, c.Reason, c.Message = metav1.ConditionFalse, blocker.Reason, blocker.Message
		*observedGeneration = generation
	default:
		c.Status, c.Reason, c.Message = metav1.ConditionTrue, agentsv1.ReasonReconciled, "the Secrets it references exist and hold their keys"
		*observedGeneration = generation
	}
	meta.SetStatusCondition(conditions, c)
}

// SetupWithManager registers the reconciler and its watches.
func (r *ToolSourceReconciler) SetupWithManager(mgr ctrl.Manager) error {
	return ctrl.NewControllerManagedBy(mgr).
		For(&agentsv1.ToolSource{}).
		WatchesMetadata(&corev1.Secret{}, handler.EnqueueRequestsFromMapFunc(func(ctx context.Context, obj client.Object) []reconcile.Request {
			var list agentsv1.ToolSourceList
			if err := r.List(ctx, &list, client.InNamespace(obj.GetNamespace()), client.MatchingFields{indexToolSourceSecret: obj.GetName()}); err != nil {
				return nil
			}
			return requestsFor(list.Items)
		})).
		Named("toolsource").
		Complete(r)
}

// requestsFor makes one request per object.
func requestsFor[T any, PT interface {
	*T
	client.Object
}](items []T) []reconcile.Request {
	out := make([]reconcile.Request, 0, len(items))
	for i := range items {
		out = append(out, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(PT(&items[i]))})
	}
	return out
}
