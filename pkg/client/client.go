// Package client starts and drives agent sessions: start a session, send a
// message, approve or reject a tool call, answer a question, read a
// snapshot or the stored messages, and find the sessions waiting for a
// person across agents.
package client

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"

	"github.com/stepwise-run/stepwise/internal/engine"
	"github.com/stepwise-run/stepwise/internal/session"
	"github.com/stepwise-run/stepwise/pkg/agent"
)

// The session types the client returns.
type (
	// Snapshot is a session as a UI shows it.
	Snapshot = session.Snapshot
	// MessagesPage is one page of stored messages.
	MessagesPage = session.MessagesPage
	// ListMessagesRequest pages through stored messages.
	ListMessagesRequest = session.ListMessagesRequest
	// Interrupt is a pending approval or question.
	Interrupt = session.Interrupt
	// ToolCallRecord is a tool call of the active turn.
	ToolCallRecord = session.ToolCallRecord
	// Plan is the session's plan.
	Plan = session.Plan
)

// Plan statuses.
const (
	PlanDraft     = session.PlanDraft
	PlanActive    = session.PlanActive
	PlanCompleted = session.PlanCompleted
	PlanCleared   = session.PlanCleared
)

// Interrupt kinds.
const (
	InterruptApproval = session.InterruptApproval
	InterruptQuestion = session.InterruptQuestion
)

// Steps a session waits in for a person.
const (
	StepAwaitToolApproval   = string(session.StepAwaitToolApproval)
	StepAwaitQuestionAnswer = string(session.StepAwaitQuestionAnswer)
)

// Sessions drives the sessions of one Flow type.
type Sessions struct {
	c         client.Client
	flowType  string
	taskQueue string
}

// TaskQueue is the task queue the operator gives an Agent's workers.
func TaskQueue(flowType string) string {
	return "stepwise/" + flowType
}

// New returns a client for the sessions of a Flow type on its task queue;
// an empty task queue uses the operator's naming.
func New(c client.Client, flowType, taskQueue string) *Sessions {
	if taskQueue == "" {
		taskQueue = TaskQueue(flowType)
	}
	return &Sessions{c: c, flowType: flowType, taskQueue: taskQueue}
}

// StartOption changes how Start starts a session.
type StartOption func(*startOptions)

type startOptions struct {
	requestID  string
	stepSearch engine.StepSearchMode
	settings   agent.SessionSettings
}

// WithSettings starts the session with session settings, which its first
// turn uses. Start refuses settings beyond agent.MaxSessionSettingsBytes
// before it sends anything.
func WithSettings(settings agent.SessionSettings) StartOption {
	return func(o *startOptions) { o.settings = settings }
}

// WithRequestID names the start call, so a caller that retries Start after
// an error it cannot judge learns true when its first call started the
// session. Without it each call has its own random ID.
func WithRequestID(id string) StartOption {
	return func(o *startOptions) { o.requestID = id }
}

// WithoutStepSearch starts a session that never writes the ActiveStepTypes
// search attribute, for a namespace where it is not registered. Such a
// session is not found by Waiting.
func WithoutStepSearch() StartOption {
	return func(o *startOptions) { o.stepSearch = engine.StepSearchDisabled }
}

// Start starts a session; a non-blank initial message starts its first turn.
// It reports false when a session with that ID exists or existed: a session
// ID is never reused, and the initial message of a refused start is dropped.
func (s *Sessions) Start(ctx context.Context, sessionID, initialMessage string, opts ...StartOption) (bool, error) {
	o := startOptions{requestID: requestID()}
	for _, opt := range opts {
		opt(&o)
	}
	in := session.StartInput{RequestID: o.requestID, InitialMessage: initialMessage}
	if o.settings != nil {
		raw, err := checkedSettings(o.settings)
		if err != nil {
			return false, fmt.Errorf("starting session %s: %w", sessionID, err)
		}
		in.Settings = raw
	}
	start := s.c.NewWithStartWorkflowOperation(client.StartWorkflowOptions{
		ID: sessionID, TaskQueue: s.taskQueue,
		WorkflowIDConflictPolicy: enumspb.WORKFLOW_ID_CONFLICT_POLICY_USE_EXISTING,
		WorkflowIDReusePolicy:    enumspb.WORKFLOW_ID_REUSE_POLICY_REJECT_DUPLICATE,
	}, s.flowType, engine.SessionInput{Start: in, StepSearch: o.stepSearch})
	handle, err := s.c.UpdateWithStartWorkflow(ctx, client.UpdateWithStartWorkflowOptions{
		StartWorkflowOperation: start,
		UpdateOptions: client.UpdateWorkflowOptions{
			UpdateName: engine.UpdateStartSession, Args: []any{in}, WaitForStage: client.WorkflowUpdateStageCompleted,
		},
	})
	var started bool
	if err == nil {
		err = handle.Get(ctx, &started)
	}
	var exists *serviceerror.WorkflowExecutionAlreadyStarted
	switch {
	case err == nil:
		return started, nil
	case refused(err), errors.As(err, &exists):
		return false, nil
	default:
		return false, fmt.Errorf("starting session %s: %w", sessionID, err)
	}
}

