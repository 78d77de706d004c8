package controller

import (
	"context"
	"errors"
	"fmt"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	agentsv1 "github.com/stepwise-run/stepwise/api/v1alpha1"
	"github.com/stepwise-run/stepwise/internal/render"
	"github.com/stepwise-run/stepwise/internal/rollout"
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
