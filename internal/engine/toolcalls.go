package engine

import (
	"errors"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/stepwise-run/stepwise/internal/session"
	"github.com/stepwise-run/stepwise/internal/tracing"
)

// runToolCall moves one tool call through its Steps until its record is
// final. Each call has its own coroutine and reads only its own record: the
// record of this turn, never a later turn's call with the same ID.
func (r *run) runToolCall(ctx workflow.Context, id string) {
	rec := r.record(id)
	defer func() {
		if r.record(id) == rec && rec != nil && rec.Status.Final() {
			// The call publishes its result to ResumeTurn.
			r.move(id, session.StepResumeTurn, session.TransitionResult)
		}
	}()
	for rec != nil && r.record(id) == rec && !rec.Status.Final() {
		var err error
		switch rec.Status {
		case session.ToolCallAwaitingApproval, session.ToolCallAwaitingAnswer:
			err = r.awaitInterrupt(ctx, rec)
		case session.ToolCallWaitingForTimer:
			err = r.awaitTimer(ctx, rec)
		case session.ToolCallApproved:
			r.callTool(ctx, rec)
		case session.ToolCallWaitingForTask:
			err = r.pollTask(ctx, rec)
		case session.ToolCallWriteQueued:
			err = r.awaitWrite(ctx, rec)
		default:
			return
		}
		if err != nil {
			return
		}
	}
}

// awaitWrite holds an ordered write until the write before it is final,
// then admits or skips it.
func (r *run) awaitWrite(ctx workflow.Context, rec *session.ToolCallRecord) error {
	if err := workflow.Await(ctx, func() bool { return r.s.WriteReleasable(rec.ID) }); err != nil {
		return err
	}
	r.emit(waitStepID(session.StepAwaitToolApproval, r.s.Turn.ID, rec.ID), r.s.ReleaseWrite(rec.ID, workflow.Now(ctx)))
	return nil
}

func (r *run) record(id string) *session.ToolCallRecord {
	if r.s.Turn == nil {
		return nil
	}
	return r.s.Turn.ToolCall(id)
}

// awaitInterrupt is AwaitToolApproval or AwaitQuestionAnswer: it waits for
// the RPC that resolves the interrupt, or for its deadline on the engine's
// timer. A timer that fires early, from rounding, waits again.
func (r *run) awaitInterrupt(ctx workflow.Context, rec *session.ToolCallRecord) error {
	step := session.WaitStep(*rec)
	waiting := rec.Status
	r.move(rec.ID, step, session.TransitionNext)
	r.enter(step)
	defer r.leave(step)
	moved := func() bool { return r.record(rec.ID) != rec || rec.Status != waiting }
	for !moved() {
		in, ok := r.s.InterruptOf(rec.ID)
		if !ok || in.Deadline == nil {
			return workflow.Await(ctx, moved)
		}
		wait := wholeSeconds(in.Deadline.Sub(workflow.Now(ctx)))
		if wait > 0 {
			done, err := workflow.AwaitWithTimeout(ctx, wait, moved)
			if err != nil || done {
				return err
			}
		}
		stepID := waitStepID(step, r.s.Turn.ID, rec.ID)
		if events := r.s.ExpireInterrupt(in.ID, workflow.Now(ctx)); len(events) > 0 {
			r.emit(stepID, events)
			r.activate(tracing.Activation{Trigger: tracing.TriggerInterruptDeadline, InterruptID: in.ID}, step, stepID, rec.ID)
		}
	}
	return nil
}

// awaitTimer is AwaitTimer: a durable wait on the engine's timer.
func (r *run) awaitTimer(ctx workflow.Context, rec *session.ToolCallRecord) error {
	r.move(rec.ID, session.StepAwaitTimer, session.TransitionNext)
	r.enter(session.StepAwaitTimer)
	defer r.leave(session.StepAwaitTimer)
	moved := func() bool { return r.record(rec.ID) != rec || rec.Status != session.ToolCallWaitingForTimer }
	for !moved() {
		wait := wholeSeconds(rec.WaitUntil.Sub(workflow.Now(ctx)))
		if wait > 0 {
			done, err := workflow.AwaitWithTimeout(ctx, wait, moved)
			if err != nil || done {
				return err
			}
		}
		if !workflow.Now(ctx).Before(*rec.WaitUntil) {
			r.emit(waitStepID(session.StepAwaitTimer, r.s.Turn.ID, rec.ID), r.s.CompleteTimer(rec.ID))
		}
	}
	return nil
}