func requestID() string {
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// SendOption changes how Send sends a message.
type SendOption func(*engine.SendRequest)

// InPlanMode sends a message that starts a planning turn: the model may only
// write the plan, which the user then reviews and approves with
// ExecutePlan. The Agent must enable plan mode.
func InPlanMode() SendOption {
	return func(r *engine.SendRequest) { r.PlanMode = true }
}

// Send queues a user message; it starts a turn when none runs. It reports
// false for blank text, and for a plan mode message when plan mode is off.
// While a draft plan exists, every message starts a planning turn that
// revises it.
func (s *Sessions) Send(ctx context.Context, sessionID, text string, opts ...SendOption) (bool, error) {
	req := engine.SendRequest{Text: text}
	for _, opt := range opts {
		opt(&req)
	}
	return s.update(ctx, sessionID, engine.UpdateSendUserMessage, req)
}

// ExecutePlan approves a plan revision: the session starts a turn that
// executes it. It reports true only while the session waits for a message,
// the plan has that revision and is draft or active, no execution of it is
// pending, and no message is queued or steered.
func (s *Sessions) ExecutePlan(ctx context.Context, sessionID string, revision int) (bool, error) {
	return s.update(ctx, sessionID, engine.UpdateExecutePlan, session.ExecutePlanRequest{Revision: revision})
}

// Steer steers the running turn with new text: the turn ends at its next
// safe Step boundary (a running model call or started tool runs to its end,
// calls not started are rejected) and the text starts the next turn. While
// no turn runs, the text is queued like Send. It reports false for blank
// text.
func (s *Sessions) Steer(ctx context.Context, sessionID, text string) (bool, error) {
	return s.update(ctx, sessionID, engine.UpdateSteerUserMessage, session.SteerRequest{Text: text})
}

// SteerQueued steers the running turn with a queued message, by the ID the
// snapshot lists. It reports false for a message no longer queued.
func (s *Sessions) SteerQueued(ctx context.Context, sessionID, messageID string) (bool, error) {
	return s.update(ctx, sessionID, engine.UpdateSteerUserMessage, session.SteerRequest{MessageID: messageID})
}

// DeleteQueued deletes a queued message. It reports false for a message no
// longer queued.
func (s *Sessions) DeleteQueued(ctx context.Context, sessionID, messageID string) (bool, error) {
	return s.update(ctx, sessionID, engine.UpdateDeleteQueuedMessage, session.DeleteRequest{MessageID: messageID})
}

// CancelTurn stops the running turn now, with no new turn: a running model
// call is cancelled and its answer dropped, every wait ends, and a started
// tool runs to its end. It reports false when turnID is not the active turn;
// a second cancel of the same turn reports true. The turn may still
// complete first, when its answer committed before the cancel.
func (s *Sessions) CancelTurn(ctx context.Context, sessionID, turnID string) (bool, error) {
	return s.update(ctx, sessionID, engine.UpdateCancelTurn, session.CancelRequest{TurnID: turnID})
}

// Approve approves a pending tool call.
func (s *Sessions) Approve(ctx context.Context, sessionID, interruptID string) (bool, error) {
	return s.update(ctx, sessionID, engine.UpdateResolveInterrupt, session.ResolveRequest{InterruptID: interruptID, Approved: true})
}

// Reject rejects a pending tool call, with a message the model sees, or
// declines a pending question.
func (s *Sessions) Reject(ctx context.Context, sessionID, interruptID, message string) (bool, error) {
	return s.update(ctx, sessionID, engine.UpdateResolveInterrupt, session.ResolveRequest{InterruptID: interruptID, RejectionMessage: message})
}

// Answer answers a pending question. It reports false for a blank answer,
// an answer outside the choices, or a question no longer pending.
func (s *Sessions) Answer(ctx context.Context, sessionID, interruptID, answer string) (bool, error) {
	return s.update(ctx, sessionID, engine.UpdateAnswerQuestion, session.AnswerRequest{InterruptID: interruptID, Answer: answer})
}

// UpdateSettings replaces the session settings as a whole; empty settings
// clear them. The next turn starts with them, while a running turn keeps
// its own. It refuses settings beyond agent.MaxSessionSettingsBytes before it
// sends anything, and reports false before the session started.
func (s *Sessions) UpdateSettings(ctx context.Context, sessionID string, settings agent.SessionSettings) (bool, error) {
	raw, err := checkedSettings(settings)
	if err != nil {
		return false, fmt.Errorf("%s on session %s: %w", engine.UpdateSessionSettings, sessionID, err)
	}
	return s.update(ctx, sessionID, engine.UpdateSessionSettings, engine.SettingsRequest{Settings: raw})
}

func checkedSettings(settings agent.SessionSettings) (json.RawMessage, error) {
	if err := agent.ValidateSessionSettings(settings); err != nil {
		return nil, err
	}
	return agent.EncodeSessionSettings(settings)
}

// update runs an RPC; a refusal is false with no error.
func (s *Sessions) update(ctx context.Context, sessionID, name string, arg any) (bool, error) {
	handle, err := s.c.UpdateWorkflow(ctx, client.UpdateWorkflowOptions{
		WorkflowID: sessionID, UpdateName: name, Args: []any{arg}, WaitForStage: client.WorkflowUpdateStageCompleted,
	})
	var ok bool
	if err == nil {
		err = handle.Get(ctx, &ok)
	}
	if err != nil {
		if refused(err) {
			return false, nil
		}
		return false, fmt.Errorf("%s on session %s: %w", name, sessionID, err)
	}
	return ok, nil
}

func refused(err error) bool {
	var app *temporal.ApplicationError
	return errors.As(err, &app) && app.Type() == engine.RejectedErrorType
}

// Snapshot reads a session as a UI shows it.
func (s *Sessions) Snapshot(ctx context.Context, sessionID string) (Snapshot, error) {
	var snap Snapshot
	err := s.query(ctx, sessionID, engine.QuerySnapshot, &snap)
	return snap, err
}

// Messages reads a page of stored messages, oldest first; the limit is
// clamped to 1..200.
func (s *Sessions) Messages(ctx context.Context, sessionID string, req ListMessagesRequest) (MessagesPage, error) {
	var page MessagesPage
	err := s.query(ctx, sessionID, engine.QueryListMessages, &page, req)
	return page, err
}

func (s *Sessions) query(ctx context.Context, sessionID, name string, out any, args ...any) error {
	resp, err := s.c.QueryWorkflow(ctx, sessionID, "", name, args...)
	if err != nil {
		return fmt.Errorf("%s of session %s: %w", name, sessionID, err)
	}
	return resp.Get(out)
}

// WaitingSession is a session found waiting in a Step.
type WaitingSession struct {
	SessionID string
	FlowType  string
}

// Waiting finds the running sessions of every Flow type that wait in a
// Step, such as StepAwaitToolApproval. The search is eventually consistent:
// a session appears shortly after it starts waiting.
func Waiting(ctx context.Context, c client.Client, namespace, step string) ([]WaitingSession, error) {
	query := fmt.Sprintf("%s = %q AND ExecutionStatus = 'Running'", engine.ActiveStepsAttribute, step)
	var out []WaitingSession
	var token []byte
	for {
		resp, err := c.ListWorkflow(ctx, &workflowservice.ListWorkflowExecutionsRequest{Namespace: namespace, Query: query, NextPageToken: token})
		if err != nil {
			return nil, fmt.Errorf("finding sessions waiting in %s: %w", step, err)
		}
		for _, e := range resp.GetExecutions() {
			out = append(out, WaitingSession{SessionID: e.GetExecution().GetWorkflowId(), FlowType: e.GetType().GetName()})
		}
		if token = resp.GetNextPageToken(); len(token) == 0 {
			return out, nil
		}
	}
}
