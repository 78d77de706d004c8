package controller

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
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
	"github.com/stepwise-run/stepwise/internal/flowclaim"
	"github.com/stepwise-run/stepwise/internal/render"
)

// MediaStoreReconciler reports whether a MediaStore can be used and keeps
// it while Agents use it, because their sessions still read the images it
// holds.
type MediaStoreReconciler struct {
	client.Client
	// APIReader reads Secrets straight from the API server.
	APIReader client.Reader
	// HostPathRoots are the host directories a localDirectory store without
	// a PersistentVolumeClaim may use; see render.Defaults.
	HostPathRoots []string
}

// +kubebuilder:rbac:groups=agents.stepwise.run,resources=mediastores,verbs=get;list;watch;update;patch
// +kubebuilder:rbac:groups=agents.stepwise.run,resources=mediastores/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=agents.stepwise.run,resources=mediastores/finalizers,verbs=update

// maxListedUsers bounds the Agents an InUse message names, so the message
// stays far below the API's limit however many Agents share a store.
const maxListedUsers = 20

// Reconcile runs one pass for one MediaStore and writes its status once,
// unless the pass let a deleted store go.
func (r *MediaStoreReconciler) Reconcile(ctx context.Context, req ctrl.Request) (_ ctrl.Result, retErr error) {
	ms := &agentsv1.MediaStore{}
	if err := r.Get(ctx, req.NamespacedName, ms); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	before := ms.DeepCopy()
	pass := mediaStorePass{deleting: !ms.DeletionTimestamp.IsZero()}
	defer func() {
		if pass.released {
			return
		}
		ms.Status = mediaStoreStatus(ms, pass)
		if err := patchStatus(ctx, r.Client, ms, before); err != nil && !apierrors.IsNotFound(err) {
			retErr = errors.Join(retErr, fmt.Errorf("writing MediaStore status: %w", err))
		}
	}()
	pass.err = r.reconcile(ctx, ms, &pass)
	return ctrl.Result{}, pass.err
}

// mediaStorePass is what one pass over a MediaStore found.
type mediaStorePass struct {
	referencePass
	deleting bool
	// users are the Agents that use the store; nil with usersKnown false
	// when they could not be listed.
	users      []string
	usersKnown bool
	// released is true when the pass removed the finalizer of a deleted
	// store, which then goes away.
	released bool
}

func (r *MediaStoreReconciler) reconcile(ctx context.Context, ms *agentsv1.MediaStore, pass *mediaStorePass) error {
	// The finalizer comes first, so no Agent can start using the store
	// before deletion would wait for it. It is patched on a copy, so the
	// status write compares against the object as read.
	if !pass.deleting && !controllerutil.ContainsFinalizer(ms, agentsv1.MediaStoreProtectionFinalizer) {
		if err := r.patchFinalizers(ctx, ms.DeepCopy(), controllerutil.AddFinalizer); err != nil {
			return fmt.Errorf("adding the in-use protection finalizer: %w", err)
		}
	}
	users, err := r.users(ctx, ms)
	if err != nil {
		return err
	}
	pass.users, pass.usersKnown = users, true
	if pass.deleting && len(users) == 0 {
		if controllerutil.ContainsFinalizer(ms, agentsv1.MediaStoreProtectionFinalizer) {
			if err := r.patchFinalizers(ctx, ms.DeepCopy(), controllerutil.RemoveFinalizer); err != nil && !apierrors.IsNotFound(err) {
				return fmt.Errorf("removing the in-use protection finalizer: %w", err)
			}
		}
		pass.released = true
		return nil
	}
	if pass.blocker = render.CheckMediaStore(ms, r.HostPathRoots); pass.blocker != nil {
		return nil
	}
	pass.blocker, err = checkSecrets(ctx, r.APIReader, ms.Namespace, render.MediaStoreSecretUses(ms, ""))
	return err
}

// mediaStoreStatus derives a MediaStore's status from one pass. What the
// pass could not observe keeps its earlier value.
func mediaStoreStatus(ms *agentsv1.MediaStore, pass mediaStorePass) agentsv1.MediaStoreStatus {
	status := *ms.Status.DeepCopy()
	status.StoreURI = render.StoreURI(ms)
	setReferenceReadyCondition(&status.Conditions, &status.ObservedGeneration, ms.Generation, pass.referencePass, mediaStoreReadyMessage(ms))
	if pass.usersKnown {
		setInUseCondition(&status.Conditions, ms.Generation, pass.deleting, pass.users)
	}
	return status
}

// mediaStoreReadyMessage says what a usable store gives its workers.
func mediaStoreReadyMessage(ms *agentsv1.MediaStore) string {
	switch local := ms.Spec.LocalDirectory; {
	case local == nil:
		return "the Secrets it references exist and hold their keys"
	case local.PersistentVolumeClaimName != "":
		return fmt.Sprintf("workers mount PersistentVolumeClaim %q at %s", local.PersistentVolumeClaimName, local.Root)
	default:
		return fmt.Sprintf("workers mount the node's directory %s, which the operator allows as a host path", local.Root)
	}
}