// callTool is CallTool or CallSingleAttemptTool, and its failure route when
// the attempts run out.
func (r *run) callTool(ctx workflow.Context, rec *session.ToolCallRecord) {
	step := session.ToolStep(rec.Effect)
	stepID := r.nextStepID(step, rec.ID)
	r.move(rec.ID, step, session.TransitionNext)
	if r.s.TurnControlRequested() && (rec.InputQuestions == 0 || r.revision >= revisionControlEndsToolQuestions) {
		// Steered or cancelled before the tool started, or before it
		// started again with its question's answer: it never will.
		r.emit(stepID, r.s.SettleUnstarted(rec.ID))
		return
	}
	r.enter(step)
	var out session.ToolOutcome
	err := workflow.ExecuteActivity(r.toolOptions(ctx, stepID, rec), string(step), r.toolInput(rec)).Get(ctx, &out)
	r.leave(step)
	if r.record(rec.ID) != rec {
		// The turn ended while the Step ran; its outcome belongs to no turn.
		return
	}
	switch {
	case err == nil && out.Kind == session.ToolResultInputRequested && out.Question != nil:
		if r.revision >= revisionControlEndsToolQuestions {
			if events, settled := r.s.SettleLateQuestion(rec.ID); settled {
				r.emit(stepID, events)
				return
			}
		}
		r.emit(stepID, r.s.RequestToolInput(rec.ID, *out.Question, out.InputContinuation, workflow.Now(ctx)))
		return
	case err == nil && out.Kind == session.ToolResultNotStarted:
		r.emit(stepID, r.s.SettleUnstarted(rec.ID))
		return
	case err == nil:
		r.emit(stepID, r.s.RecordToolOutcome(rec.ID, out))
		return
	case temporal.IsCanceledError(err):
		// The session itself is being stopped; nothing is recorded.
		return
	}
	route := session.FailureRoute(rec.Effect)
	r.move(rec.ID, route, session.TransitionFailure)
	r.enter(route)
	r.emit(stepID, r.s.RecordToolStepExhausted(rec.ID, stepStarted(err), failureDetail(err)))
	r.leave(route)
}

// pollTask is PollToolTask: it waits on the engine's timer for the poll
// interval (at once when a question's answer waits to be handed over), then
// polls the task once, until the call is final or asks the user. A call
// whose task cancel_turn abandoned goes to CancelToolTask; a poll running
// then is cancelled and its result dropped.
func (r *run) pollTask(ctx workflow.Context, rec *session.ToolCallRecord) error {
	r.enter(session.StepPollToolTask)
	defer r.leave(session.StepPollToolTask)
	current := func() bool {
		return r.record(rec.ID) == rec && rec.Status == session.ToolCallWaitingForTask && !rec.TaskAbandoned
	}
	for current() {
		if wait := session.TaskPollDue(*rec); wait > 0 {
			if _, err := workflow.AwaitWithTimeout(ctx, wait, func() bool { return !current() }); err != nil {
				return err
			}
			if !current() {
				break
			}
		}
		stepID := r.nextStepID(session.StepPollToolTask, rec.ID)
		r.move(rec.ID, session.StepPollToolTask, session.TransitionNext)
		pollCtx, cancel := workflow.WithCancel(r.pollOptions(ctx, stepID))
		future := workflow.ExecuteActivity(pollCtx, string(session.StepPollToolTask), r.toolInput(rec))
		if err := workflow.Await(ctx, func() bool { return future.IsReady() || rec.TaskAbandoned }); err != nil {
			cancel()
			return err
		}
		if rec.TaskAbandoned {
			// Whatever the running poll returns is dropped.
			cancel()
			break
		}
		var out session.ToolOutcome
		err := future.Get(ctx, &out)
		switch {
		case r.record(rec.ID) != rec:
			return nil
		case err == nil && out.Kind == session.ToolResultInputRequested && out.Question != nil:
			r.emit(stepID, r.s.RequestToolInput(rec.ID, *out.Question, out.InputContinuation, workflow.Now(ctx)))
		case err == nil:
			r.emit(stepID, r.s.RecordToolOutcome(rec.ID, out))
		case temporal.IsCanceledError(err):
			return err
		default:
			// The task started, so the call is recorded by its effect.
			route := session.FailureRoute(rec.Effect)
			r.move(rec.ID, route, session.TransitionFailure)
			r.enter(route)
			r.emit(stepID, r.s.RecordToolStepExhausted(rec.ID, true, failureDetail(err)))
			r.leave(route)
		}
	}
	if r.record(rec.ID) == rec && rec.TaskAbandoned && !rec.Status.Final() {
		r.cancelTask(ctx, rec)
	}
	return nil
}

