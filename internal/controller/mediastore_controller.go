package controller

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	agentsv1 "github.com/stepwise-run/stepwise/api/v1alpha1"
	"github.com/stepwise-run/stepwise/internal/render"
)

// MediaStoreReconciler reports whether a MediaStore can be used and keeps
// it while Agents reference it, because their sessions still read the
// images it holds.
type MediaStoreReconciler struct {
	client.Client
	// APIReader reads Secrets straight from the API server.
	APIReader client.Reader
}

// +kubebuilder:rbac:groups=agents.stepwise.run,resources=mediastores,verbs=get;list;watch;update;patch
// +kubebuilder:rbac:groups=agents.stepwise.run,resources=mediastores/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=agents.stepwise.run,resources=mediastores/finalizers,verbs=update

// Reconcile runs one pass for one MediaStore.
func (r *MediaStoreReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	ms := &agentsv1.MediaStore{}
	if err := r.Get(ctx, req.NamespacedName, ms); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	// The finalizer comes first, so no Agent can start using the store
	// before deletion would wait for it.
	if ms.DeletionTimestamp.IsZero() && !controllerutil.ContainsFinalizer(ms, agentsv1.MediaStoreProtectionFinalizer) {
		patch := client.MergeFrom(ms.DeepCopy())
		controllerutil.AddFinalizer(ms, agentsv1.MediaStoreProtectionFinalizer)
		if err := r.Patch(ctx, ms, patch); err != nil {
			return ctrl.Result{}, fmt.Errorf("adding the in-use protection finalizer: %w", err)
		}
	}

	users, err := r.referencingAgents(ctx, ms)
	if err != nil {
		return ctrl.Result{}, err
	}
	if !ms.DeletionTimestamp.IsZero() && len(users) == 0 {
		if !controllerutil.ContainsFinalizer(ms, agentsv1.MediaStoreProtectionFinalizer) {
			return ctrl.Result{}, nil
		}
		patch := client.MergeFrom(ms.DeepCopy())
		controllerutil.RemoveFinalizer(ms, agentsv1.MediaStoreProtectionFinalizer)
		if err := r.Patch(ctx, ms, patch); err != nil && !apierrors.IsNotFound(err) {
			return ctrl.Result{}, fmt.Errorf("removing the in-use protection finalizer: %w", err)
		}
		return ctrl.Result{}, nil
	}

	before := ms.DeepCopy()
	uses := render.MediaStoreSecretUses(ms, "")
	secrets, err := secretsByName(ctx, r.APIReader, ms.Namespace, secretNames(uses))
	var blocker *render.Blocker
	if err == nil {
		blocker = render.CheckSecrets(uses, secrets)
	}
	ms.Status.StoreURI = render.StoreURI(ms)
	setReferenceReadyCondition(&ms.Status.Conditions, &ms.Status.ObservedGeneration, ms.Generation, blocker, err)
	setInUseCondition(&ms.Status.Conditions, ms.Generation, !ms.DeletionTimestamp.IsZero(), users)
	if patchErr := r.Status().Patch(ctx, ms, client.MergeFrom(before)); patchErr != nil && !apierrors.IsNotFound(patchErr) {
		err = errors.Join(err, fmt.Errorf("writing MediaStore status: %w", patchErr))
	}
	return ctrl.Result{}, err
}

// referencingAgents lists the Agents that reference the MediaStore, as
// namespace/name, sorted.
func (r *MediaStoreReconciler) referencingAgents(ctx context.Context, ms *agentsv1.MediaStore) ([]string, error) {
	var agents agentsv1.AgentList
	if err := r.List(ctx, &agents, client.InNamespace(ms.Namespace), client.MatchingFields{indexAgentMediaStore: ms.Name}); err != nil {
		return nil, fmt.Errorf("listing Agents that reference MediaStore %s: %w", ms.Name, err)
	}
	users := make([]string, 0, len(agents.Items))
	for _, a := range agents.Items {
		users = append(users, a.Name)
	}
	slices.Sort(users)
	return users, nil
}

// setInUseCondition derives InUse from the Agents this pass found.
func setInUseCondition(conditions *[]metav1.Condition, generation int64, deleting bool, users []string) {
	c := metav1.Condition{Type: agentsv1.ConditionInUse, ObservedGeneration: generation}
	switch {
	case len(users) == 0:
		c.Status, c.Reason, c.Message = metav1.ConditionFalse, agentsv1.ReasonNotReferenced, "no Agent references this MediaStore"
	case deleting:
		c.Status, c.Reason = metav1.ConditionTrue, agentsv1.ReasonDeletionBlocked
		c.Message = fmt.Sprintf("deletion waits until no Agent references this MediaStore, because their sessions still read its images; referenced by Agents %s",
			strings.Join(users, ", "))
	default:
		c.Status, c.Reason = metav1.ConditionTrue, agentsv1.ReasonReferencedByAgents
		c.Message = "referenced by Agents " + strings.Join(users, ", ")
	}
	meta.SetStatusCondition(conditions, c)
}

// SetupWithManager registers the reconciler and its watches.
func (r *MediaStoreReconciler) SetupWithManager(mgr ctrl.Manager) error {
	return ctrl.NewControllerManagedBy(mgr).
		For(&agentsv1.MediaStore{}).
		WatchesMetadata(&corev1.Secret{}, handler.EnqueueRequestsFromMapFunc(func(ctx context.Context, obj client.Object) []reconcile.Request {
			var list agentsv1.MediaStoreList
			if err := r.List(ctx, &list, client.InNamespace(obj.GetNamespace()), client.MatchingFields{indexMediaStoreSecret: obj.GetName()}); err != nil {
				return nil
			}
			return requestsFor(list.Items)
		})).
		Watches(&agentsv1.Agent{}, mediaStoresOfAgents()).
		Named("mediastore").
		Complete(r)
}

// mediaStoresOfAgents wakes the MediaStore an Agent references, before and
// after a change, so a store learns both that it gained and that it lost a
// user.
func mediaStoresOfAgents() handler.EventHandler {
	enqueue := func(q workqueue.TypedRateLimitingInterface[reconcile.Request], objs ...client.Object) {
		for _, obj := range objs {
			if agent, ok := obj.(*agentsv1.Agent); ok && agent.Spec.MediaStore != nil {
				q.Add(reconcile.Request{NamespacedName: types.NamespacedName{Namespace: agent.Namespace, Name: agent.Spec.MediaStore.Name}})
			}
		}
	}
	return handler.Funcs{
		CreateFunc: func(_ context.Context, e event.CreateEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			enqueue(q, e.Object)
		},
		UpdateFunc: func(_ context.Context, e event.UpdateEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			if e.ObjectOld.GetGeneration() != e.ObjectNew.GetGeneration() {
				enqueue(q, e.ObjectOld, e.ObjectNew)
			}
		},
		DeleteFunc: func(_ context.Context, e event.DeleteEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			enqueue(q, e.Object)
		},
	}
}
