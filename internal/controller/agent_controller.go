package controller

import (
	"context"
	"errors"
	"fmt"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	agentsv1 "github.com/stepwise-run/stepwise/api/v1alpha1"
	"github.com/stepwise-run/stepwise/internal/flowclaim"
	"github.com/stepwise-run/stepwise/internal/hub"
	"github.com/stepwise-run/stepwise/internal/render"
	"github.com/stepwise-run/stepwise/internal/rollout"
	"github.com/stepwise-run/stepwise/internal/session"
)

// AgentReconciler turns each Agent into its worker ConfigMap, ServiceAccount
// and Deployment, publishes its session Flow graph, and reports status.
type AgentReconciler struct {
	client.Client
	// APIReader reads Secrets, and objects the cache does not hold, straight
	// from the API server, so the operator never caches every Secret of the
	// cluster.
	APIReader client.Reader
	// Defaults are the operator-wide settings.
	Defaults render.Defaults
	// OperatorNamespace is where the ClusterEngines' Secrets are.
	OperatorNamespace string
	// Identities asks an engine of an Agent's namespace's own who it is;
	// without it such an Agent is never applied.
	Identities EngineIdentities
	// RecheckInterval is how soon an Agent blocked by an object the
	// operator does not watch is checked again.
	RecheckInterval time.Duration
	// Pollers reads who polls an Agent's task queue; without it, a
	// stop-old-first rollout never starts its new workers.
	Pollers TaskQueuePollers
	// PollerQuietPeriod is how long a worker must not have polled to count
	// as stopped; zero means DefaultPollerQuietPeriod.
	PollerQuietPeriod time.Duration
	// WorkerDeployments does a versioned rollout's part on the engine;
	// without it, and unless VersionedRollouts, workers roll unversioned.
	WorkerDeployments WorkerDeployments
	// VersionedRollouts lets Agents roll as versions of a Temporal Worker
	// Deployment where the engine offers it.
	VersionedRollouts bool
	// Spend reads the Agents' spend counters for status; without it,
	// status.spend stays unset.
	Spend SpendCounters
	// Shared moves Agents' sessions off the shared names; without it, an
	// Agent keeps polling the shared task queue.
	Shared SharedNames
	// SharedSettle is how long new sessions start on an Agent's own task
	// queue before it gives up the shared one; zero means
	// DefaultSharedSettle.
	SharedSettle time.Duration
	// SpendRecheck is how often an Agent with an agent budget reads its
	// counter again; zero means DefaultSpendRecheck.
	SpendRecheck time.Duration
	// Clock reads the time; nil is the wall clock.
	Clock func() time.Time
}

