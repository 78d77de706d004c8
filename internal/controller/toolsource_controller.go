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
func (r *ToolSourceReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	ts := &agentsv1.ToolSource{}
	if err := r.Get(ctx, req.NamespacedName, ts); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if !ts.DeletionTimestamp.IsZero() {
		return ctrl.Result{}, nil
	}
	before := ts.DeepCopy()
	blocker, err := checkSecrets(ctx, r.APIReader, ts.Namespace, render.ToolSourceSecretUses(ts, ""))
	ts.Status.SourceName = render.EffectiveSourceName(ts)
	setReferenceReadyCondition(&ts.Status.Conditions, &ts.Status.ObservedGeneration, ts.Generation, blocker, err)
	if patchErr := r.Status().Patch(ctx, ts, client.MergeFrom(before)); patchErr != nil && !apierrors.IsNotFound(patchErr) {
		err = errors.Join(err, fmt.Errorf("writing ToolSource status: %w", patchErr))
	}
	return ctrl.Result{}, err
}

// checkSecrets reads the Secrets that uses name and checks them: a blocker
// when one is missing or lacks a key, an error when they cannot be read.
func checkSecrets(ctx context.Context, reader client.Reader, namespace string, uses []render.SecretUse) (*render.Blocker, error) {
	secrets, err := secretsByName(ctx, reader, namespace, secretNames(uses))
	if err != nil {
		return nil, err
	}
	return render.CheckSecrets(uses, secrets), nil
}

// setReferenceReadyCondition sets Ready on a ToolSource or MediaStore from
// this pass. A pass that reached a verdict, ready or blocked, stamps the
// generation; one that could not read its Secrets does not.
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
		WatchesMetadata(&corev1.Secret{}, handler.EnqueueRequestsFromMapFunc(
			referencingSecret(r.Client, func() client.ObjectList { return &agentsv1.ToolSourceList{} }))).
		Named("toolsource").
		Complete(r)
}
