package engine

import (
	"context"
	"fmt"
	"sync"

	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/temporal"

	"github.com/stepwise-run/stepwise/internal/contract"
	"github.com/stepwise-run/stepwise/internal/session"
	"github.com/stepwise-run/stepwise/internal/tracing"
)

// ToolStepInput is a tool Step's input: its own record only, so parallel
// tool Steps never share state.
type ToolStepInput struct {
	TurnID string `json:"turnId"`
	// SessionID is the session's ID; empty in Steps scheduled before
	// engine 0.8.0, whose sessions' workflow IDs are their session IDs.
	SessionID      string                 `json:"sessionId,omitempty"`
	Call           session.ToolCallRecord `json:"call"`
	IdempotencyKey string                 `json:"idempotencyKey"`
}

// CallTool runs one read or idempotent write call; its retry policy allows
// three attempts.
func (a *Activities) CallTool(ctx context.Context, in ToolStepInput) (session.ToolOutcome, error) {
	return a.callTool(ctx, in)
}

// CallSingleAttemptTool runs one non-idempotent write or unclassified call;
// its retry policy allows one attempt. It is its own activity type, so the
// history names the Step that ran.
func (a *Activities) CallSingleAttemptTool(ctx context.Context, in ToolStepInput) (session.ToolOutcome, error) {
	return a.callTool(ctx, in)
}

func (a *Activities) callTool(ctx context.Context, in ToolStepInput) (out session.ToolOutcome, err error) {
	ctx, span := a.toolSpan(ctx, in)
	defer func() { span.End(out, err) }()
	info := activity.GetInfo(ctx)
	if !activity.HasHeartbeatDetails(ctx) {
		// The tool has not started in any attempt of this Step: a steer or
		// cancel_turn that committed first keeps it from starting, also
		// when it would start again with its question's answer, since a
		// tool asks only before it takes any effect.
		reason, err := a.State.ToolCallControl(ctx, info.WorkflowExecution.ID, info.WorkflowExecution.RunID, in.TurnID, in.Call.ID)
		if err != nil {
			return session.ToolOutcome{}, temporal.NewApplicationError(
				fmt.Sprintf("checking whether %s may start: %v", in.Call.Name, err), toolNotStartedType)
		}
		if reason != "" {
			return session.ToolOutcome{Kind: session.ToolResultNotStarted, Error: reason}, nil
		}
	}
	events := a.writer(ctx, in.sessionID(ctx), in.TurnID)
	events.Write(session.NewEvent(session.EventToolCallStarted, in.TurnID, map[string]string{
		"tool_call_id": in.Call.ID, "tool_name": in.Call.Name,
	}))
	exec, stop := a.execution(ctx, in)
	defer stop()
	out, err = a.Runner.ExecuteToolCall(ctx, exec)
	if err == nil && out.Kind == session.ToolResultTaskStarted {
		if _, polls := a.Runner.(session.TaskRunner); !polls {
			return session.MissingPollerOutcome(in.Call), nil
		}
		return session.CheckedTaskStarted(in.Call, out), nil
	}
	if err != nil {
		return out, err
	}
	return checkResultImages(in.Call.Name, out)
}

// checkResultImages holds a tool result's images to what a session stores:
// a succeeded result's, each a valid reference, at most
// media.MaxImagesPerMessage. An invalid one fails the attempt, which
// retries as the tool's effect allows; other outcomes keep no images.
func checkResultImages(tool string, out session.ToolOutcome) (session.ToolOutcome, error) {
	if out.Kind != session.ToolResultSucceeded {
		out.Images = nil
		return out, nil
	}
	if err := session.CheckImages(out.Images); err != nil {
		return session.ToolOutcome{}, temporal.NewApplicationError(fmt.Sprintf("the result of %s: %v", tool, err), invalidImageType)
	}
	return out, nil
}