// +kubebuilder:rbac:groups=agents.stepwise.run,resources=agents,verbs=get;list;watch
// +kubebuilder:rbac:groups=agents.stepwise.run,resources=agents/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=agents.stepwise.run,resources=agents/finalizers,verbs=update
// The metrics endpoint asks the API server who a scraper is and whether it
// may read /metrics.
// +kubebuilder:rbac:groups=authentication.k8s.io,resources=tokenreviews,verbs=create
// +kubebuilder:rbac:groups=authorization.k8s.io,resources=subjectaccessreviews,verbs=create
// +kubebuilder:rbac:groups=agents.stepwise.run,resources=toolsources;mediastores;clusterengines,verbs=get;list;watch
// +kubebuilder:rbac:groups=agents.stepwise.run,resources=clusterengines/status,verbs=get;update;patch
// Namespaces' labels say which ClusterEngines their Agents may use.
// +kubebuilder:rbac:groups="",resources=namespaces,verbs=get;list;watch
// +kubebuilder:rbac:groups="",resources=configmaps,verbs=get;list;watch;create;update;patch;delete
// +kubebuilder:rbac:groups="",resources=serviceaccounts,verbs=get;list;watch;create;update;patch
// +kubebuilder:rbac:groups=apps,resources=deployments,verbs=get;list;watch;create;update;patch;delete
// +kubebuilder:rbac:groups=apps,resources=deployments/scale,verbs=get;update;patch
// +kubebuilder:rbac:groups=apps,resources=replicasets,verbs=get;list;watch
// +kubebuilder:rbac:groups="",resources=pods,verbs=get;list;watch
// +kubebuilder:rbac:groups=policy,resources=poddisruptionbudgets,verbs=get;list;watch;create;update;patch
// +kubebuilder:rbac:groups=networking.k8s.io,resources=networkpolicies,verbs=get;list;watch;create;update;patch
// +kubebuilder:rbac:groups="",resources=secrets,verbs=get;list;watch;create;patch;delete

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
	defer func() { result = soonest(result, pass.renewTokenAt, r.now()) }()
	defer func() {
		agent.Status = agentStatus(agent, pass)
		if err := patchStatus(ctx, r.Client, agent, before); err != nil && !apierrors.IsNotFound(err) {
			retErr = errors.Join(retErr, fmt.Errorf("writing Agent status: %w", err))
		}
	}()

	if err := r.reconcileNormal(ctx, agent, &pass); err != nil {
		if !errors.As(err, &pass.blocker) {
			pass.err = err
		}
	}
	if pass.blocker != nil {
		log.FromContext(ctx).Info("Agent not applied", "reason", pass.blocker.Reason, "message", pass.blocker.Message)
	}
	if err := r.observeWorkers(ctx, agent, &pass); err != nil {
		// Status keeps what could not be read, and Ready says why; nothing
		// is pruned or scaled on a partial view.
		pass.err = errors.Join(pass.err, err)
		return ctrl.Result{}, pass.err
	}
	if pass.applied {
		if err := r.pruneConfigMaps(ctx, agent, &pass); err != nil {
			pass.err = err
		}
	}
	if pass.blocker != nil {
		if err := r.keepScale(ctx, agent, &pass); err != nil {
			pass.err = err
		}
		if pass.blocker.Reason == agentsv1.ReasonOwnedObjectConflict {
			// No event tells when the object in the way goes away.
			return ctrl.Result{RequeueAfter: r.RecheckInterval}, pass.err
		}
	}
	if pass.recheckShared {
		return ctrl.Result{RequeueAfter: drainRecheck}, pass.err
	}
	if plan := pass.rollout; plan != nil && (plan.Action != rollout.ActionApply || plan.RecheckAfter > 0) {
		// Only time tells when a worker stopped polling; the pod and
		// Deployment watches tell the rest, and this is their backstop.
		return ctrl.Result{RequeueAfter: max(plan.RecheckAfter, defaultRolloutRecheck)}, pass.err
	}
	// The spend counter changes with no event on the cluster.
	return ctrl.Result{RequeueAfter: r.spendRecheck(agent)}, pass.err
}

