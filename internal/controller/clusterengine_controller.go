package controller

import (
	"context"
	"errors"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	agentsv1 "github.com/stepwise-run/stepwise/api/v1alpha1"
	"github.com/stepwise-run/stepwise/internal/engineadmin"
	"github.com/stepwise-run/stepwise/internal/render"
)

// EngineProbe learns who an engine is and prepares it for sessions.
type EngineProbe interface {
	EngineIdentities
	EnsureSearchAttributes(ctx context.Context, conn engineadmin.Connection) error
}

// ClusterEngineReconciler reaches each ClusterEngine with its credentials,
// asks it who it is, registers the search attributes sessions need, and
// reports it in status, which the Agents on it read: they never dial it
// for that themselves.
type ClusterEngineReconciler struct {
	client.Client
	// APIReader reads the engine's Secrets straight from the API server.
	APIReader client.Reader
	// OperatorNamespace is where the ClusterEngines' Secrets are.
	OperatorNamespace string
	// Engines reaches the engines; without it, no ClusterEngine is Ready.
	Engines EngineProbe
	// Recheck is how often a Ready engine is asked again, so a namespace
	// made anew is noticed; RetryInterval, how soon one that did not
	// answer is.
	Recheck, RetryInterval time.Duration
}

// +kubebuilder:rbac:groups=agents.stepwise.run,resources=clusterengines,verbs=get;list;watch
// +kubebuilder:rbac:groups=agents.stepwise.run,resources=clusterengines/status,verbs=get;update;patch

// Reconcile asks one ClusterEngine who it is and writes its status once.
func (r *ClusterEngineReconciler) Reconcile(ctx context.Context, req ctrl.Request) (_ ctrl.Result, retErr error) {
	ce := &agentsv1.ClusterEngine{}
	if err := r.Get(ctx, req.NamespacedName, ce); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if !ce.DeletionTimestamp.IsZero() {
		return ctrl.Result{}, nil
	}
	before := ce.DeepCopy()
	var pass referencePass
	var identity *engineadmin.Identity
	defer func() {
		setReferenceReadyCondition(&ce.Status.Conditions, &ce.Status.ObservedGeneration, ce.Generation, pass,
			"the engine answered who it is and has the search attributes sessions need")
		if identity != nil {
			ce.Status.NamespaceID, ce.Status.ClusterID, ce.Status.ServerVersion = identity.NamespaceID, identity.ClusterID, identity.ServerVersion
		}
		if err := patchStatus(ctx, r.Client, ce, before); err != nil && !apierrors.IsNotFound(err) {
			retErr = errors.Join(retErr, fmt.Errorf("writing ClusterEngine status: %w", err))
		}
	}()
	identity, pass.blocker, pass.err = r.probe(ctx, ce)
	switch {
	case pass.err != nil:
		return ctrl.Result{}, pass.err
	case pass.blocker != nil:
		return ctrl.Result{RequeueAfter: r.retryInterval()}, nil
	}
	return ctrl.Result{RequeueAfter: r.recheck()}, nil
}

// probe reads the engine's credentials and asks the engine who it is; a
// blocker says why it is not usable, an error that the cluster could not be
// read.
func (r *ClusterEngineReconciler) probe(ctx context.Context, ce *agentsv1.ClusterEngine) (*engineadmin.Identity, *render.Blocker, error) {
	spec := render.ClusterEngineSpecOf(ce)
	secrets, err := secretsByName(ctx, r.APIReader, r.OperatorNamespace, secretNames(render.EngineSecretUses("spec", spec)))
	if err != nil {
		return nil, nil, err
	}
	creds, b := render.ReadEngineCredentials("spec", spec, secrets)
	if b != nil {
		b.Message += fmt.Sprintf(" (Secrets of ClusterEngines are in the operator's namespace, %s)", r.OperatorNamespace)
		return nil, b, nil
	}
	if r.Engines == nil {
		return nil, &render.Blocker{Reason: agentsv1.ReasonEngineUnavailable, Message: "the operator has no connection to engines"}, nil
	}
	conn, err := engineadmin.ConnectionOf(spec, creds)
	if err != nil {
		return nil, &render.Blocker{Reason: agentsv1.ReasonSecretValueInvalid, Message: "spec: " + err.Error()}, nil
	}
	id, err := r.Engines.Identity(ctx, conn)
	if err != nil {
		return nil, &render.Blocker{Reason: agentsv1.ReasonEngineUnavailable, Message: err.Error()}, nil
	}
	if err := r.Engines.EnsureSearchAttributes(ctx, conn); err != nil {
		return &id, &render.Blocker{Reason: agentsv1.ReasonSearchAttributesNotRegistered, Message: err.Error()}, nil
	}
	return &id, nil, nil
}

func (r *ClusterEngineReconciler) recheck() time.Duration {
	if r.Recheck > 0 {
		return r.Recheck
	}
	return 5 * time.Minute
}

func (r *ClusterEngineReconciler) retryInterval() time.Duration {
	if r.RetryInterval > 0 {
		return r.RetryInterval
	}
	return 30 * time.Second
}

// SetupWithManager registers the reconciler and its watches: a change to
// one of its Secrets asks the engine again.
func (r *ClusterEngineReconciler) SetupWithManager(mgr ctrl.Manager) error {
	return ctrl.NewControllerManagedBy(mgr).
		For(&agentsv1.ClusterEngine{}).
		WatchesMetadata(&corev1.Secret{}, handler.EnqueueRequestsFromMapFunc(func(ctx context.Context, secret client.Object) []reconcile.Request {
			if secret.GetNamespace() != r.OperatorNamespace {
				return nil
			}
			var engines agentsv1.ClusterEngineList
			if err := r.List(ctx, &engines, client.MatchingFields{indexClusterEngineSecret: secret.GetName()}); err != nil {
				return nil
			}
			return requestsOf(&engines)
		})).
		Named("clusterengine").
		Complete(r)
}

// EnsureSearchAttributes implements EngineProbe.
func (e *Engines) EnsureSearchAttributes(ctx context.Context, conn engineadmin.Connection) error {
	return e.Client.EnsureSearchAttributes(ctx, conn)
}
