package controller

import (
	"context"
	"fmt"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	agentsv1 "github.com/stepwise-run/stepwise/api/v1alpha1"
	"github.com/stepwise-run/stepwise/internal/flowclaim"
	"github.com/stepwise-run/stepwise/internal/render"
	"github.com/stepwise-run/stepwise/internal/rollout"
	"github.com/stepwise-run/stepwise/internal/tenancy"
)

// EngineTarget is the engine an Agent's workers use, reached as they reach
// it.
type EngineTarget struct {
	Resolved *render.Resolved
}

// WorkerDeployments does, on an Agent's engine, what a versioned rollout
// needs. Build IDs name versions of the Agent's Worker Deployment.
type WorkerDeployments interface {
	// Versioning says whether the engine offers Worker Deployments, and
	// why not.
	Versioning(ctx context.Context, target EngineTarget) (supported bool, reason string, err error)
	// Describe reads the Worker Deployment; one the engine does not know
	// has no versions.
	Describe(ctx context.Context, target EngineTarget, name string) (rollout.WorkerDeploymentInfo, error)
	SetCurrentVersion(ctx context.Context, target EngineTarget, name, buildID string) error
	DeleteVersion(ctx context.Context, target EngineTarget, name, buildID string) error
	// MoveSessions signals the sessions pinned to a version to move to the
	// current one between turns, and says how many it signalled.
	MoveSessions(ctx context.Context, target EngineTarget, name, buildID string) (int, error)
	// Unpin lets the current workers take the sessions pinned to a
	// version that has no workers left, and says how many it unpinned.
	Unpin(ctx context.Context, target EngineTarget, name, buildID string) (int, error)
}

// workerSets are an Agent's worker Deployments: the unversioned one and
// one per worker version.
type workerSets struct {
	unversioned *appsv1.Deployment
	versioned   map[string]*appsv1.Deployment // by build ID
}

func (s workerSets) byKey(key string) *appsv1.Deployment {
	if key == rollout.Unversioned {
		return s.unversioned
	}
	return s.versioned[key]
}

// all lists every worker Deployment.
func (s workerSets) all() []*appsv1.Deployment {
	var out []*appsv1.Deployment
	if s.unversioned != nil {
		out = append(out, s.unversioned)
	}
	for _, d := range s.versioned {
		out = append(out, d)
	}
	return out
}

// listWorkerSets reads the Agent's versioned worker Deployments; the
// unversioned one was read by name, or, when nil, is found in the list.
func (r *AgentReconciler) listWorkerSets(ctx context.Context, agent *agentsv1.Agent, unversioned *appsv1.Deployment) (workerSets, error) {
	sets := workerSets{unversioned: unversioned, versioned: map[string]*appsv1.Deployment{}}
	var list appsv1.DeploymentList
	if err := r.List(ctx, &list, client.InNamespace(agent.Namespace), client.MatchingLabels{render.LabelAgent: agent.Name}); err != nil {
		return sets, fmt.Errorf("listing the worker Deployments: %w", err)
	}
	for i := range list.Items {
		d := &list.Items[i]
		if !isControlledBy(d, agent) {
			continue
		}
		if buildID, ok := render.IsVersioned(d.Labels); ok {
			sets.versioned[buildID] = d
		} else if unversioned == nil && d.Name == render.WorkerName(agent.Name) {
			sets.unversioned = d
		}
	}
	return sets, nil
}

// wantsVersioning says whether the desired workers join the Agent's Worker
// Deployment. An engine that cannot be asked keeps an Agent already on
// versioned workers there, and starts no other on them.
func (r *AgentReconciler) wantsVersioning(ctx context.Context, in rolloutPass, sets workerSets) bool {
	if !r.VersionedRollouts || r.WorkerDeployments == nil || !rollout.MovesBetweenTurnsIn(in.resolved.EngineVersion) {
		return false
	}
	supported, reason, err := r.WorkerDeployments.Versioning(ctx, in.target())
	if err != nil {
		log.FromContext(ctx).Info("cannot ask the engine whether it offers Worker Deployments", "error", err.Error())
		return len(sets.versioned) > 0
	}
	if !supported {
		log.FromContext(ctx).V(1).Info("rolling without Worker Deployments", "reason", reason)
	}
	return supported
}