// soonest is the earlier of a requeue and the publish token's renewal, which
// no event on the cluster announces either.
func soonest(result ctrl.Result, renewAt, now time.Time) ctrl.Result {
	if renewAt.IsZero() {
		return result
	}
	renewIn := max(renewAt.Sub(now), time.Second)
	if result.RequeueAfter == 0 || renewIn < result.RequeueAfter {
		result.RequeueAfter = renewIn
	}
	return result
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
	pass.resolved = resolved
	for _, claim := range resolved.Claims() {
		if err := r.checkFlowClaim(ctx, agent, claim); err != nil {
			pass.lostClaim = claim.Label()
			return err
		}
	}
	hubSecret, err := r.publishToken(ctx, agent, resolved, pass)
	if err != nil {
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
	live, err := r.checkOwnership(ctx, agent, worker)
	if err != nil {
		return err
	}
	live.eventHubSecret = hubSecret

	// The ServiceAccount and the configuration exist before the Deployment
	// that uses them. The configuration ConfigMap is new for each digest, so
	// writing it changes nothing for running workers until the Deployment
	// names it.
	if worker.ServiceAccount != nil {
		if _, err := r.applyChanged(ctx, worker.ServiceAccount, live.serviceAccount); err != nil {
			return err
		}
	}
	if _, err := r.applyChanged(ctx, worker.ConfigMap, live.configMap); err != nil {
		return err
	}
	if _, err := r.applyChanged(ctx, worker.DisruptionBudget, live.disruptionBudget); err != nil {
		return err
	}
	if worker.NetworkPolicy != nil {
		if _, err := r.applyChanged(ctx, worker.NetworkPolicy, live.networkPolicy); err != nil {
			return err
		}
	}
	if err := r.applyOwnedSecret(ctx, worker.EventHubSecret, live.eventHubSecret); err != nil {
		return err
	}
	if err := r.applyOwnedSecret(ctx, worker.EngineSecret, live.engineSecret); err != nil {
		return err
	}
	pass.desiredConfigMap = *worker.ConfigMap.Name
	desiredLive, err := r.rollDeployment(ctx, agent, rolloutPass{resolved: resolved, worker: worker, live: live.deployment}, pass)
	if err != nil {
		return err
	}
	pass.deployment = desiredLive
	pass.observed.deployment = true
	if pass.graph, err = r.publishGraph(ctx, agent, graph); err != nil {
		return err
	}
	pass.observed.graph = true
	r.observeSpend(ctx, agent, EngineTarget{Resolved: resolved}, pass)
	if err := r.moveSharedSessions(ctx, agent, resolved, pass); err != nil {
		return err
	}
	pass.applied = true
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
	return observed, r.observeEngine(ctx, agent, &observed)
}

// liveWorker is what exists of an Agent's applied worker objects; each is
// nil when absent.
type liveWorker struct {
	serviceAccount   *corev1.ServiceAccount
	configMap        *corev1.ConfigMap
	deployment       *appsv1.Deployment
	disruptionBudget *policyv1.PodDisruptionBudget
	networkPolicy    *networkingv1.NetworkPolicy
	eventHubSecret   *corev1.Secret
	engineSecret     *corev1.Secret
}

// checkOwnership refuses to apply over an object of the same name that the
// Agent does not control, such as a team's own Deployment: server-side apply
// with force would otherwise take it over. It returns the worker objects
// that exist.
func (r *AgentReconciler) checkOwnership(ctx context.Context, agent *agentsv1.Agent, worker *render.WorkerObjects) (liveWorker, error) {
	type owned struct {
		kind, name string
		obj        client.Object
	}
	configMap, deployment, serviceAccount := &corev1.ConfigMap{}, &appsv1.Deployment{}, &corev1.ServiceAccount{}
	budget := &policyv1.PodDisruptionBudget{}
	policy := &networkingv1.NetworkPolicy{}
	objects := []owned{
		{"ConfigMap", *worker.ConfigMap.Name, configMap},
		{"ConfigMap", render.GraphConfigMapName(agent.Name), &corev1.ConfigMap{}},
		{"Deployment", render.WorkerName(agent.Name), deployment},
		{"PodDisruptionBudget", render.DisruptionBudgetName(agent.Name), budget},
	}
	if worker.ServiceAccount != nil {
		objects = append(objects, owned{"ServiceAccount", *worker.ServiceAccount.Name, serviceAccount})
	}
	if worker.NetworkPolicy != nil {
		objects = append(objects, owned{"NetworkPolicy", *worker.NetworkPolicy.Name, policy})
	}
	exists := map[client.Object]bool{}
	for _, o := range objects {
		key := client.ObjectKey{Namespace: agent.Namespace, Name: o.name}
		err := r.Get(ctx, key, o.obj)
		if apierrors.IsNotFound(err) {
			// The cache holds only the objects the operator labels.
			err = r.APIReader.Get(ctx, key, o.obj)
		}
		switch {
		case apierrors.IsNotFound(err):
			continue
		case err != nil:
			return liveWorker{}, fmt.Errorf("reading %s %s: %w", o.kind, key.Name, err)
		case !isControlledBy(o.obj, agent):
			return liveWorker{}, &render.Blocker{Reason: agentsv1.ReasonOwnedObjectConflict, Message: fmt.Sprintf(
				"%s %q exists and is not owned by this Agent; the operator will not take it over: rename or delete it", o.kind, key.Name)}
		}
		exists[o.obj] = true
	}
	var live liveWorker
	if exists[configMap] {
		live.configMap = configMap
	}
	if exists[deployment] {
		live.deployment = deployment
	}
	if exists[serviceAccount] {
		live.serviceAccount = serviceAccount
	}
	if exists[budget] {
		live.disruptionBudget = budget
	}
	if exists[policy] {
		live.networkPolicy = policy
	}
	// The operator caches Secrets by metadata only, so its own Secrets are
	// read from the API server.
	var err error
	if live.engineSecret, err = r.ownedSecret(ctx, agent, render.EngineSecretName(agent.Name), worker.EngineSecret != nil); err != nil {
		return liveWorker{}, err
	}
	return live, nil
}

// checkFlowClaim refuses an Agent when another Agent runs workers for the
// same names on the same engine. The Agent that runs them keeps them,
// whatever its age; when none does, the claim goes to the Agent that
// reaches this check first, which is the first whose references all
// resolve.
func (r *AgentReconciler) checkFlowClaim(ctx context.Context, agent *agentsv1.Agent, claim flowclaim.Claim) error {
	holder, held, err := flowclaim.Holder(ctx, r.Client, claim)
	if err != nil || !held || holder == client.ObjectKeyFromObject(agent) {
		return err
	}
	return &render.Blocker{Reason: agentsv1.ReasonFlowTypeConflict, Message: flowclaim.Refusal(agent, claim)}
}

// publishToken keeps the Agent's event hub publish token while it is
// signed by the current key for this Agent and far from its expiry, and
// signs a new one otherwise. It returns the Agent's live token Secret, or
// the one in the way of it, which applyOwnedSecret deletes once the Agent
// needs no token.
func (r *AgentReconciler) publishToken(ctx context.Context, agent *agentsv1.Agent, resolved *render.Resolved, pass *agentPass) (*corev1.Secret, error) {
	eventHub := resolved.EventHub
	live, err := r.ownedSecret(ctx, agent, render.EventHubSecretName(agent.Name), eventHub != nil)
	if err != nil || eventHub == nil {
		return live, err
	}
	var current string
	if live != nil {
		current = string(live.Data[render.EventHubTokenKey])
	}
	want := hub.PublishClaims{Namespace: agent.Namespace, Agent: agent.Name, AgentUID: string(agent.UID)}
	resolved.EventHubToken, pass.renewTokenAt = eventHub.Keys().Renew(current, want, r.now(), eventHub.TokenLifetime)
	return live, nil
}

// ownedSecret reads a Secret the Agent would own; nil when it does not
// exist, or when another owner has it and the Agent does not need it. One
// in the way of a Secret the Agent needs blocks it.
func (r *AgentReconciler) ownedSecret(ctx context.Context, agent *agentsv1.Agent, name string, needed bool) (*corev1.Secret, error) {
	secret := &corev1.Secret{}
	err := r.APIReader.Get(ctx, client.ObjectKey{Namespace: agent.Namespace, Name: name}, secret)
	switch {
	case apierrors.IsNotFound(err):
		return nil, nil
	case err != nil:
		return nil, fmt.Errorf("reading Secret %s: %w", name, err)
	case !isControlledBy(secret, agent):
		if needed {
			return nil, &render.Blocker{Reason: agentsv1.ReasonOwnedObjectConflict, Message: fmt.Sprintf(
				"Secret %q exists and is not owned by this Agent; the operator will not take it over: rename or delete it", name)}
		}
		return nil, nil
	}
	return secret, nil
}

// applyOwnedSecret writes a Secret the Agent owns, such as its publish
// token or its engine's credentials, or deletes the one it owns once it
// needs it no more, so no token of a retired hub key and no credential of
// an engine the Agent left lingers.
func (r *AgentReconciler) applyOwnedSecret(ctx context.Context, desired *corev1ac.SecretApplyConfiguration, live *corev1.Secret) error {
	if desired != nil {
		_, err := r.applyChanged(ctx, desired, live)
		return err
	}
	if live == nil {
		return nil
	}
	if err := r.Delete(ctx, live, client.Preconditions{UID: &live.UID}); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("deleting Secret %s: %w", live.Name, err)
	}
	return nil
}

