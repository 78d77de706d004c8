package controller

import (
	"context"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	agentsv1 "github.com/stepwise-run/stepwise/api/v1alpha1"
	"github.com/stepwise-run/stepwise/internal/flowclaim"
	"github.com/stepwise-run/stepwise/internal/render"
)

// SetupWithManager registers the reconciler and its watches.
func (r *AgentReconciler) SetupWithManager(mgr ctrl.Manager) error {
	return ctrl.NewControllerManagedBy(mgr).
		For(&agentsv1.Agent{}).
		Owns(&corev1.ConfigMap{}).
		Owns(&corev1.ServiceAccount{}).
		Owns(&appsv1.Deployment{}).
		Owns(&policyv1.PodDisruptionBudget{}).
		Owns(&networkingv1.NetworkPolicy{}).
		Watches(&appsv1.ReplicaSet{}, handler.EnqueueRequestsFromMapFunc(agentOfLabeledObject)).
		Watches(&corev1.Pod{}, handler.EnqueueRequestsFromMapFunc(agentOfLabeledObject), builder.WithPredicates(workerPodChanges())).
		Watches(&agentsv1.ToolSource{}, handler.EnqueueRequestsFromMapFunc(r.agentsReferencing(indexAgentToolSource))).
		Watches(&agentsv1.MediaStore{}, handler.EnqueueRequestsFromMapFunc(r.agentsReferencing(indexAgentMediaStore))).
		WatchesMetadata(&corev1.Secret{}, handler.EnqueueRequestsFromMapFunc(r.agentsReferencingSecret)).
		Watches(&appsv1.Deployment{}, onLabelChange(flowclaim.LabelFlowClaim, func(ctx context.Context, _ client.Object, claim string) []reconcile.Request {
			return r.claimRivals(ctx, claim)
		})).
		Watches(&appsv1.Deployment{}, onLabelChange(flowclaim.LabelSharedFlowClaim, func(ctx context.Context, _ client.Object, claim string) []reconcile.Request {
			return r.claimRivals(ctx, claim)
		})).
		Watches(&agentsv1.ClusterEngine{}, handler.EnqueueRequestsFromMapFunc(func(ctx context.Context, ce client.Object) []reconcile.Request {
			return r.listAgents(ctx, client.MatchingFields{indexAgentClusterEngine: ce.GetName()})
		})).
		WatchesMetadata(&corev1.Namespace{}, handler.EnqueueRequestsFromMapFunc(func(ctx context.Context, ns client.Object) []reconcile.Request {
			return r.listAgents(ctx, client.InNamespace(ns.GetName()))
		}), builder.WithPredicates(predicate.LabelChangedPredicate{})).
		Watches(&agentsv1.Agent{}, r.rivalsOfDepartingAgent()).
		Named("agent").
		Complete(r)
}

// workerPodChanges lets through what a rollout waits for: a worker pod
// appearing, starting to terminate, becoming ready or not, and going away;
// not every status write of a running pod.
func workerPodChanges() predicate.Predicate {
	return predicate.Funcs{
		UpdateFunc: func(e event.UpdateEvent) bool {
			before, okBefore := e.ObjectOld.(*corev1.Pod)
			after, okAfter := e.ObjectNew.(*corev1.Pod)
			if !okBefore || !okAfter {
				return false
			}
			return (before.DeletionTimestamp == nil) != (after.DeletionTimestamp == nil) || podReady(before) != podReady(after) ||
				before.Status.Phase != after.Status.Phase
		},
	}
}

// agentOfLabeledObject maps a worker ReplicaSet or pod to its Agent.
func agentOfLabeledObject(_ context.Context, obj client.Object) []reconcile.Request {
	name, ok := obj.GetLabels()[render.LabelAgent]
	if !ok {
		return nil
	}
	return []reconcile.Request{{NamespacedName: types.NamespacedName{Namespace: obj.GetNamespace(), Name: name}}}
}

// agentsReferencing maps an object to the Agents in its namespace whose
// index field names it.
func (r *AgentReconciler) agentsReferencing(index string) handler.MapFunc {
	return func(ctx context.Context, obj client.Object) []reconcile.Request {
		return r.listAgents(ctx, client.InNamespace(obj.GetNamespace()), client.MatchingFields{index: obj.GetName()})
	}
}

