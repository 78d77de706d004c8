package engine

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/temporal"

	"github.com/stepwise-run/stepwise/internal/session"
	"github.com/stepwise-run/stepwise/internal/tracing"
	"github.com/stepwise-run/stepwise/pkg/agent"
)

// RunModelInput is RunModel's input: only the turn, so the model input is
// loaded from committed state rather than carried in history on every call.
type RunModelInput struct {
	TurnID string `json:"turnId"`
}

// Activities are the call Steps, run by a worker.
type Activities struct {
	// Runner makes the model calls and runs the tools.
	Runner session.Runner
	// State loads committed session state.
	State StateLoader
	// Events receives the Steps' events.
	Events EventSink
	// Spend, when set, admits each model call and is told what it used.
	Spend agent.SpendLimit
	// Tracer, when set, emits a span per model call and tool Step attempt.
	Tracer *tracing.Tracer
	// Checkpoints, when set, records a tool's checkpoint with the engine
	// before SaveCheckpoint returns; without it the checkpoint rides on the
	// next batched heartbeat.
	Checkpoints CheckpointRecorder
}

// CheckpointRecorder sends a heartbeat to the engine at once; the Temporal
// client is one.
type CheckpointRecorder interface {
	RecordActivityHeartbeat(ctx context.Context, taskToken []byte, details ...any) error
}

// RunModel makes exactly one model call per attempt.
func (a *Activities) RunModel(ctx context.Context, in RunModelInput) (session.ModelOutcome, error) {
	turn, stop, err := a.loadTurn(ctx, in)
	if err != nil {
		return session.ModelOutcome{}, err
	}
	defer stop()
	started := time.Now()
	call, err := a.admit(ctx, turn)
	if err != nil {
		a.chatSpan(ctx, turn, started, modelCall(turn, session.ModelOutcome{}, err))
		return session.ModelOutcome{}, err
	}
	// The activation's root is current while the model call runs, so the
	// model client's requests carry its trace context.
	out, err := a.Runner.RunModelStep(tracing.ContextWithParent(ctx, turn.TraceContext), turn)
	a.record(ctx, call, out.Usage, out.Metadata)
	out.Attempt = turn.Attempt
	a.chatSpan(ctx, turn, started, modelCall(turn, out, err))
	return out, modelFailure(err)
}

// chatSpan emits a model call attempt's chat span as the attempt ends.
func (a *Activities) chatSpan(ctx context.Context, turn session.TurnContext, started time.Time, c tracing.ChatCall) {
	if a.Tracer == nil {
		return
	}
	c.Step, c.Parent, c.Start, c.End = stepAttempt(ctx, turn.SessionID, turn.TurnID), turn.TraceContext, started, time.Now()
	a.Tracer.Chat(c)
}

// modelCall describes a RunModel attempt for its span: what it received,
// and the messages and calls its commit stores.
func modelCall(turn session.TurnContext, out session.ModelOutcome, err error) tracing.ChatCall {
	c := tracing.ChatCall{Metadata: out.Metadata, Usage: out.Usage, Input: turn.Messages, Output: out.NewMessages, Err: err}
	if n := len(turn.Messages); n > 0 {
		c.LastInputKey = turn.Messages[n-1].Sequence
	}
	if err == nil && out.Kind != session.OutcomeCompactionNeeded {
		// The commit stores the call's messages in order from here.
		for i := range out.NewMessages {
			c.OutputKeys = append(c.OutputKeys, turn.NextSequence+int64(i))
		}
	}
	for _, tc := range out.ToolCalls {
		c.RequestedToolCallIDs = append(c.RequestedToolCallIDs, tc.ID)
	}
	return c
}

// summaryCall describes a CompactContext attempt for its span: the
// messages it summarized and the summary.
func summaryCall(turn session.TurnContext, out session.CompactionOutcome, err error) tracing.ChatCall {
	c := tracing.ChatCall{Usage: out.Usage, LastInputKey: turn.CompactThrough, Err: err}
	for _, m := range turn.Messages {
		if m.Sequence <= turn.CompactThrough {
			c.Input = append(c.Input, m)
		}
	}
	if err == nil && out.Text != "" {
		c.Output = []session.Message{{Role: session.RoleAssistant, Text: out.Text}}
	}
	return c
}

// stepAttempt names the running activity attempt for its span.
func stepAttempt(ctx context.Context, sessionID, turnID string) tracing.StepAttempt {
	info := activity.GetInfo(ctx)
	return tracing.StepAttempt{
		SessionID: sessionID, RunID: info.WorkflowExecution.RunID, StepType: info.ActivityType.Name,
		StepExecutionID: info.ActivityID, Attempt: int(info.Attempt), TurnID: turnID,
	}
}

// loadTurn loads the committed state a model Step attempt works from, with
// the attempt's events and heartbeat; stop ends the background heartbeat.
func (a *Activities) loadTurn(ctx context.Context, in RunModelInput) (turn session.TurnContext, stop func(), err error) {
	info := activity.GetInfo(ctx)
	turn, err = a.State.LoadTurn(ctx, info.WorkflowExecution.ID, info.WorkflowExecution.RunID, in.TurnID)
	if err != nil {
		return session.TurnContext{}, nil, fmt.Errorf("loading the committed state of %s: %w", in.TurnID, err)
	}
	turn.Attempt = int(info.Attempt)
	turn.Events = a.writer(ctx, turn.SessionID, in.TurnID)
	turn.Heartbeat = func() { activity.RecordHeartbeat(ctx) }
	return turn, heartbeatInBackground(ctx, turn.Heartbeat), nil
}

