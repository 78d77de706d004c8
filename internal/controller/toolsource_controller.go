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
func (r *ToolSourceReconciler) Reconcile(ctx context.Context, req ctrl.Request) (_ ctrl.Result, retErr error) {
	ts := &agentsv1.ToolSource{}
	if err := r.Get(ctx, req.NamespacedName, ts); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if !ts.DeletionTimestamp.IsZero() {
		return ctrl.Result{}, nil
	}
	before := ts.DeepCopy()
	var pass referencePass
	defer func() {
		ts.Status = toolSourceStatus(ts, pass)
		if err := patchStatus(ctx, r.Client, ts, before); err != nil && !apierrors.IsNotFound(err) {
			retErr = errors.Join(retErr, fmt.Errorf("writing ToolSource status: %w", err))
		}
	}()
	pass.blocker, pass.err = checkSecrets(ctx, r.APIReader, ts.Namespace, render.ToolSourceSecretUses(ts, ""))
	return ctrl.Result{}, pass.err
}

// referencePass is what one pass over a ToolSource or MediaStore found.
type referencePass struct {
	// blocker is the verdict that the resource cannot be used, and why.
	blocker *render.Blocker
	// err is a failure to read or write; the controller retries.
	err error
}

// toolSourceStatus derives a ToolSource's status from one pass.
func toolSourceStatus(ts *agentsv1.ToolSource, pass referencePass) agentsv1.ToolSourceStatus {
	status := *ts.Status.DeepCopy()
	status.SourceName = render.EffectiveSourceName(ts)
	setReferenceReadyCondition(&status.Conditions, &status.ObservedGeneration, ts.Generation, pass, "the Secrets it references exist and hold values it can use")
	return status
}

// checkSecrets reads the Secrets that uses name and checks them: a blocker
// when one is missing, lacks a key or holds a value its use cannot carry,
// an error when they cannot be read.
func checkSecrets(ctx context.Context, reader client.Reader, namespace string, uses []render.SecretUse) (*render.Blocker, error) {
	secrets, err := secretsByName(ctx, reader, namespace, secretNames(uses))
	if err != nil {
		return nil, err
	}
	return render.CheckSecrets(uses, secrets), nil
}

// setReferenceReadyCondition sets Ready on a ToolSource or MediaStore from
// this pass, as the Agent's is set: a pass without a failure reached a
// verdict, ready or blocked, and stamps the generation; one that failed
// leaves observedGeneration alone.
func setReferenceReadyCondition(conditions *[]metav1.Condition, observedGeneration *int64, generation int64, pass referencePass, readyMessage string) {
	meta.SetStatusCondition(conditions, readyCondition(generation, pass.blocker, pass.err, readyMessage))
	if pass.err == nil {
		*observedGeneration = generation
	}
}

// readyCondition is Ready after a pass of any kind. A blocker is the
// verdict to report, with any failure of the same pass added; a failure
// alone is ReconcileFailed. Either is False: the resource is not known to
// be usable as of this generation.
func readyCondition(generation int64, blocker *render.Blocker, err error, readyMessage string) metav1.Condition {
	c := metav1.Condition{Type: agentsv1.ConditionReady, ObservedGeneration: generation}
	switch {
	case blocker != nil:
		c.Status, c.Reason, c.Message = metav1.ConditionFalse, blocker.Reason, blocker.Message
		if err != nil {
			c.Message += "; this pass also failed: " + err.Error()
		}
	case err != nil:
		c.Status, c.Reason, c.Message = metav1.ConditionFalse, agentsv1.ReasonReconcileFailed, err.Error()
	default:
		c.Status, c.Reason, c.Message = metav1.ConditionTrue, agentsv1.ReasonReconciled, readyMessage
	}
	return c
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
