package controller

import (
	"context"
	"slices"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"sigs.k8s.io/controller-runtime/pkg/log"

	agentsv1 "github.com/stepwise-run/stepwise/api/v1alpha1"
	"github.com/stepwise-run/stepwise/internal/render"
	"github.com/stepwise-run/stepwise/internal/rollout"
)

// SharedNames moves an Agent's sessions off the shared names of engine
// 0.7.0 and earlier on its engine, and clears up after them.
type SharedNames interface {
	// SharedSessions lists the running sessions of the Agent's Flow type
	// on the shared task queue, up to a pass's worth.
	SharedSessions(ctx context.Context, target EngineTarget) ([]string, error)
	// WakeSessions sends each session the move signal, so an idle one
	// moves at once rather than at its next message.
	WakeSessions(ctx context.Context, target EngineTarget, ids []string) (int, error)
	// RetireSharedNames removes the shared spend counter and Worker
	// Deployment once no session is left under the shared names.
	RetireSharedNames(ctx context.Context, target EngineTarget) error
}

// moveSharedSessions, once the desired workers, which poll the shared task
// queue too, have taken over, wakes the sessions still there, so that each
// moves to the Agent's own names at its turn boundary; once none is left
// and no worker of the shared names remains, the Agent leaves the shared
// names for good.
func (r *AgentReconciler) moveSharedSessions(ctx context.Context, agent *agentsv1.Agent, resolved *render.Resolved, pass *agentPass) error {
	plan := pass.rollout
	if resolved.SharedTaskQueue == "" || r.Shared == nil || plan == nil ||
		(plan.Phase != rollout.PhaseDraining && plan.Phase != rollout.PhaseComplete) {
		return nil
	}
	target := EngineTarget{Resolved: resolved}
	ids, err := r.Shared.SharedSessions(ctx, target)
	if err != nil {
		log.FromContext(ctx).Info("cannot list the sessions left under the shared names; the next pass tries again", "error", err.Error())
		pass.recheckShared = true
		return nil
	}
	if len(ids) > 0 {
		if _, err := r.Shared.WakeSessions(ctx, target, ids); err != nil {
			log.FromContext(ctx).Info("cannot wake the sessions left under the shared names", "error", err.Error())
		}
		pass.recheckShared = true
		return nil
	}
	sharedWorkers := slices.ContainsFunc(plan.Versions, func(v rollout.VersionStatus) bool {
		return v.EngineVersion != "" && !rollout.OwnNamesIn(v.EngineVersion) && (v.Replicas > 0 || v.TerminatingPods > 0 || v.State != rollout.StateDrained)
	})
	if plan.Phase != rollout.PhaseComplete || sharedWorkers || !settled(agent, resolved, r.now(), r.sharedSettle()) {
		pass.recheckShared = true
		return nil
	}
	if err := r.Shared.RetireSharedNames(ctx, target); err != nil {
		log.FromContext(ctx).Info("the shared names are left; the engine has not let go of all of them yet", "error", err.Error())
	}
	pass.sharedRetired = true
	return nil
}

// DefaultSharedSettle is how long new sessions must have started on an
// Agent's own task queue before the shared one is given up: a client that
// read the Agent's status just before starts its session within a
// request's time.
const DefaultSharedSettle = time.Minute

// settled says whether new sessions have started under the Agent's own
// names, with its rollout complete, for the settle time: the status read at
// the start of the pass says so, as an earlier pass wrote it.
func settled(agent *agentsv1.Agent, resolved *render.Resolved, now time.Time, settle time.Duration) bool {
	if agent.Status.TaskQueue != resolved.Names.TaskQueue() {
		return false
	}
	c := meta.FindStatusCondition(agent.Status.Conditions, agentsv1.ConditionProgressing)
	return c != nil && c.Status == metav1.ConditionFalse && c.Reason == agentsv1.ReasonRolloutComplete && now.Sub(c.LastTransitionTime.Time) >= settle
}

func (r *AgentReconciler) sharedSettle() time.Duration {
	if r.SharedSettle > 0 {
		return r.SharedSettle
	}
	return DefaultSharedSettle
}

// SharedSessions implements SharedNames.
func (e *Engines) SharedSessions(ctx context.Context, target EngineTarget) ([]string, error) {
	conn, err := e.connection(target)
	if err != nil {
		return nil, err
	}
	return e.Client.SharedSessions(ctx, conn, target.Resolved.Agent.Spec.FlowType)
}

// WakeSessions implements SharedNames.
func (e *Engines) WakeSessions(ctx context.Context, target EngineTarget, ids []string) (int, error) {
	conn, err := e.connection(target)
	if err != nil {
		return 0, err
	}
	return e.Client.MoveSessions(ctx, conn, ids)
}

// RetireSharedNames implements SharedNames.
func (e *Engines) RetireSharedNames(ctx context.Context, target EngineTarget) error {
	conn, err := e.connection(target)
	if err != nil {
		return err
	}
	return e.Client.RetireSharedNames(ctx, conn, target.Resolved.Agent.Spec.FlowType)
}
