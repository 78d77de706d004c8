package controller

import (
	"context"
	"errors"
	"fmt"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	agentsv1 "github.com/stepwise-run/stepwise/api/v1alpha1"
	"github.com/stepwise-run/stepwise/internal/render"
)

// AgentReconciler turns each Agent into its worker ConfigMap, ServiceAccount
// and Deployment, publishes its session Flow graph, and reports status.
type AgentReconciler struct {
	client.Client
	// APIReader reads Secrets straight from the API server, so the
	// operator never caches every Secret of the cluster.
	APIReader client.Reader
	// Defaults are the operator-wide settings.
	Defaults render.Defaults
	// RecheckInterval is how soon an Agent blocked by an object the
	// operator does not watch is checked again.
	RecheckInterval time.Duration
}

// +kubebuilder:rbac:groups=agents.stepwise.run,resources=agents,verbs=get;list;watch
// +kubebuilder:rbac:groups=agents.stepwise.run,resources=agents/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=agents.stepwise.run,resources=toolsources;mediastores,verbs=get;list;watch
// +kubebuilder:rbac:groups="",resources=configmaps;serviceaccounts,verbs=get;list;watch;create;update;patch
// +kubebuilder:rbac:groups=apps,resources=deployments,verbs=get;list;watch;create;update;patch
// +kubebuilder:rbac:groups=apps,resources=replicasets,verbs=get;list;watch
// +kubebuilder:rbac:groups="",resources=secrets,verbs=get;list;watch

// Reconcile runs one pass for one Agent: observe what it references, check
// it, apply the owned objects, and write status once.
func (r *AgentReconciler) Reconcile(ctx context.Context, req ctrl.Request) (result ctrl.Result, retErr error) {
	agent := &agentsv1.Agent{}
	if err := r.Get(ctx, req.NamespacedName, agent); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if !agent.DeletionTimestamp.IsZero() {
		return ctrl.Result{}, nil // owned objects go with the Agent through their owner references
	}

	before := agent.DeepCopy()
	var pass agentPass
	defer func() {
		agent.Status = agentStatus(agent, pass)
		if err := r.Status().Patch(ctx, agent, client.MergeFrom(before)); err != nil && !apierrors.IsNotFound(err) {
			retErr = errors.Join(retErr, fmt.Errorf("writing Agent status: %w", err))
		}
	}()

	pass.err = r.reconcileNormal(ctx, agent, &pass)
	if pass.err != nil {
		var blocker *render.Blocker
		if errors.As(pass.err, &blocker) {
			pass.blocker, pass.err = blocker, nil
			log.FromContext(ctx).Info("Agent not applied", "reason", blocker.Reason, "message", blocker.Message)
		}
	}
	if observeErr := r.observeWorkers(ctx, agent, &pass); observeErr != nil {
		return ctrl.Result{}, errors.Join(pass.err, observeErr)
	}
	if pass.blocker != nil && pass.blocker.Reason == agentsv1.ReasonOwnedObjectConflict {
		// No event tells when the object in the way goes away.
		return ctrl.Result{RequeueAfter: r.RecheckInterval}, nil
	}
	return ctrl.Result{}, pass.err
}

// reconcileNormal checks the Agent and applies its objects. A
// *render.Blocker means nothing was applied, and the Agent waits for a
// change to what it references.
func (r *AgentReconciler) reconcileNormal(ctx context.Context, agent *agentsv1.Agent, pass *agentPass) error {
	observed, err := r.observeReferences(ctx, agent)
	if err != nil {
		return err
	}
	resolved, blocker := render.Resolve(agent, observed, r.Defaults)
	if blocker != nil {
		return blocker
	}
	if err := r.checkFlowClaim(ctx, agent, resolved.Engine); err != nil {
		return err
	}
	worker, err := render.Worker(resolved)
	if err != nil {
		return err
	}
	graph, err := render.Graph(agent, resolved.EngineVersion)
	if err != nil {
		return err
	}

	if err := r.checkOwnership(ctx, agent, worker); err != nil {
		return err
	}
	// The ServiceAccount and the configuration exist before the Deployment
	// that uses them.
	if worker.ServiceAccount != nil {
		if err := r.apply(ctx, worker.ServiceAccount); err != nil {
			return err
		}
	}
	if err := r.apply(ctx, worker.ConfigMap); err != nil {
		return err
	}
	if err := r.apply(ctx, worker.Deployment); err != nil {
		return err
	}
	// Status reports what the API server answered, not what the cache may
	// not have seen yet.
	deployment, err := render.Convert[appsv1.Deployment](worker.Deployment)
	if err != nil {
		return err
	}
	pass.deployment = deployment
	if pass.graph, err = r.publishGraph(ctx, agent, graph); err != nil {
		return err
	}
	pass.applied = true
	return nil
}