// publishGraph writes the Flow graph ConfigMap only when the published
// document differs from the graph, and returns it as published.
func (r *AgentReconciler) publishGraph(ctx context.Context, agent *agentsv1.Agent, graph *render.PublishedGraph) (*corev1.ConfigMap, error) {
	current := &corev1.ConfigMap{}
	err := r.Get(ctx, client.ObjectKey{Namespace: agent.Namespace, Name: render.GraphConfigMapName(agent.Name)}, current)
	switch {
	case err == nil && isControlledBy(current, agent) &&
		current.Annotations[render.AnnotationGraphDigest] == graph.Digest &&
		session.Digest([]byte(current.Data[render.GraphFileName])) == graph.Digest:
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
// ConfigMap that this pass did not apply, and the Deployment's ReplicaSets,
// and records in pass.observed what it read.
func (r *AgentReconciler) observeWorkers(ctx context.Context, agent *agentsv1.Agent, pass *agentPass) error {
	if !pass.observed.graph {
		graph := &corev1.ConfigMap{}
		found, err := r.getOwned(ctx, agent, render.GraphConfigMapName(agent.Name), graph)
		if err != nil {
			return err
		}
		if found {
			pass.graph = graph
		}
		pass.observed.graph = true
	}
	if !pass.observed.deployment {
		deployment, err := r.readDesiredDeployment(ctx, agent)
		if err != nil {
			return err
		}
		pass.deployment = deployment
		pass.observed.deployment = true
	}
	var replicaSets appsv1.ReplicaSetList
	if err := r.List(ctx, &replicaSets, client.InNamespace(agent.Namespace), client.MatchingLabels(render.SelectorLabels(agent.Name))); err != nil {
		return fmt.Errorf("listing the worker ReplicaSets: %w", err)
	}
	pass.agentReplicaSets = replicaSets.Items
	for _, rs := range replicaSets.Items {
		if pass.deployment != nil && isControlledBy(&rs, pass.deployment) {
			pass.replicaSets = append(pass.replicaSets, rs)
		}
	}
	pass.observed.replicaSets = true
	return nil
}

// readDesiredDeployment reads the worker Deployment of the version the
// status names first, the one the last applied pass desired: a versioned
// one by its build ID, else the unversioned one.
func (r *AgentReconciler) readDesiredDeployment(ctx context.Context, agent *agentsv1.Agent) (*appsv1.Deployment, error) {
	names := []string{render.WorkerName(agent.Name)}
	if versions := agent.Status.WorkerVersions; len(versions) > 0 && versions[0].BuildID != "" {
		names = []string{render.VersionedWorkerName(agent.Name, versions[0].BuildID), render.WorkerName(agent.Name)}
	}
	for _, name := range names {
		deployment := &appsv1.Deployment{}
		found, err := r.getOwned(ctx, agent, name, deployment)
		if err != nil {
			return nil, err
		}
		if found {
			return deployment, nil
		}
	}
	return nil, nil
}

// getOwned reads an object the Agent controls; found is false when it does
// not exist or something else controls it.
func (r *AgentReconciler) getOwned(ctx context.Context, agent *agentsv1.Agent, name string, obj client.Object) (found bool, err error) {
	err = r.Get(ctx, client.ObjectKey{Namespace: agent.Namespace, Name: name}, obj)
	switch {
	case apierrors.IsNotFound(err):
		return false, nil
	case err != nil:
		return false, fmt.Errorf("reading %T %s: %w", obj, name, err)
	}
	return isControlledBy(obj, agent), nil
}

// pruneConfigMaps deletes the Agent's worker configurations that neither the
// Deployment nor any of its ReplicaSets names. A ReplicaSet keeps its
// configuration, so its pods during a rollout and a rollback to it both
// find theirs.
func (r *AgentReconciler) pruneConfigMaps(ctx context.Context, agent *agentsv1.Agent, pass *agentPass) error {
	var configs corev1.ConfigMapList
	if err := r.List(ctx, &configs, client.InNamespace(agent.Namespace), client.MatchingLabels{
		render.LabelAgent: agent.Name, render.LabelComponent: render.ComponentWorkerConfig,
	}); err != nil {
		return fmt.Errorf("listing worker configurations: %w", err)
	}
	// The configuration a waiting rollout will start its workers with is
	// kept too, and those of every worker set a rollout still runs.
	inUse := map[string]bool{pass.desiredConfigMap: true}
	for _, d := range append([]*appsv1.Deployment{pass.deployment}, pass.workerSets...) {
		if d != nil {
			inUse[render.ConfigMapOf(&d.Spec.Template)] = true
		}
	}
	for _, rs := range pass.agentReplicaSets {
		inUse[render.ConfigMapOf(&rs.Spec.Template)] = true
	}
	for i := range configs.Items {
		cm := &configs.Items[i]
		if inUse[cm.Name] || !isControlledBy(cm, agent) {
			continue
		}
		err := r.Delete(ctx, cm, client.Preconditions{UID: &cm.UID})
		if err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("deleting worker configuration %s that no ReplicaSet uses: %w", cm.Name, err)
		}
	}
	return nil
}

// keepScale follows spec.workers.replicas on the existing Deployment while
// the Agent is blocked, so an autoscaler or kubectl scale still works; it
// scales to zero the workers of an Agent that lost a claim it was running,
// and every worker of an Agent that may no longer use its engine, whose
// credentials it also takes back. Nothing else of a blocked Agent is
// applied.
func (r *AgentReconciler) keepScale(ctx context.Context, agent *agentsv1.Agent, pass *agentPass) error {
	revoked := pass.blocker.Reason == agentsv1.ReasonEngineNotAllowed
	if pass.lostClaim != "" || revoked {
		sets, err := r.listWorkerSets(ctx, agent, nil)
		if err != nil {
			return err
		}
		for _, d := range sets.all() {
			if revoked || d.Labels[flowclaim.LabelFlowClaim] == pass.lostClaim || d.Labels[flowclaim.LabelSharedFlowClaim] == pass.lostClaim {
				if err := r.scaleDeployment(ctx, d, 0); err != nil {
					return err
				}
			}
		}
	}
	if revoked {
		secret, err := r.ownedSecret(ctx, agent, render.EngineSecretName(agent.Name), false)
		if err != nil {
			return err
		}
		return r.applyOwnedSecret(ctx, nil, secret)
	}
	d := pass.deployment
	if d == nil || (pass.lostClaim != "" && (d.Labels[flowclaim.LabelFlowClaim] == pass.lostClaim || d.Labels[flowclaim.LabelSharedFlowClaim] == pass.lostClaim)) {
		return nil
	}
	return r.scaleDeployment(ctx, d, render.DesiredReplicas(agent))
}

// applyChanged applies an owned object unless live, the object as read,
// already holds exactly the fields this operator would apply: such an
// apply would change nothing, so a pass where nothing changed sends no
// request. It reports whether it applied.
func (r *AgentReconciler) applyChanged(ctx context.Context, obj applyConfiguration, live client.Object) (bool, error) {
	unchanged, err := appliedAlready(obj, live)
	if err != nil {
		return false, err
	}
	if unchanged {
		return false, nil
	}
	return true, r.apply(ctx, obj)
}

// applyConfiguration is an apply configuration the client can apply.
type applyConfiguration interface {
	IsApplyConfiguration()
}

// apply writes an owned object with server-side apply. The API server
// refusing the object is a spec the schema could not catch: a blocker, not
// something to retry.
func (r *AgentReconciler) apply(ctx context.Context, obj applyConfiguration) error {
	err := r.Apply(ctx, obj, client.FieldOwner(render.FieldOwner), client.ForceOwnership)
	switch {
	case apierrors.IsInvalid(err):
		return &render.Blocker{Reason: agentsv1.ReasonInvalidSpec, Message: fmt.Sprintf("the API server refused the rendered %T: %v", obj, err)}
	case err != nil:
		return fmt.Errorf("applying %T: %w", obj, err)
	}
	return nil
}

func isControlledBy(obj, owner client.Object) bool {
	ref := metav1.GetControllerOf(obj)
	return ref != nil && ref.UID == owner.GetUID()
}
