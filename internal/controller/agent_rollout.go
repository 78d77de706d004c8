package controller

import (
	"context"
	"fmt"
	"slices"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	agentsv1 "github.com/stepwise-run/stepwise/api/v1alpha1"
	"github.com/stepwise-run/stepwise/internal/flowclaim"
	"github.com/stepwise-run/stepwise/internal/render"
	"github.com/stepwise-run/stepwise/internal/rollout"
	"github.com/stepwise-run/stepwise/internal/tenancy"
)

// TaskQueuePollers reads which workers poll an Agent's task queue on its
// engine: the last check before a stop-old-first rollout starts new
// workers, since a worker whose pod is gone from the API server (a node
// cut off, a pod deleted by force) may still run.
type TaskQueuePollers interface {
	Pollers(ctx context.Context, target EngineTarget, taskQueue string) ([]rollout.Poller, error)
}

// Rollout timing defaults.
const (
	// DefaultPollerQuietPeriod exceeds the engine's one-minute long poll, so
	// a worker in the middle of a poll always counts as polling.
	DefaultPollerQuietPeriod = rollout.DefaultPollerQuietPeriod
	defaultRolloutRecheck    = 2 * time.Second
	// drainRecheck is how often an Agent whose sessions move off the
	// shared names looks again and wakes those still there.
	drainRecheck = 10 * time.Second
)

// rolloutPass is what the executor needs of one pass.
type rolloutPass struct {
	resolved *render.Resolved
	worker   *render.WorkerObjects
	live     *appsv1.Deployment
}

// target is the engine the pass's Agent runs on.
func (in rolloutPass) target() EngineTarget { return EngineTarget{Resolved: in.resolved} }

// rollDeployment plans the pass's rollout step and carries it out: it
// applies the desired worker Deployment, stops workers, moves sessions, or
// waits. It returns the desired Deployment as it stands after the pass: as
// applied, when the pass applied it.
func (r *AgentReconciler) rollDeployment(ctx context.Context, agent *agentsv1.Agent, in rolloutPass, pass *agentPass) (*appsv1.Deployment, error) {
	desired := rollout.Desired{
		Worker:   rollout.Worker{EngineVersion: in.resolved.EngineVersion, Image: in.resolved.WorkerImage},
		Replicas: render.DesiredReplicas(agent),
	}
	sets, err := r.listWorkerSets(ctx, agent, in.live)
	if err != nil {
		return in.live, err
	}
	pass.workerSets = sets.all()
	pods, err := r.workerPods(ctx, r.Client, agent)
	if err != nil {
		return in.live, err
	}
	desired.Versioned = r.wantsVersioning(ctx, in, sets)
	if desired.Versioned || len(sets.versioned) > 0 || slices.ContainsFunc(pods, func(p rollout.Pod) bool { return p.Versioned }) {
		return r.rollVersioned(ctx, agent, in, pass, desired, sets, pods, nil)
	}
	if leftover := r.leftoverVersions(ctx, agent, in); leftover != nil {
		return r.rollVersioned(ctx, agent, in, pass, desired, sets, pods, leftover)
	}

	obs := rollout.Observed{Now: time.Now(), Previous: previousVersions(agent.Status.WorkerVersions), Pods: pods}
	if d := in.live; d != nil {
		obs.Deployment = observedDeployment(d, true, in.worker.ConfigDigest)
	}
	opts := r.rolloutOptions()
	plan := rollout.Decide(desired, obs, opts)
	if plan.NeedsGate {
		obs.Gate = r.readGate(ctx, agent, in)
		plan = rollout.Decide(desired, obs, opts)
	}
	pass.rollout = &plan
	if plan.Strategy == rollout.StrategyStopOldFirst {
		log.FromContext(ctx).Info("rollout", "strategy", plan.Strategy, "action", plan.Action, "phase", plan.Phase, "message", plan.Message)
	}
	switch plan.Action {
	case rollout.ActionApply:
		applied, err := r.applyChanged(ctx, in.worker.Deployment, in.live)
		if err != nil || !applied {
			return in.live, err
		}
		// Status reports what was applied, not what the cache may not
		// have seen yet.
		d, err := render.Convert[appsv1.Deployment](in.worker.Deployment)
		return d, err
	case rollout.ActionStopWorkers:
		return in.live, r.scaleDeployment(ctx, in.live, 0)
	}
	return in.live, nil
}

// leftoverVersions reads the Agent's Worker Deployment when no versioned
// worker is left but the engine may still hold records of versions that
// ran, such as right after leaving versioning, and returns it when it
// does; nil otherwise. The engine, not the Agent's status, says so: the
// status a pass reads may not yet show what the pass before it wrote.
func (r *AgentReconciler) leftoverVersions(ctx context.Context, agent *agentsv1.Agent, in rolloutPass) *rollout.WorkerDeploymentInfo {
	if !r.VersionedRollouts || r.WorkerDeployments == nil {
		return nil
	}
	target := in.target()
	if supported, _, err := r.WorkerDeployments.Versioning(ctx, target); err != nil || !supported {
		return nil
	}
	described := r.describeWorkerDeployment(ctx, agent, in)
	if described.Error != "" {
		log.FromContext(ctx).Info("cannot read the Worker Deployment for versions left to delete", "error", described.Error)
		return nil
	}
	if len(described.Versions) == 0 {
		return nil
	}
	return described
}