// checkOwnership refuses to apply over an object of the same name that the
// Agent does not control, such as a team's own Deployment: server-side apply
// with force would otherwise take it over.
func (r *AgentReconciler) checkOwnership(ctx context.Context, agent *agentsv1.Agent, worker *render.WorkerObjects) error {
	type owned struct {
		kind string
		obj  client.Object
	}
	objects := []owned{
		{"ConfigMap", &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: render.ConfigMapName(agent.Name)}}},
		{"ConfigMap", &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: render.GraphConfigMapName(agent.Name)}}},
		{"Deployment", &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: render.WorkerName(agent.Name)}}},
	}
	if worker.ServiceAccount != nil {
		objects = append(objects, owned{"ServiceAccount", &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: render.WorkerName(agent.Name)}}})
	}
	for _, o := range objects {
		key := client.ObjectKey{Namespace: agent.Namespace, Name: o.obj.GetName()}
		err := r.Get(ctx, key, o.obj)
		if apierrors.IsNotFound(err) {
			// The cache holds only the objects the operator labels.
			err = r.APIReader.Get(ctx, key, o.obj)
		}
		switch {
		case apierrors.IsNotFound(err):
			continue
		case err != nil:
			return fmt.Errorf("reading %s %s: %w", o.kind, key.Name, err)
		case !isControlledBy(o.obj, agent):
			return &render.Blocker{Reason: agentsv1.ReasonOwnedObjectConflict, Message: fmt.Sprintf(
				"%s %q exists and is not owned by this Agent; the operator will not take it over: rename or delete it", o.kind, key.Name)}
		}
	}
	return nil
}

// observeReferences reads the ToolSources, MediaStore and Secrets the Agent
// references. Missing objects are left out; Resolve says what that means.
func (r *AgentReconciler) observeReferences(ctx context.Context, agent *agentsv1.Agent) (render.Observed, error) {
	observed := render.Observed{ToolSources: map[string]*agentsv1.ToolSource{}}
	names := secretNames(render.AgentSecretUses(agent))
	for _, ref := range agent.Spec.ToolSources {
		ts := &agentsv1.ToolSource{}
		if err := r.Get(ctx, client.ObjectKey{Namespace: agent.Namespace, Name: ref.Name}, ts); err != nil {
			if apierrors.IsNotFound(err) {
				continue
			}
			return observed, fmt.Errorf("reading ToolSource %s: %w", ref.Name, err)
		}
		observed.ToolSources[ref.Name] = ts
		names = append(names, secretNames(render.ToolSourceSecretUses(ts, ""))...)
	}
	if ref := agent.Spec.MediaStore; ref != nil {
		ms := &agentsv1.MediaStore{}
		err := r.Get(ctx, client.ObjectKey{Namespace: agent.Namespace, Name: ref.Name}, ms)
		switch {
		case err == nil:
			observed.MediaStore = ms
			names = append(names, secretNames(render.MediaStoreSecretUses(ms, ""))...)
		case !apierrors.IsNotFound(err):
			return observed, fmt.Errorf("reading MediaStore %s: %w", ref.Name, err)
		}
	}
	secrets, err := secretsByName(ctx, r.APIReader, agent.Namespace, names)
	if err != nil {
		return observed, err
	}
	observed.Secrets = secrets
	return observed, nil
}

// checkFlowClaim refuses an Agent when another Agent runs, or is older and
// claims, the same Flow type on the same engine namespace.
func (r *AgentReconciler) checkFlowClaim(ctx context.Context, agent *agentsv1.Agent, engine agentsv1.EngineSpec) error {
	claim := render.FlowClaim(engine, agent.Spec.FlowType)
	var rivals agentsv1.AgentList
	if err := r.List(ctx, &rivals, client.MatchingFields{indexAgentFlowClaim: claim}); err != nil {
		return fmt.Errorf("listing Agents that claim Flow type %s: %w", agent.Spec.FlowType, err)
	}
	if len(rivals.Items) <= 1 {
		return nil
	}
	claimants := make([]claimant, 0, len(rivals.Items))
	for i := range rivals.Items {
		rival := &rivals.Items[i]
		if rival.UID != agent.UID && !rival.DeletionTimestamp.IsZero() {
			continue
		}
		holds, err := r.holdsClaim(ctx, rival, claim)
		if err != nil {
			return err
		}
		claimants = append(claimants, claimant{key: client.ObjectKeyFromObject(rival), created: rival.CreationTimestamp, holds: holds})
	}
	winner := electClaimant(claimants)
	if winner.key == client.ObjectKeyFromObject(agent) {
		return nil
	}
	return &render.Blocker{Reason: agentsv1.ReasonFlowTypeConflict, Message: fmt.Sprintf(
		"Agent %s already claims Flow type %q on engine %s namespace %q; the first claimant keeps its workers",
		winner.key, agent.Spec.FlowType, engine.Address, engine.Namespace)}
}