// rollVersioned plans and carries out one pass of a rollout among worker
// sets (rollout.DecideVersioned) from the pods listed for it, with the
// engine's Worker Deployment when already read. It returns the desired set's Deployment as it stands after
// the pass: as applied, when the pass applied it.
func (r *AgentReconciler) rollVersioned(ctx context.Context, agent *agentsv1.Agent, in rolloutPass, pass *agentPass,
	desired rollout.Desired, sets workerSets, pods []rollout.Pod, described *rollout.WorkerDeploymentInfo,
) (*appsv1.Deployment, error) {
	target := in.target()
	obs := rollout.Observed{Now: time.Now(), Previous: previousVersions(agent.Status.WorkerVersions), Pods: pods, WorkerDeployment: described}
	key := rollout.Unversioned
	if desired.Versioned {
		key = desired.BuildID()
	}
	if d := sets.unversioned; d != nil {
		obs.Deployment = observedDeployment(d, key == rollout.Unversioned, in.worker.ConfigDigest)
	}
	for buildID, d := range sets.versioned {
		obs.Sets = append(obs.Sets, rollout.WorkerSet{Deployment: *observedDeployment(d, key == buildID, in.worker.ConfigDigest), Versioned: true})
	}
	opts := r.rolloutOptions()
	plan := rollout.DecideVersioned(desired, obs, opts)
	for range 3 {
		if !plan.NeedsWorkerDeployment && !plan.NeedsGate {
			break
		}
		if plan.NeedsWorkerDeployment {
			obs.WorkerDeployment = r.describeWorkerDeployment(ctx, agent, in)
		}
		if plan.NeedsGate {
			obs.Gate = r.readGate(ctx, agent, in)
		}
		plan = rollout.DecideVersioned(desired, obs, opts)
	}
	pass.rollout = &plan

	object := in.worker.Deployment
	if desired.Versioned {
		object = render.Versioned(object, agent.Name, in.resolved.Names)
	}
	live := sets.byKey(key)
	var problems []string
	for _, k := range plan.Stop {
		if err := r.scaleDeployment(ctx, sets.byKey(k), 0); err != nil {
			return live, err
		}
	}
	var err error
	applied := false
	if plan.Action == rollout.ActionApply {
		if applied, err = r.applyChanged(ctx, object, live); err != nil {
			return live, err
		}
	}
	if applied {
		// Status reports what was applied, not what the cache may not
		// have seen yet.
		if live, err = render.Convert[appsv1.Deployment](object); err != nil {
			return nil, err
		}
	}
	if plan.MakeCurrent {
		if err := r.makeCurrent(ctx, agent, in, plan.CurrentBuildID); err != nil {
			problems = append(problems, err.Error())
		}
	}
	if err := r.releaseSharedDeployment(ctx, agent, in, plan, obs.WorkerDeployment); err != nil {
		problems = append(problems, err.Error())
	}
	for _, buildID := range plan.Move {
		if _, err := r.WorkerDeployments.MoveSessions(ctx, target, deploymentOf(obs.WorkerDeployment, sets, in, buildID), buildID); err != nil {
			problems = append(problems, err.Error())
		}
	}
	for _, buildID := range plan.Unpin {
		if _, err := r.WorkerDeployments.Unpin(ctx, target, deploymentOf(obs.WorkerDeployment, sets, in, buildID), buildID); err != nil {
			problems = append(problems, err.Error())
		}
	}
	for _, k := range plan.Remove {
		if err := r.removeWorkerSet(ctx, sets.byKey(k)); err != nil {
			return live, err
		}
	}
	for _, buildID := range plan.DeleteVersions {
		// The engine drains a version of its pinned sessions only: an idle
		// session that follows the current version (one a stop-old-first
		// rollout let go) stays on it until its next workflow task, which
		// the move signal gives it, now that every task queue partition
		// knows the current version.
		if _, err := r.WorkerDeployments.MoveSessions(ctx, target, deploymentOf(obs.WorkerDeployment, sets, in, buildID), buildID); err != nil {
			problems = append(problems, err.Error())
		}
		if err := r.WorkerDeployments.DeleteVersion(ctx, target, deploymentOf(obs.WorkerDeployment, sets, in, buildID), buildID); err != nil {
			problems = append(problems, err.Error())
		}
	}
	if len(problems) > 0 {
		// The engine refuses some steps until later (a version it still
		// sees polling, a version not yet known); the next pass tries
		// again, and the message says what waits.
		plan.Message += "; the engine answered: " + strings.Join(problems, "; ")
		plan.RecheckAfter = max(plan.RecheckAfter, opts.RecheckInterval)
	}
	log.FromContext(ctx).Info("rollout", "strategy", plan.Strategy, "action", plan.Action, "phase", plan.Phase, "message", plan.Message)
	return live, nil
}