func (r *AgentReconciler) rolloutOptions() rollout.Options {
	opts := rollout.Options{PollerQuietPeriod: r.PollerQuietPeriod, RecheckInterval: defaultRolloutRecheck}
	if opts.PollerQuietPeriod == 0 {
		opts.PollerQuietPeriod = DefaultPollerQuietPeriod
	}
	return opts
}

// readGate reads, straight from the API server and the engine, whether any
// worker remains or polls. Failing to read the pods fails the gate as a
// remaining pod would: the planner then waits.
func (r *AgentReconciler) readGate(ctx context.Context, agent *agentsv1.Agent, in rolloutPass) *rollout.Gate {
	gate := &rollout.Gate{}
	pods, err := r.workerPods(ctx, r.APIReader, agent)
	if err != nil {
		gate.PollersError = err.Error()
		return gate
	}
	gate.Pods = pods
	if r.Pollers == nil {
		gate.PollersError = "the operator has no connection to the engine to read the task queue's pollers"
		return gate
	}
	for _, taskQueue := range workerTaskQueues(agent, in.resolved) {
		pollers, err := r.Pollers.Pollers(ctx, in.target(), taskQueue)
		if err != nil {
			gate.PollersError = err.Error()
			return gate
		}
		gate.Pollers = append(gate.Pollers, pollers...)
	}
	return gate
}

// workerTaskQueues are the task queues any worker of the Agent may poll:
// its own, and the shared one where workers of engine 0.7.0 and earlier
// ran, or run, its sessions.
func workerTaskQueues(agent *agentsv1.Agent, resolved *render.Resolved) []string {
	queues := []string{tenancy.Tenant(agent.Namespace, agent.Spec.FlowType).TaskQueue()}
	if resolved.Names.IsShared() || flowclaim.KeepsSharedNames(agent) {
		queues = append(queues, tenancy.Shared(agent.Spec.FlowType).TaskQueue())
	}
	return queues
}

// workerPods lists the Agent's worker pods, terminating ones included.
func (r *AgentReconciler) workerPods(ctx context.Context, reader client.Reader, agent *agentsv1.Agent) ([]rollout.Pod, error) {
	var list corev1.PodList
	if err := reader.List(ctx, &list, client.InNamespace(agent.Namespace), client.MatchingLabels(render.SelectorLabels(agent.Name))); err != nil {
		return nil, fmt.Errorf("listing the worker pods: %w", err)
	}
	pods := make([]rollout.Pod, 0, len(list.Items))
	for i := range list.Items {
		p := &list.Items[i]
		if p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
			continue // its containers have stopped; nothing of it runs
		}
		engineVersion, image := render.WorkerOf(p.Labels, &p.Spec)
		_, versioned := render.IsVersioned(p.Labels)
		pods = append(pods, rollout.Pod{
			Name: p.Name, Worker: rollout.Worker{EngineVersion: engineVersion, Image: image},
			Ready: podReady(p), Terminating: p.DeletionTimestamp != nil, Versioned: versioned,
		})
	}
	return pods, nil
}

func podReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// observedDeployment is what the planner needs of a worker Deployment. The
// status of the desired set counts as observed only once its template is
// the one rendered now: a cache that has not yet seen the last apply shows
// an older template's status, which says nothing of the new one.
func observedDeployment(d *appsv1.Deployment, desired bool, configDigest string) *rollout.Deployment {
	engineVersion, image := render.WorkerOf(d.Spec.Template.Labels, &d.Spec.Template.Spec)
	replicas := int32(1)
	if d.Spec.Replicas != nil {
		replicas = *d.Spec.Replicas
	}
	return &rollout.Deployment{
		Template:            rollout.Worker{EngineVersion: engineVersion, Image: image},
		Replicas:            replicas,
		StatusReplicas:      d.Status.Replicas,
		TerminatingReplicas: d.Status.TerminatingReplicas,
		UpdatedReplicas:     d.Status.UpdatedReplicas,
		AvailableReplicas:   d.Status.AvailableReplicas,
		Observed: d.Status.ObservedGeneration >= d.Generation &&
			(!desired || d.Spec.Template.Annotations[render.AnnotationConfigDigest] == configDigest),
	}
}

func previousVersions(versions []agentsv1.WorkerVersion) []rollout.VersionStatus {
	out := make([]rollout.VersionStatus, 0, len(versions))
	for _, v := range versions {
		out = append(out, rollout.VersionStatus{BuildID: v.BuildID, State: rollout.State(v.State), Since: v.Since.Time})
	}
	return out
}

// scaleDeployment sets the worker Deployment's replicas through its scale
// subresource, leaving its template as it is.
func (r *AgentReconciler) scaleDeployment(ctx context.Context, d *appsv1.Deployment, replicas int32) error {
	if d == nil || (d.Spec.Replicas != nil && *d.Spec.Replicas == replicas) {
		return nil
	}
	patch := client.RawPatch(types.MergePatchType, fmt.Appendf(nil, `{"spec":{"replicas":%d}}`, replicas))
	if err := r.SubResource("scale").Patch(ctx, d.DeepCopy(), patch, client.FieldOwner(render.FieldOwner)); err != nil {
		return fmt.Errorf("scaling the worker Deployment to %d: %w", replicas, err)
	}
	d.Spec.Replicas = &replicas
	return nil
}