// holdsClaim reports whether an Agent's applied worker configuration carries
// a claim.
func (r *AgentReconciler) holdsClaim(ctx context.Context, agent *agentsv1.Agent, claim string) (bool, error) {
	cm := &corev1.ConfigMap{}
	err := r.Get(ctx, client.ObjectKey{Namespace: agent.Namespace, Name: render.ConfigMapName(agent.Name)}, cm)
	switch {
	case apierrors.IsNotFound(err):
		return false, nil
	case err != nil:
		return false, fmt.Errorf("reading the worker ConfigMap of Agent %s: %w", agent.Name, err)
	}
	return cm.Labels[render.LabelFlowClaim] == claim && isControlledBy(cm, agent), nil
}

// publishGraph writes the Flow graph ConfigMap only when the graph changed,
// and returns it as published.
func (r *AgentReconciler) publishGraph(ctx context.Context, agent *agentsv1.Agent, graph *render.PublishedGraph) (*corev1.ConfigMap, error) {
	current := &corev1.ConfigMap{}
	err := r.Get(ctx, client.ObjectKey{Namespace: agent.Namespace, Name: render.GraphConfigMapName(agent.Name)}, current)
	switch {
	case err == nil && current.Annotations[render.AnnotationGraphDigest] == graph.Digest && isControlledBy(current, agent):
		return current, nil
	case err != nil && !apierrors.IsNotFound(err):
		return nil, fmt.Errorf("reading the session Flow graph ConfigMap: %w", err)
	}
	if err := r.apply(ctx, graph.ConfigMap); err != nil {
		return nil, err
	}
	return render.Convert[corev1.ConfigMap](graph.ConfigMap)
}

// observeWorkers reads, for status, the worker Deployment and the graph
// ConfigMap that this pass did not apply, and the Deployment's ReplicaSets.
func (r *AgentReconciler) observeWorkers(ctx context.Context, agent *agentsv1.Agent, pass *agentPass) error {
	if pass.deployment == nil {
		deployment := &appsv1.Deployment{}
		err := r.Get(ctx, client.ObjectKey{Namespace: agent.Namespace, Name: render.WorkerName(agent.Name)}, deployment)
		switch {
		case err == nil && isControlledBy(deployment, agent):
			pass.deployment = deployment
		case err != nil && !apierrors.IsNotFound(err):
			return fmt.Errorf("reading the worker Deployment: %w", err)
		}
	}
	if pass.graph == nil {
		graph := &corev1.ConfigMap{}
		err := r.Get(ctx, client.ObjectKey{Namespace: agent.Namespace, Name: render.GraphConfigMapName(agent.Name)}, graph)
		switch {
		case err == nil && isControlledBy(graph, agent):
			pass.graph = graph
		case err != nil && !apierrors.IsNotFound(err):
			return fmt.Errorf("reading the session Flow graph ConfigMap: %w", err)
		}
	}
	if pass.deployment == nil {
		return nil
	}
	var replicaSets appsv1.ReplicaSetList
	if err := r.List(ctx, &replicaSets, client.InNamespace(agent.Namespace), client.MatchingLabels(render.SelectorLabels(agent.Name))); err != nil {
		return fmt.Errorf("listing the worker ReplicaSets: %w", err)
	}
	for _, rs := range replicaSets.Items {
		if isControlledBy(&rs, pass.deployment) {
			pass.replicaSets = append(pass.replicaSets, rs)
		}
	}
	return nil
}

// applyConfiguration is an apply configuration the client can apply.
type applyConfiguration interface {
	IsApplyConfiguration()
}

func (r *AgentReconciler) apply(ctx context.Context, obj applyConfiguration) error {
	if err := r.Apply(ctx, obj, client.FieldOwner(render.FieldOwner), client.ForceOwnership); err != nil {
		return fmt.Errorf("applying %T: %w", obj, err)
	}
	return nil
}