// agentsReferencingSecret maps a Secret to every Agent that receives its
// values: directly, or through a ToolSource or the MediaStore.
func (r *AgentReconciler) agentsReferencingSecret(ctx context.Context, secret client.Object) []reconcile.Request {
	ns := secret.GetNamespace()
	var requests []reconcile.Request
	if ns == r.OperatorNamespace {
		// A ClusterEngine's credentials, which its Agents' workers receive.
		var engines agentsv1.ClusterEngineList
		if err := r.List(ctx, &engines, client.MatchingFields{indexClusterEngineSecret: secret.GetName()}); err != nil {
			log.FromContext(ctx).Error(err, "listing ClusterEngines that reference a Secret", "secret", secret.GetName())
		}
		for _, ce := range engines.Items {
			requests = append(requests, r.listAgents(ctx, client.MatchingFields{indexAgentClusterEngine: ce.Name})...)
		}
	}
	requests = append(requests, r.listAgents(ctx, client.InNamespace(ns), client.MatchingFields{indexSecret: secret.GetName()})...)
	// Through a referencing ToolSource or MediaStore: the Agents that
	// reference those in turn.
	via := []struct {
		objects    handler.MapFunc
		agentIndex string
	}{
		{referencingSecret(r.Client, func() client.ObjectList { return &agentsv1.ToolSourceList{} }), indexAgentToolSource},
		{referencingSecret(r.Client, func() client.ObjectList { return &agentsv1.MediaStoreList{} }), indexAgentMediaStore},
	}
	for _, v := range via {
		for _, ref := range v.objects(ctx, secret) {
			requests = append(requests, r.listAgents(ctx, client.InNamespace(ns), client.MatchingFields{v.agentIndex: ref.Name})...)
		}
	}
	return requests
}

func (r *AgentReconciler) listAgents(ctx context.Context, opts ...client.ListOption) []reconcile.Request {
	var agents agentsv1.AgentList
	if err := r.List(ctx, &agents, opts...); err != nil {
		log.FromContext(ctx).Error(err, "listing Agents to reconcile")
		return nil
	}
	return requestsOf(&agents)
}

// claimRivals maps a Flow type claim to the Agents whose spec claims it.
func (r *AgentReconciler) claimRivals(ctx context.Context, claim string) []reconcile.Request {
	return r.listAgents(ctx, client.MatchingFields{indexAgentFlowClaim: claim})
}

// rivalsOfDepartingAgent wakes the other claimants of an Agent's Flow type
// claim when the Agent is deleted, so a waiting Agent takes the claim over.
func (r *AgentReconciler) rivalsOfDepartingAgent() handler.EventHandler {
	enqueue := func(ctx context.Context, q workqueue.TypedRateLimitingInterface[reconcile.Request], obj client.Object) {
		agent, ok := obj.(*agentsv1.Agent)
		if !ok {
			return
		}
		for _, claim := range statusClaims(agent) {
			for _, req := range r.claimRivals(ctx, claim) {
				q.Add(req)
			}
		}
	}
	return handler.Funcs{
		UpdateFunc: func(ctx context.Context, e event.UpdateEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			if e.ObjectOld.GetDeletionTimestamp() == nil && e.ObjectNew.GetDeletionTimestamp() != nil {
				enqueue(ctx, q, e.ObjectNew)
			}
		},
		DeleteFunc: func(ctx context.Context, e event.DeleteEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			enqueue(ctx, q, e.Object)
		},
	}
}

// onLabelChange calls requests with a label's old and new values when an
// object appears with the label, gains, loses or changes it, or goes away
// with it: a worker Deployment that moves to another claim or MediaStore
// frees the old one and takes the new one.
func onLabelChange(label string, requests func(ctx context.Context, obj client.Object, value string) []reconcile.Request) handler.EventHandler {
	enqueue := func(ctx context.Context, q workqueue.TypedRateLimitingInterface[reconcile.Request], obj client.Object, values ...string) {
		for _, v := range values {
			if v == "" {
				continue
			}
			for _, req := range requests(ctx, obj, v) {
				q.Add(req)
			}
		}
	}
	return handler.Funcs{
		CreateFunc: func(ctx context.Context, e event.CreateEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			enqueue(ctx, q, e.Object, e.Object.GetLabels()[label])
		},
		UpdateFunc: func(ctx context.Context, e event.UpdateEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			before, after := e.ObjectOld.GetLabels()[label], e.ObjectNew.GetLabels()[label]
			if before != after {
				enqueue(ctx, q, e.ObjectNew, before, after)
			}
		},
		DeleteFunc: func(ctx context.Context, e event.DeleteEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			enqueue(ctx, q, e.Object, e.Object.GetLabels()[label])
		},
	}
}

// referencingSecret maps a Secret to the objects in its namespace whose
// index field names it.
func referencingSecret(c client.Reader, newList func() client.ObjectList) handler.MapFunc {
	return func(ctx context.Context, secret client.Object) []reconcile.Request {
		list := newList()
		if err := c.List(ctx, list, client.InNamespace(secret.GetNamespace()), client.MatchingFields{indexSecret: secret.GetName()}); err != nil {
			log.FromContext(ctx).Error(err, "listing objects that reference a Secret", "secret", secret.GetName())
			return nil
		}
		return requestsOf(list)
	}
}

// requestsOf makes one request per object of a list.
func requestsOf(list client.ObjectList) []reconcile.Request {
	items, err := meta.ExtractList(list)
	if err != nil {
		return nil // every list type of this API has items
	}
	out := make([]reconcile.Request, 0, len(items))
	for _, item := range items {
		if obj, ok := item.(client.Object); ok {
			out = append(out, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(obj)})
		}
	}
	return out
}