// cancelTask is CancelToolTask: the tool is asked to cancel the abandoned
// task, best effort, and the call is recorded outcome_unknown whatever the
// cancellation's outcome.
func (r *run) cancelTask(ctx workflow.Context, rec *session.ToolCallRecord) {
	stepID := r.nextStepID(session.StepCancelToolTask, rec.ID)
	r.move(rec.ID, session.StepCancelToolTask, session.TransitionCancel)
	spec, _ := session.Step(session.StepCancelToolTask)
	r.enter(session.StepCancelToolTask)
	opts := workflow.WithActivityOptions(ctx, workflow.ActivityOptions{
		ActivityID: stepID, StartToCloseTimeout: spec.AttemptTimeout, ScheduleToCloseTimeout: spec.Retry.Within,
		RetryPolicy: &temporal.RetryPolicy{
			InitialInterval: r.flow.Timings.RetryInterval, BackoffCoefficient: 2, MaximumAttempts: int32(spec.Retry.MaxAttempts), //nolint:gosec // a handful of attempts
		},
	})
	// A cancellation that keeps failing still ends the call.
	err := workflow.ExecuteActivity(opts, string(session.StepCancelToolTask), r.toolInput(rec)).Get(ctx, nil)
	r.leave(session.StepCancelToolTask)
	if err != nil {
		r.move(rec.ID, session.StepRecordToolOutcomeUnknown, session.TransitionFailure)
	}
	r.emit(stepID, r.s.RecordTaskAbandoned(rec.ID))
}

func (r *run) toolInput(rec *session.ToolCallRecord) ToolStepInput {
	turnID := r.s.Turn.ID
	// The key names the workflow, which is unique on the engine, where a
	// session ID is unique only among one Agent's sessions; under the
	// shared names the two are one.
	key := session.IdempotencyKey(workflow.GetInfo(r.ctx).WorkflowExecution.ID, turnID, rec.ID)
	return ToolStepInput{TurnID: turnID, SessionID: r.s.SessionID, Call: *rec, IdempotencyKey: key}
}

func (r *run) pollOptions(ctx workflow.Context, stepID string) workflow.Context {
	t := r.flow.Timings
	return workflow.WithActivityOptions(ctx, workflow.ActivityOptions{
		ActivityID:          stepID,
		StartToCloseTimeout: t.ToolAttempt,
		HeartbeatTimeout:    t.Heartbeat,
		RetryPolicy: &temporal.RetryPolicy{
			InitialInterval: t.RetryInterval, BackoffCoefficient: 2, MaximumAttempts: t.ToolAttempts,
		},
	})
}

func (r *run) toolOptions(ctx workflow.Context, stepID string, rec *session.ToolCallRecord) workflow.Context {
	t := r.flow.Timings
	attempts, timeout := int32(1), t.ToolAttempt
	if rec.Effect.Retried() {
		attempts = t.ToolAttempts
	}
	if l := rec.StepLimit; l != nil {
		if l.AttemptTimeout > 0 {
			timeout = l.AttemptTimeout
		}
		if l.MaxAttempts > 0 && rec.Effect.Retried() {
			attempts = int32(min(l.MaxAttempts, 100)) //nolint:gosec // bounded above
		}
	}
	return workflow.WithActivityOptions(ctx, workflow.ActivityOptions{
		ActivityID:             stepID,
		StartToCloseTimeout:    timeout,
		ScheduleToStartTimeout: t.ToolQueueTimeout,
		HeartbeatTimeout:       t.Heartbeat,
		RetryPolicy: &temporal.RetryPolicy{
			InitialInterval: t.RetryInterval, BackoffCoefficient: 2, MaximumAttempts: attempts,
		},
	})
}

// wholeSeconds rounds a wait up to whole seconds, as the engine's timers
// for deadlines and durable waits run.
func wholeSeconds(d time.Duration) time.Duration {
	if d <= 0 {
		return 0
	}
	return (d + time.Second - 1).Truncate(time.Second)
}

// stepStarted reports whether any attempt of a failed call Step reached a
// worker. Only a Step that timed out waiting in the queue, with no attempt
// ever started or heartbeating, never ran.
func stepStarted(err error) bool {
	var actErr *temporal.ActivityError
	if !errors.As(err, &actErr) {
		return true
	}
	var app *temporal.ApplicationError
	if errors.As(err, &app) && app.Type() == toolNotStartedType {
		return false
	}
	var timeout *temporal.TimeoutError
	if !errors.As(err, &timeout) {
		return true
	}
	return startedOnTimeout(timeout.TimeoutType(), actErr.StartedEventID(), timeout.HasLastHeartbeatDetails())
}

// startedOnTimeout decides for a timed-out Step: a queue timeout with no
// started attempt and no heartbeat means no worker ever ran it.
func startedOnTimeout(kind enumspb.TimeoutType, startedEventID int64, heartbeated bool) bool {
	switch kind {
	case enumspb.TIMEOUT_TYPE_SCHEDULE_TO_START, enumspb.TIMEOUT_TYPE_SCHEDULE_TO_CLOSE:
		return startedEventID > 0 || heartbeated
	}
	return true
}

// failureDetail is the innermost message of an activity failure: the
// application's error or the timeout that ended the last attempt.
func failureDetail(err error) string {
	var app *temporal.ApplicationError
	if errors.As(err, &app) {
		return app.Message()
	}
	for {
		next := errors.Unwrap(err)
		if next == nil {
			return err.Error()
		}
		err = next
	}
}