func isControlledBy(obj, owner client.Object) bool {
	for _, ref := range obj.GetOwnerReferences() {
		if ref.Controller != nil && *ref.Controller && ref.UID == owner.GetUID() {
			return true
		}
	}
	return false
}

// SetupWithManager registers the reconciler and its watches.
func (r *AgentReconciler) SetupWithManager(mgr ctrl.Manager) error {
	return ctrl.NewControllerManagedBy(mgr).
		For(&agentsv1.Agent{}).
		Owns(&corev1.ConfigMap{}).
		Owns(&corev1.ServiceAccount{}).
		Owns(&appsv1.Deployment{}).
		Watches(&appsv1.ReplicaSet{}, handler.EnqueueRequestsFromMapFunc(agentOfLabeledObject)).
		Watches(&agentsv1.ToolSource{}, handler.EnqueueRequestsFromMapFunc(r.agentsReferencing(indexAgentToolSource))).
		Watches(&agentsv1.MediaStore{}, handler.EnqueueRequestsFromMapFunc(r.agentsReferencing(indexAgentMediaStore))).
		WatchesMetadata(&corev1.Secret{}, handler.EnqueueRequestsFromMapFunc(r.agentsReferencingSecret)).
		Watches(&agentsv1.Agent{}, r.flowClaimRivals()).
		Named("agent").
		Complete(r)
}

// agentOfLabeledObject maps a worker ReplicaSet to its Agent.
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
func (r *AgentReconciler) agentsReferencingSecret(ctx context.Context, obj client.Object) []reconcile.Request {
	ns, name := obj.GetNamespace(), obj.GetName()
	requests := r.listAgents(ctx, client.InNamespace(ns), client.MatchingFields{indexAgentSecret: name})
	var toolSources agentsv1.ToolSourceList
	if err := r.List(ctx, &toolSources, client.InNamespace(ns), client.MatchingFields{indexToolSourceSecret: name}); err != nil {
		log.FromContext(ctx).Error(err, "listing ToolSources that reference a Secret", "secret", name)
	}
	for _, ts := range toolSources.Items {
		requests = append(requests, r.listAgents(ctx, client.InNamespace(ns), client.MatchingFields{indexAgentToolSource: ts.Name})...)
	}
	var mediaStores agentsv1.MediaStoreList
	if err := r.List(ctx, &mediaStores, client.InNamespace(ns), client.MatchingFields{indexMediaStoreSecret: name}); err != nil {
		log.FromContext(ctx).Error(err, "listing MediaStores that reference a Secret", "secret", name)
	}
	for _, ms := range mediaStores.Items {
		requests = append(requests, r.listAgents(ctx, client.InNamespace(ns), client.MatchingFields{indexAgentMediaStore: ms.Name})...)
	}
	return requests
}

func (r *AgentReconciler) listAgents(ctx context.Context, opts ...client.ListOption) []reconcile.Request {
	var agents agentsv1.AgentList
	if err := r.List(ctx, &agents, opts...); err != nil {
		log.FromContext(ctx).Error(err, "listing Agents to reconcile")
		return nil
	}
	requests := make([]reconcile.Request, 0, len(agents.Items))
	for _, a := range agents.Items {
		requests = append(requests, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&a)})
	}
	return requests
}

// flowClaimRivals wakes the other Agents of a Flow type claim when one of
// them changes or goes away, so a waiting Agent takes over a freed claim.
// An update wakes the rivals of both the old and the new claim.
func (r *AgentReconciler) flowClaimRivals() handler.EventHandler {
	enqueue := func(ctx context.Context, q workqueue.TypedRateLimitingInterface[reconcile.Request], objs ...client.Object) {
		for _, obj := range objs {
			agent, ok := obj.(*agentsv1.Agent)
			if !ok {
				continue
			}
			claim, ok := flowClaim(agent, r.Defaults)
			if !ok {
				continue
			}
			for _, req := range r.listAgents(ctx, client.MatchingFields{indexAgentFlowClaim: claim}) {
				if req.NamespacedName != client.ObjectKeyFromObject(agent) {
					q.Add(req)
				}
			}
		}
	}
	return handler.Funcs{
		UpdateFunc: func(ctx context.Context, e event.UpdateEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			// Status writes do not change a claim; waking rivals on them
			// would only bounce reconciles between the rivals.
			if e.ObjectOld.GetGeneration() != e.ObjectNew.GetGeneration() {
				enqueue(ctx, q, e.ObjectOld, e.ObjectNew)
			}
		},
		DeleteFunc: func(ctx context.Context, e event.DeleteEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			enqueue(ctx, q, e.Object)
		},
	}
}