// patchFinalizers changes the finalizers with an optimistic lock, so a
// finalizer another controller adds at the same time is never lost.
func (r *MediaStoreReconciler) patchFinalizers(ctx context.Context, ms *agentsv1.MediaStore, change func(client.Object, string) bool) error {
	patch := client.MergeFromWithOptions(ms.DeepCopy(), client.MergeFromWithOptimisticLock{})
	change(ms, agentsv1.MediaStoreProtectionFinalizer)
	return r.Patch(ctx, ms, patch)
}

// users lists, sorted, the Agents that reference the MediaStore in their
// spec or whose running workers were configured with it.
func (r *MediaStoreReconciler) users(ctx context.Context, ms *agentsv1.MediaStore) ([]string, error) {
	var agents agentsv1.AgentList
	if err := r.List(ctx, &agents, client.InNamespace(ms.Namespace), client.MatchingFields{indexAgentMediaStore: ms.Name}); err != nil {
		return nil, fmt.Errorf("listing Agents that reference MediaStore %s: %w", ms.Name, err)
	}
	users := map[string]bool{}
	for _, a := range agents.Items {
		users[a.Name] = true
	}
	var deployments appsv1.DeploymentList
	if err := r.List(ctx, &deployments, client.InNamespace(ms.Namespace), client.MatchingLabels{render.LabelMediaStore: ms.Name}); err != nil {
		return nil, fmt.Errorf("listing worker Deployments that use MediaStore %s: %w", ms.Name, err)
	}
	for i := range deployments.Items {
		owner, err := flowclaim.ControllingAgent(ctx, r.Client, &deployments.Items[i])
		if err != nil {
			return nil, err
		}
		if owner != nil {
			users[owner.Name] = true
		}
	}
	names := keys(users)
	slices.Sort(names)
	return names, nil
}

// setInUseCondition derives InUse from the Agents this pass found.
func setInUseCondition(conditions *[]metav1.Condition, generation int64, deleting bool, users []string) {
	c := metav1.Condition{Type: agentsv1.ConditionInUse, ObservedGeneration: generation}
	listed := strings.Join(users[:min(len(users), maxListedUsers)], ", ")
	if len(users) > maxListedUsers {
		listed += fmt.Sprintf(" and %d more", len(users)-maxListedUsers)
	}
	switch {
	case len(users) == 0:
		c.Status, c.Reason, c.Message = metav1.ConditionFalse, agentsv1.ReasonNotReferenced, "no Agent references this MediaStore"
	case deleting:
		c.Status, c.Reason = metav1.ConditionTrue, agentsv1.ReasonDeletionBlocked
		c.Message = "deletion waits until no Agent uses this MediaStore, because their sessions still read its images; used by Agents " + listed
	default:
		c.Status, c.Reason = metav1.ConditionTrue, agentsv1.ReasonReferencedByAgents
		c.Message = "used by Agents " + listed
	}
	meta.SetStatusCondition(conditions, c)
}

// SetupWithManager registers the reconciler and its watches.
func (r *MediaStoreReconciler) SetupWithManager(mgr ctrl.Manager) error {
	return ctrl.NewControllerManagedBy(mgr).
		For(&agentsv1.MediaStore{}).
		WatchesMetadata(&corev1.Secret{}, handler.EnqueueRequestsFromMapFunc(
			referencingSecret(r.Client, func() client.ObjectList { return &agentsv1.MediaStoreList{} }))).
		Watches(&agentsv1.Agent{}, mediaStoresOfAgents()).
		Watches(&appsv1.Deployment{}, onLabelChange(render.LabelMediaStore, func(_ context.Context, obj client.Object, name string) []reconcile.Request {
			return []reconcile.Request{{NamespacedName: types.NamespacedName{Namespace: obj.GetNamespace(), Name: name}}}
		})).
		Named("mediastore").
		Complete(r)
}

// mediaStoresOfAgents wakes the MediaStore an Agent references, before and
// after a change of the reference, so a store learns both that it gained
// and that it lost a user.
func mediaStoresOfAgents() handler.EventHandler {
	ref := func(obj client.Object) string {
		if agent, ok := obj.(*agentsv1.Agent); ok && agent.Spec.MediaStore != nil {
			return agent.Spec.MediaStore.Name
		}
		return ""
	}
	enqueue := func(q workqueue.TypedRateLimitingInterface[reconcile.Request], obj client.Object, names ...string) {
		for _, name := range names {
			if name != "" {
				q.Add(reconcile.Request{NamespacedName: types.NamespacedName{Namespace: obj.GetNamespace(), Name: name}})
			}
		}
	}
	return handler.Funcs{
		CreateFunc: func(_ context.Context, e event.CreateEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			enqueue(q, e.Object, ref(e.Object))
		},
		UpdateFunc: func(_ context.Context, e event.UpdateEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			if before, after := ref(e.ObjectOld), ref(e.ObjectNew); before != after {
				enqueue(q, e.ObjectNew, before, after)
			}
		},
		DeleteFunc: func(_ context.Context, e event.DeleteEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			enqueue(q, e.Object, ref(e.Object))
		},
	}
}