// CompactContext makes one summary call per attempt.
func (a *Activities) CompactContext(ctx context.Context, in RunModelInput) (session.CompactionOutcome, error) {
	compactor, ok := a.Runner.(session.Compactor)
	if !ok {
		return session.CompactionOutcome{}, temporal.NewNonRetryableApplicationError("the runner cannot summarize the conversation", "stepwise.NoCompactor", nil)
	}
	turn, stop, err := a.loadTurn(ctx, in)
	if err != nil {
		return session.CompactionOutcome{}, err
	}
	defer stop()
	started := time.Now()
	call, err := a.admit(ctx, turn)
	if err != nil {
		a.chatSpan(ctx, turn, started, summaryCall(turn, session.CompactionOutcome{}, err))
		return session.CompactionOutcome{}, err
	}
	out, err := compactor.SummarizeContext(tracing.ContextWithParent(ctx, turn.TraceContext), turn)
	a.record(ctx, call, out.Usage, session.CallMetadata{})
	out.Attempt = turn.Attempt
	a.chatSpan(ctx, turn, started, summaryCall(turn, out, err))
	return out, modelFailure(err)
}

// SpendLimitType marks a model call a spend limit refused.
const SpendLimitType = "stepwise.SpendLimitReached"

// admit asks the spend limit, when there is one, for this model call
// attempt. A refusal fails the turn without another attempt.
func (a *Activities) admit(ctx context.Context, turn session.TurnContext) (agent.SpendCall, error) {
	if a.Spend == nil {
		return agent.SpendCall{}, nil
	}
	info := activity.GetInfo(ctx)
	call := agent.SpendCall{
		SessionID: turn.SessionID, TurnID: turn.TurnID,
		CallID:        fmt.Sprintf("%s/%s/%s/%d", info.WorkflowExecution.ID, info.WorkflowExecution.RunID, info.ActivityID, info.Attempt),
		SessionTokens: turn.SessionUsage.Tokens(),
	}
	err := a.Spend.Admit(ctx, call)
	var refused *agent.SpendLimitError
	switch {
	case errors.As(err, &refused):
		return call, temporal.NewNonRetryableApplicationError(refused.Reason, SpendLimitType, nil)
	case err != nil:
		return call, fmt.Errorf("asking the spend limit: %w", err)
	}
	return call, nil
}

// record tells the spend limit what an admitted call used, even when the
// attempt was cancelled; a failure to tell it leaves the call's answer
// standing.
func (a *Activities) record(ctx context.Context, call agent.SpendCall, used session.Usage, meta session.CallMetadata) {
	if a.Spend == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	// The price is the one of the model the Agent asked for: the model an
	// answer names is the provider's word, and a cheaper name must not
	// make the call cheaper.
	model := meta.RequestModel
	if model == "" {
		model = meta.ResponseModel
	}
	err := a.Spend.Record(ctx, call, agent.SpendUsage{
		Provider: meta.Provider, Model: model,
		InputTokens: used.InputTokens, OutputTokens: used.OutputTokens,
		CachedInputTokens: used.CachedInputTokens, ReasoningTokens: used.ReasoningTokens,
	})
	if err != nil {
		activity.GetLogger(ctx).Warn("the spend limit was not told what a model call used", "callId", call.CallID, "error", err.Error())
	}
}

// ModelErrorType marks a failed model call in the Step's failure.
const ModelErrorType = "stepwise.ModelError"

// modelFailure tells the RunModel retry policy what a model client said: a
// refusal that another attempt cannot change ends the attempts at once, and
// a provider's requested delay is waited before the next attempt.
func modelFailure(err error) error {
	var me *agent.ModelError
	if !errors.As(err, &me) {
		return err
	}
	return temporal.NewApplicationErrorWithOptions(me.Error(), ModelErrorType, temporal.ApplicationErrorOptions{
		NonRetryable: !me.Retryable, NextRetryDelay: me.RetryAfter,
	})
}

// heartbeatInBackground heartbeats six times per heartbeat timeout until
// stopped, so a Step that is alive is never timed out, and a dead worker is
// found within one timeout.
func heartbeatInBackground(ctx context.Context, beat func()) (stop func()) {
	timeout := activity.GetInfo(ctx).HeartbeatTimeout
	if timeout <= 0 {
		return func() {}
	}
	done := make(chan struct{})
	go func() {
		ticker := time.NewTicker(max(timeout/6, 100*time.Millisecond))
		defer ticker.Stop()
		for {
			select {
			case <-done:
				return
			case <-ctx.Done():
				return
			case <-ticker.C:
				beat()
			}
		}
	}()
	return func() { close(done) }
}

// stepWriter stamps a Step's events with its execution and attempt.
type stepWriter struct {
	sink      EventSink
	sessionID string
	turnID    string
	stepID    string
	attempt   int
}

func (a *Activities) writer(ctx context.Context, sessionID, turnID string) stepWriter {
	info := activity.GetInfo(ctx)
	sink := a.Events
	if sink == nil {
		sink = discardEvents{}
	}
	return stepWriter{sink: sink, sessionID: sessionID, turnID: turnID, stepID: info.ActivityID, attempt: int(info.Attempt)}
}

func (w stepWriter) Write(e session.Event) {
	if e.TurnID == "" {
		e.TurnID = w.turnID
	}
	e.StepExecutionID, e.Attempt = w.stepID, w.attempt
	w.sink.Write(w.sessionID, e)
}