// execution is what a runner gets for one tool Step attempt. The attempt is
// marked started by a heartbeat, so its failure is never recorded as "did
// not run"; every heartbeat carries the latest checkpoint, which a retried
// attempt reads, and a checkpoint is recorded before SaveCheckpoint returns.
func (a *Activities) execution(ctx context.Context, in ToolStepInput) (session.ToolExecution, func()) {
	info := activity.GetInfo(ctx)
	var checkpoint checkpointDetail
	if activity.HasHeartbeatDetails(ctx) {
		_ = activity.GetHeartbeatDetails(ctx, &checkpoint.mark, &checkpoint.text)
	}
	saved := &savedCheckpoint{text: checkpoint.text}
	beat := func() { activity.RecordHeartbeat(ctx, stepStartedMark, saved.get()) }
	beat()
	stop := heartbeatInBackground(ctx, beat)
	return session.ToolExecution{
		SessionID: in.sessionID(ctx), TurnID: in.TurnID, Call: in.Call,
		IdempotencyKey: in.IdempotencyKey, Attempt: int(info.Attempt),
		Events: a.writer(ctx, in.sessionID(ctx), in.TurnID), Heartbeat: beat,
		Checkpoint:     checkpoint.text,
		SaveCheckpoint: func(text string) { saved.set(text); a.recordCheckpoint(ctx, text); beat() },
	}, stop
}

// recordCheckpoint sends a checkpoint to the engine before the tool goes
// on. The SDK batches heartbeats for most of the heartbeat timeout, and a
// worker that died in that window would leave the started task unnamed, so
// the retried attempt would start it again: a second payment, say. A failed
// send leaves the batched heartbeat to carry it.
func (a *Activities) recordCheckpoint(ctx context.Context, text string) {
	if a.Checkpoints == nil {
		return
	}
	if err := a.Checkpoints.RecordActivityHeartbeat(ctx, activity.GetInfo(ctx).TaskToken, stepStartedMark, text); err != nil {
		activity.GetLogger(ctx).Warn("recording a tool checkpoint", "error", err)
	}
}

// toolSpan starts a tool Step attempt's execute_tool span, parented from
// the call's record; the span is current while the tool runs.
func (a *Activities) toolSpan(ctx context.Context, in ToolStepInput) (context.Context, *tracing.ToolSpan) {
	return a.Tracer.StartTool(ctx, tracing.ToolCall{
		Step: stepAttempt(ctx, in.sessionID(ctx), in.TurnID), Parent: in.Call.TraceContext,
		ID: in.Call.ID, Name: in.Call.Name, Effect: string(in.Call.Effect), Arguments: in.Call.Arguments,
	})
}

// PollToolTask polls a call's task once.
func (a *Activities) PollToolTask(ctx context.Context, in ToolStepInput) (out session.ToolOutcome, err error) {
	ctx, span := a.toolSpan(ctx, in)
	defer func() { span.End(out, err) }()
	poller, ok := a.Runner.(session.TaskRunner)
	if !ok {
		return session.ToolOutcome{}, temporal.NewNonRetryableApplicationError(contract.MissingTaskPollerText(in.Call.Name), "stepwise.MissingTaskPoller", nil)
	}
	exec, stop := a.execution(ctx, in)
	defer stop()
	out, err = poller.PollToolTask(ctx, exec)
	if err != nil {
		return out, err
	}
	return checkResultImages(in.Call.Name, out)
}

// CancelToolTask asks the runner to cancel an abandoned task, best effort.
func (a *Activities) CancelToolTask(ctx context.Context, in ToolStepInput) error {
	poller, ok := a.Runner.(session.TaskRunner)
	if !ok {
		return nil
	}
	exec, stop := a.execution(ctx, in)
	defer stop()
	return poller.CancelToolTask(ctx, exec)
}

type checkpointDetail struct {
	mark, text string
}

// savedCheckpoint is an attempt's latest checkpoint, read by the background
// heartbeat.
type savedCheckpoint struct {
	mu   sync.Mutex
	text string
}

func (s *savedCheckpoint) get() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.text
}

func (s *savedCheckpoint) set(text string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.text = text
}

// stepStartedMark is the heartbeat detail of a tool Step that has started.
const stepStartedMark = "started"

// sessionID is the session the Step runs for: the one its input names, or,
// for a Step scheduled before inputs named it, the workflow's ID, which
// then was the session ID.
func (in ToolStepInput) sessionID(ctx context.Context) string {
	if in.SessionID != "" {
		return in.SessionID
	}
	return activity.GetInfo(ctx).WorkflowExecution.ID
}