// describeWorkerDeployment reads the Agent's Worker Deployment for the
// planner, with the shared Worker Deployment of engine 0.7.0 and earlier where the Agent's
// sessions ran or run under the shared names: one view of every version,
// each known by its build ID, which names its engine version and so its
// Worker Deployment. The current version is that of the desired workers'
// Worker Deployment. A failed read is the planner's to report.
func (r *AgentReconciler) describeWorkerDeployment(ctx context.Context, agent *agentsv1.Agent, in rolloutPass) *rollout.WorkerDeploymentInfo {
	if r.WorkerDeployments == nil {
		return &rollout.WorkerDeploymentInfo{Error: "the operator has no connection to the engine"}
	}
	own := in.resolved.Names.WorkerDeployment()
	merged := &rollout.WorkerDeploymentInfo{}
	others := ""
	for _, name := range workerDeploymentsOf(agent, in.resolved) {
		e, err := r.WorkerDeployments.Describe(ctx, in.target(), name)
		if err != nil {
			return &rollout.WorkerDeploymentInfo{Error: err.Error()}
		}
		if name == own {
			merged.Current = e.Current
		} else if others == "" {
			others = e.Current
		}
		for _, v := range e.Versions {
			v.Deployment = name
			merged.Versions = append(merged.Versions, v)
		}
	}
	if merged.Current == rollout.Unversioned {
		// Leaving versioning makes every Worker Deployment unversioned.
		merged.Current = others
	}
	return merged
}

// makeCurrent makes a version current in its Worker Deployment; the
// unversioned workers, in every Worker Deployment of the Agent that has a
// current version.
func (r *AgentReconciler) makeCurrent(ctx context.Context, agent *agentsv1.Agent, in rolloutPass, buildID string) error {
	if buildID != rollout.Unversioned {
		return r.WorkerDeployments.SetCurrentVersion(ctx, in.target(), in.resolved.Names.WorkerDeployment(), buildID)
	}
	for _, name := range workerDeploymentsOf(agent, in.resolved) {
		e, err := r.WorkerDeployments.Describe(ctx, in.target(), name)
		if err != nil {
			return err
		}
		if e.Current == rollout.Unversioned {
			continue
		}
		if err := r.WorkerDeployments.SetCurrentVersion(ctx, in.target(), name, rollout.Unversioned); err != nil {
			return err
		}
	}
	return nil
}

// workerDeploymentsOf are the Worker Deployments the Agent's versioned
// workers may have joined: the desired workers', and the shared one where
// workers of engine 0.7.0 and earlier ran its sessions.
func workerDeploymentsOf(agent *agentsv1.Agent, resolved *render.Resolved) []string {
	own := resolved.Names.WorkerDeployment()
	names := []string{own}
	for _, n := range []tenancy.Names{tenancy.Tenant(agent.Namespace, agent.Spec.FlowType), tenancy.Shared(agent.Spec.FlowType)} {
		if d := n.WorkerDeployment(); d != own && (!n.IsShared() || flowclaim.KeepsSharedNames(agent) || resolved.Names.IsShared()) {
			names = append(names, d)
		}
	}
	return names
}

// deploymentOf is the Worker Deployment a version of the Agent's workers
// joined: the one the engine keeps it in, or else the one its worker
// Deployment's flag names, or else the desired workers'.
func deploymentOf(described *rollout.WorkerDeploymentInfo, sets workerSets, in rolloutPass, buildID string) string {
	if described != nil {
		for _, v := range described.Versions {
			if v.BuildID == buildID && v.Deployment != "" {
				return v.Deployment
			}
		}
	}
	if d := sets.versioned[buildID]; d != nil {
		for _, c := range d.Spec.Template.Spec.Containers {
			for _, arg := range c.Args {
				if name, ok := strings.CutPrefix(arg, "--deployment-name="); ok {
					return name
				}
			}
		}
	}
	return in.resolved.Names.WorkerDeployment()
}

// releaseSharedDeployment hands the sessions of the shared Worker
// Deployment to the unversioned workers that move them to the Agent's own
// names, once the desired workers, which run those, are current: its
// current version becomes unversioned, so a session pinned to an old
// version moves at its next turn boundary, as in any versioned rollout,
// and no version of the Agent's own Worker Deployment ever polls the
// shared task queue.
func (r *AgentReconciler) releaseSharedDeployment(ctx context.Context, agent *agentsv1.Agent, in rolloutPass, plan rollout.Plan, described *rollout.WorkerDeploymentInfo) error {
	if in.resolved.SharedTaskQueue == "" || described == nil || described.Error != "" {
		return nil
	}
	if plan.Phase != rollout.PhaseDraining && plan.Phase != rollout.PhaseComplete {
		return nil
	}
	shared := tenancy.Shared(agent.Spec.FlowType).WorkerDeployment()
	e, err := r.WorkerDeployments.Describe(ctx, in.target(), shared)
	if err != nil || e.Current == rollout.Unversioned {
		return err
	}
	return r.WorkerDeployments.SetCurrentVersion(ctx, in.target(), shared, rollout.Unversioned)
}

// removeWorkerSet deletes a worker Deployment whose sessions have moved;
// its pods stop with their grace period, finishing their running Steps.
func (r *AgentReconciler) removeWorkerSet(ctx context.Context, d *appsv1.Deployment) error {
	if d == nil {
		return nil
	}
	err := r.Delete(ctx, d, client.Preconditions{UID: &d.UID}, client.PropagationPolicy("Background"))
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("deleting worker Deployment %s: %w", d.Name, err)
	}
	return nil
}
