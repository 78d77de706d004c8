package engine

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"

	"github.com/stepwise-run/stepwise/internal/contract"
	"github.com/stepwise-run/stepwise/internal/session"
	"github.com/stepwise-run/stepwise/internal/tracing"
	"github.com/stepwise-run/stepwise/pkg/agent"
)

// RunModelInput is RunModel's input: only the turn, so the model input is
// loaded from committed state rather than carried in history on every call.
type RunModelInput struct {
	TurnID string `json:"turnId"`
}

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

// Activities are the effect Steps, run by a worker.
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

// StateLoader loads committed session state for the effect Steps.
type StateLoader interface {
	// LoadTurn loads what a RunModel attempt works from.
	LoadTurn(ctx context.Context, sessionID, runID, turnID string) (session.TurnContext, error)
	// ToolCallControl says whether a tool call may start: empty, or the
	// reason a steer or cancel_turn settled it.
	ToolCallControl(ctx context.Context, sessionID, runID, turnID, toolCallID string) (string, error)
}

// QueryLoader loads committed state by querying the session workflow, which
// answers from the worker that holds it.
type QueryLoader struct {
	Client client.Client
}

// LoadTurn queries the session for the turn's committed state.
func (q QueryLoader) LoadTurn(ctx context.Context, sessionID, runID, turnID string) (session.TurnContext, error) {
	resp, err := q.Client.QueryWorkflow(ctx, sessionID, runID, queryTurnContext, turnID)
	if err != nil {
		return session.TurnContext{}, err
	}
	var turn session.TurnContext
	if err := resp.Get(&turn); err != nil {
		return session.TurnContext{}, fmt.Errorf("decoding: %w", err)
	}
	return turn, nil
}

// ToolCallControl queries the session whether a tool call may start.
func (q QueryLoader) ToolCallControl(ctx context.Context, sessionID, runID, turnID, toolCallID string) (string, error) {
	resp, err := q.Client.QueryWorkflow(ctx, sessionID, runID, queryToolCallControl, ToolCallControlRequest{TurnID: turnID, ToolCallID: toolCallID})
	if err != nil {
		return "", err
	}
	var reason string
	if err := resp.Get(&reason); err != nil {
		return "", fmt.Errorf("decoding: %w", err)
	}
	return reason, nil
}

// The queries a StateLoader other than QueryLoader answers, for tests that
// run the workflow in a test environment.
const (
	QueryTurnContext     = queryTurnContext
	QueryToolCallControl = queryToolCallControl
)

// stepStartedMark is the heartbeat detail of a tool Step that has started.
const stepStartedMark = "started"

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

// sessionID is the session the Step runs for: the one its input names, or,
// for a Step scheduled before inputs named it, the workflow's ID, which
// then was the session ID.
func (in ToolStepInput) sessionID(ctx context.Context) string {
	if in.SessionID != "" {
		return in.SessionID
	}
	return activity.GetInfo(ctx).WorkflowExecution.ID
}

func (w stepWriter) Write(e session.Event) {
	if e.TurnID == "" {
		e.TurnID = w.turnID
	}
	e.StepExecutionID, e.Attempt = w.stepID, w.attempt
	w.sink.Write(w.sessionID, e)
}
