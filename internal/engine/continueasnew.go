package engine

import (
	"fmt"

	"go.temporal.io/sdk/workflow"

	"github.com/stepwise-run/stepwise/internal/sessionrpc"
	"github.com/stepwise-run/stepwise/internal/tenancy"
)

// OwnNames are where a session of the shared names moves: the Agent's own
// task queue, and the owner it then records.
type OwnNames struct {
	TaskQueue string        `json:"taskQueue"`
	Owner     tenancy.Owner `json:"owner"`
}

// ContinueAsNewThreshold bounds one workflow run of a session. A session that
// reaches it continues as new between Steps, carrying its state, well
// before Temporal's own limits (51,200 events or 50 MB per run).
type ContinueAsNewThreshold struct {
	Events int
	Bytes  int
}

// DefaultContinueAsNewThreshold leaves ample room under Temporal's limits.
var DefaultContinueAsNewThreshold = ContinueAsNewThreshold{Events: 10_000, Bytes: 10 << 20}

// recordOwner writes the owner search attributes the run's input names when
// the run does not carry them already: a client sets them when it starts a
// session, and a session that moved from the shared names gets them here.
func (r *run) recordOwner() {
	owner := r.input.Owner
	if owner == nil {
		return
	}
	if recorded, ok := sessionrpc.RecordedOwner(workflow.GetTypedSearchAttributes(r.ctx)); ok && recorded == *owner {
		return
	}
	// A failed upsert is logged by the SDK; clients then find the session
	// by its workflow ID and task queue alone.
	_ = workflow.UpsertTypedSearchAttributes(r.ctx, sessionrpc.OwnerUpdates(*owner)...)
}

// moveTarget says where a session on the shared task queue moves, or nil
// when it stays: it runs elsewhere, the worker has nowhere to move it, or
// the history is replayed where the session did not move. The decision is
// a version marker of its own for each workflow task it is made in, so a
// run that began on an earlier engine version, whose history has none,
// replays as it ran and moves at the first boundary it reaches on this
// one; where it moves is recorded, so a replay on any worker decides the
// same.
func (r *run) moveTarget() *OwnNames {
	info := workflow.GetInfo(r.ctx)
	if r.flow.MoveTo == nil || info.TaskQueueName != tenancy.Shared(info.WorkflowType.Name).TaskQueue() {
		return nil
	}
	changeID := fmt.Sprintf("%s@%d", moveChangeID, info.GetCurrentHistoryLength())
	if workflow.GetVersion(r.ctx, changeID, workflow.DefaultVersion, 1) == workflow.DefaultVersion {
		return nil
	}
	encoded := workflow.MutableSideEffect(r.ctx, moveTargetID, func(workflow.Context) any {
		return *r.flow.MoveTo
	}, func(a, b any) bool { return a == b })
	var target OwnNames
	if err := encoded.Get(&target); err != nil || target.TaskQueue == "" {
		return nil
	}
	return &target
}

// moveToOwnNames continues the session as new on its Agent's own task
// queue, on the version new sessions start on there, with its owner, which
// the new run records. Its workflow ID, and so its session ID, stay.
func (r *run) moveToOwnNames(target *OwnNames) error {
	if err := workflow.Await(r.ctx, func() bool { return workflow.AllHandlersFinished(r.ctx) }); err != nil {
		return err
	}
	in := r.input
	in.Carried = &sessionrpc.CarriedState{State: r.s, StepSeq: r.stepSeq}
	in.SessionID = r.s.SessionID
	owner := target.Owner
	in.Owner = &owner
	ctx := workflow.WithWorkflowTaskQueue(r.ctx, target.TaskQueue)
	return workflow.NewContinueAsNewErrorWithOptions(ctx,
		workflow.ContinueAsNewErrorOptions{InitialVersioningBehavior: workflow.ContinueAsNewVersioningBehaviorAutoUpgrade},
		workflow.GetInfo(r.ctx).WorkflowType.Name, in)
}

// runIsFull reports whether the run should end in a new one: Temporal
// suggests it, or the history reached the Flow's threshold.
func (r *run) runIsFull() bool {
	info := workflow.GetInfo(r.ctx)
	threshold := r.flow.ContinueAsNewThreshold
	if threshold == (ContinueAsNewThreshold{}) {
		threshold = DefaultContinueAsNewThreshold
	}
	return info.GetContinueAsNewSuggested() || info.GetCurrentHistoryLength() >= threshold.Events ||
		info.GetCurrentHistorySize() >= threshold.Bytes
}

// versionMoved reports whether the session runs pinned to a worker version
// of a Temporal Worker Deployment that is no longer the one new sessions
// start on. Temporal records it with each workflow task, so replay reads
// the same answer.
func (r *run) versionMoved() bool {
	return workflow.GetInfo(r.ctx).GetTargetWorkerDeploymentVersionChanged()
}

// continueAsNew ends the run between Steps and starts a new one that
// carries the session's state. Updates that are still running finish
// first, so none is lost. Auto-upgrade starts the new run on the worker
// version new sessions start on; unspecified keeps the run's own.
func (r *run) continueAsNew(versioning workflow.ContinueAsNewVersioningBehavior) error {
	if err := workflow.Await(r.ctx, func() bool { return workflow.AllHandlersFinished(r.ctx) }); err != nil {
		return err
	}
	in := r.input
	in.Carried = &sessionrpc.CarriedState{State: r.s, StepSeq: r.stepSeq}
	name := workflow.GetInfo(r.ctx).WorkflowType.Name
	if versioning == workflow.ContinueAsNewVersioningBehaviorUnspecified {
		return workflow.NewContinueAsNewError(r.ctx, name, in)
	}
	return workflow.NewContinueAsNewErrorWithOptions(r.ctx,
		workflow.ContinueAsNewErrorOptions{InitialVersioningBehavior: versioning}, name, in)
}
