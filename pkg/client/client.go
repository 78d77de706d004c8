// Package client starts and drives agent sessions: start a session, send a
// message, approve or reject a tool call, answer a question, read a
// snapshot or the stored messages, and find the sessions waiting for a
// person across agents.
package client

import (
	"context"
	"errors"
	"fmt"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"

	"github.com/stepwise-run/stepwise/internal/contract"
	"github.com/stepwise-run/stepwise/internal/rollout"
	"github.com/stepwise-run/stepwise/internal/session"
	"github.com/stepwise-run/stepwise/internal/sessionrpc"
	"github.com/stepwise-run/stepwise/internal/tenancy"
)

// ErrInvalidSettings is session settings that are not a JSON object within
// the size limit; nothing was sent.
var ErrInvalidSettings = errors.New("invalid session settings")

// SessionSettings are one session's settings: a JSON object that the next
// turn starts with, such as {"model": "large"}. Snapshots show them: never
// put a secret in them.
type SessionSettings map[string]any

// MaxSessionSettingsBytes is the largest session settings the client
// sends, measured as compact JSON.
const MaxSessionSettingsBytes = contract.MaxSessionSettingsBytes

// Sessions drives the sessions of one Agent.
type Sessions struct {
	c     client.Client
	agent Agent
	// recentPoll is how recently a worker must have polled to count.
	recentPoll time.Duration
	resolved   resolver
}

// New returns a client for the sessions of an Agent.
func New(c client.Client, agent Agent) *Sessions {
	return &Sessions{c: c, agent: agent, recentPoll: recentPoll}
}

// Agent is the Agent whose sessions s drives.
func (s *Sessions) Agent() Agent { return s.agent }

// Start starts a session; a non-blank initial message starts its first turn.
// It reports false when a session with that ID exists or existed: a session
// ID is never reused, and the initial message of a refused start is dropped.
// A retry with the same request ID (WithRequestID) reports true when the
// first call started the session. When no worker runs the start within
// ctx, the error is a *PendingError; see Send.
//
// Session IDs are the Agent's own: another Agent's session of the same ID,
// in this namespace or another, neither stops the start nor is touched.
func (s *Sessions) Start(ctx context.Context, sessionID, initialMessage string, opts ...StartOption) (bool, error) {
	var o startOptions
	for _, opt := range opts {
		opt.applyToStart(&o)
	}
	if err := tenancy.CheckSessionID(sessionID); err != nil {
		return false, fmt.Errorf("starting session: %w: %w", ErrInvalidSessionID, err)
	}
	requestID, err := resolveRequestID(o.requestID)
	if err != nil {
		return false, fmt.Errorf("starting session %s: %w", sessionID, err)
	}
	in := session.StartInput{RequestID: requestID, InitialMessage: initialMessage}
	if o.settings != nil {
		raw, err := contract.CheckedSessionSettings(o.settings)
		if err != nil {
			return false, fmt.Errorf("starting session %s: %w: %w", sessionID, ErrInvalidSettings, err)
		}
		if err := s.requireFeature(ctx, sessionrpc.UpdateStartSession, rollout.FeatureSessionSettings); err != nil {
			return false, err
		}
		in.Settings = raw
	}
	names, err := s.namesForStart(ctx, sessionID)
	if err != nil {
		return false, err
	}
	input := sessionrpc.SessionInput{Start: in, StepSearch: o.stepSearch, Owner: s.owner()}
	if !names.IsShared() {
		input.SessionID = sessionID
	}
	startOpts := client.StartWorkflowOptions{
		ID: names.WorkflowID(sessionID), TaskQueue: names.TaskQueue(),
		WorkflowIDConflictPolicy: enumspb.WORKFLOW_ID_CONFLICT_POLICY_USE_EXISTING,
		WorkflowIDReusePolicy:    enumspb.WORKFLOW_ID_REUSE_POLICY_REJECT_DUPLICATE,
	}
	if owner := s.owner(); owner != nil {
		startOpts.TypedSearchAttributes = sessionrpc.OwnerAttributes(*owner)
	}
	var started bool
	err = sendUntilTaken(ctx, func() error {
		// A start operation runs once: each send needs its own.
		start := s.c.NewWithStartWorkflowOperation(startOpts, s.agent.FlowType, input)
		handle, err := s.c.UpdateWithStartWorkflow(ctx, client.UpdateWithStartWorkflowOptions{
			StartWorkflowOperation: start,
			UpdateOptions: client.UpdateWorkflowOptions{
				UpdateID:   updateID(sessionrpc.UpdateStartSession, requestID),
				UpdateName: sessionrpc.UpdateStartSession, Args: []any{in}, WaitForStage: client.WorkflowUpdateStageCompleted,
			},
		})
		if err != nil {
			return err
		}
		return handle.Get(ctx, &started)
	})
	var exists *serviceerror.WorkflowExecutionAlreadyStarted
	switch {
	case err == nil:
		s.remember(sessionID, sessionRef{workflowID: startOpts.ID, taskQueue: startOpts.TaskQueue})
		return started, nil
	case refused(err), errors.As(err, &exists):
		return false, nil
	default:
		return false, s.failed(ctx, sessionrpc.UpdateStartSession, sessionID, requestID, err)
	}
}

// namesForStart are the names a session starts under: those the Agent's
// status starts sessions under, except that a session the Agent already
// has under the shared names is started there again, so a session ID is
// one session.
func (s *Sessions) namesForStart(ctx context.Context, sessionID string) (tenancy.Names, error) {
	names := s.startNames()
	if names.IsShared() || s.sharedQueue() == "" {
		return names, nil
	}
	existing, err := s.Describe(ctx, sessionID)
	switch {
	case errors.Is(err, ErrSessionNotFound):
		return names, nil
	case err != nil:
		return tenancy.Names{}, err
	case existing.WorkflowID == sessionID:
		return tenancy.Shared(s.agent.FlowType), nil
	}
	return names, nil
}

// Send queues a user message; it starts a turn when none runs. It reports
// false for blank text, and for a plan mode message when plan mode is off.
// While a draft plan exists, every message starts a planning turn that
// revises it.
//
// Like every request, Send reports false only when the session refused the
// request. When the session has not answered by the time ctx ends, the
// error is a *PendingError: the request was sent and takes effect, or is
// refused, when a worker runs it; errors.Is(err, ErrWaitingForWorker) tells
// that no worker polls the Agent's task queue. Send it again with the
// PendingError's request ID to learn the outcome.
func (s *Sessions) Send(ctx context.Context, sessionID, text string, opts ...SendOption) (bool, error) {
	var o sendOptions
	for _, opt := range opts {
		opt.applyToSend(&o)
	}
	req := session.SendRequest{Text: text, PlanMode: o.planMode}
	if len(o.images) > 0 {
		req.Images = make([]session.ImageReference, len(o.images))
		for i, img := range o.images {
			req.Images[i] = session.ImageReference(img)
		}
		if err := session.CheckImages(req.Images); err != nil {
			return false, fmt.Errorf("%w: %w", ErrInvalidImage, err)
		}
		if err := s.requireFeature(ctx, sessionrpc.UpdateSendUserMessage, rollout.FeatureImages); err != nil {
			return false, err
		}
	}
	if o.planMode {
		if err := s.requireFeature(ctx, sessionrpc.UpdateSendUserMessage, rollout.FeaturePlans); err != nil {
			return false, err
		}
	}
	return s.update(ctx, sessionID, sessionrpc.UpdateSendUserMessage, req, o.requestOptions)
}

// ExecutePlan approves a plan revision: the session starts a turn that
// executes it. It reports true only while the session waits for a message,
// the plan has that revision and is draft or active, no execution of it is
// pending, and no message is queued or steered.
func (s *Sessions) ExecutePlan(ctx context.Context, sessionID string, revision int, opts ...RequestOption) (bool, error) {
	return s.gatedUpdate(ctx, sessionID, sessionrpc.UpdateExecutePlan, rollout.FeaturePlans, session.ExecutePlanRequest{Revision: revision}, requestOpts(opts))
}

// Steer steers the running turn with new text: the turn ends at its next
// safe Step boundary (a running model call or started tool runs to its end,
// calls not started are rejected) and the text starts the next turn. While
// no turn runs, the text is queued like Send. It reports false for blank
// text.
func (s *Sessions) Steer(ctx context.Context, sessionID, text string, opts ...RequestOption) (bool, error) {
	return s.gatedUpdate(ctx, sessionID, sessionrpc.UpdateSteerUserMessage, rollout.FeatureSteering, session.SteerRequest{Text: text}, requestOpts(opts))
}

// SteerQueued steers the running turn with a queued message, by the ID the
// snapshot lists. It reports false for a message no longer queued.
func (s *Sessions) SteerQueued(ctx context.Context, sessionID, messageID string, opts ...RequestOption) (bool, error) {
	return s.gatedUpdate(ctx, sessionID, sessionrpc.UpdateSteerUserMessage, rollout.FeatureSteering, session.SteerRequest{MessageID: messageID}, requestOpts(opts))
}

// DeleteQueued deletes a queued message. It reports false for a message no
// longer queued.
func (s *Sessions) DeleteQueued(ctx context.Context, sessionID, messageID string, opts ...RequestOption) (bool, error) {
	return s.gatedUpdate(ctx, sessionID, sessionrpc.UpdateDeleteQueuedMessage, rollout.FeatureSteering, session.DeleteRequest{MessageID: messageID}, requestOpts(opts))
}

// CancelTurn stops the running turn now, with no new turn: a running model
// call is cancelled and its answer dropped, every wait ends, and a started
// tool runs to its end. It reports false when turnID is not the active turn;
// a second cancel of the same turn reports true. The turn may still
// complete first, when its answer committed before the cancel.
func (s *Sessions) CancelTurn(ctx context.Context, sessionID, turnID string, opts ...RequestOption) (bool, error) {
	return s.gatedUpdate(ctx, sessionID, sessionrpc.UpdateCancelTurn, rollout.FeatureSteering, session.CancelRequest{TurnID: turnID}, requestOpts(opts))
}

// Approve approves a pending tool call.
func (s *Sessions) Approve(ctx context.Context, sessionID, interruptID string, opts ...RequestOption) (bool, error) {
	return s.update(ctx, sessionID, sessionrpc.UpdateResolveInterrupt, session.ResolveRequest{InterruptID: interruptID, Approved: true}, requestOpts(opts))
}

// Reject rejects a pending tool call, with a message the model sees, or
// declines a pending question.
func (s *Sessions) Reject(ctx context.Context, sessionID, interruptID, message string, opts ...RequestOption) (bool, error) {
	return s.update(ctx, sessionID, sessionrpc.UpdateResolveInterrupt,
		session.ResolveRequest{InterruptID: interruptID, RejectionMessage: message}, requestOpts(opts))
}

// Answer answers a pending question. It reports false for a blank answer,
// an answer outside the choices, or a question no longer pending.
func (s *Sessions) Answer(ctx context.Context, sessionID, interruptID, answer string, opts ...RequestOption) (bool, error) {
	return s.update(ctx, sessionID, sessionrpc.UpdateAnswerQuestion, session.AnswerRequest{InterruptID: interruptID, Answer: answer}, requestOpts(opts))
}

// UpdateSettings replaces the session settings as a whole; empty settings
// clear them. The next turn starts with them, while a running turn keeps
// its own. It refuses settings beyond MaxSessionSettingsBytes before it
// sends anything, and reports false before the session started.
func (s *Sessions) UpdateSettings(ctx context.Context, sessionID string, settings SessionSettings, opts ...RequestOption) (bool, error) {
	raw, err := contract.CheckedSessionSettings(settings)
	if err != nil {
		return false, fmt.Errorf("%s on session %s: %w: %w", sessionrpc.UpdateSessionSettings, sessionID, ErrInvalidSettings, err)
	}
	return s.gatedUpdate(ctx, sessionID, sessionrpc.UpdateSessionSettings, rollout.FeatureSessionSettings, sessionrpc.SettingsRequest{Settings: raw}, requestOpts(opts))
}

func requestOpts(opts []RequestOption) requestOptions {
	var o requestOptions
	for _, opt := range opts {
		opt.applyToRequest(&o)
	}
	return o
}

// updateID is the engine's ID of a request. The engine answers a request
// sent again under the same ID with the first one's outcome; the request's
// name is part of it, so one request ID on two kinds of request makes two
// requests.
func updateID(name, requestID string) string {
	return name + "/" + requestID
}

// gatedUpdate sends a request that needs a session feature, once the
// feature is in effect.
func (s *Sessions) gatedUpdate(ctx context.Context, sessionID, name string, feature rollout.Feature, arg any, o requestOptions) (bool, error) {
	if err := s.requireFeature(ctx, name, feature); err != nil {
		return false, err
	}
	return s.update(ctx, sessionID, name, arg, o)
}

// update runs an RPC; a refusal is false with no error.
func (s *Sessions) update(ctx context.Context, sessionID, name string, arg any, o requestOptions) (bool, error) {
	requestID, err := resolveRequestID(o.requestID)
	if err != nil {
		return false, fmt.Errorf("%s on session %s: %w", name, sessionID, err)
	}
	workflowID, err := s.workflowID(ctx, sessionID)
	if err != nil {
		return false, fmt.Errorf("%s on session %s: %w", name, sessionID, err)
	}
	var ok bool
	err = sendUntilTaken(ctx, func() error {
		handle, err := s.c.UpdateWorkflow(ctx, client.UpdateWorkflowOptions{
			WorkflowID: workflowID, UpdateID: updateID(name, requestID), UpdateName: name, Args: []any{arg},
			WaitForStage: client.WorkflowUpdateStageCompleted,
		})
		if err != nil {
			return err
		}
		return handle.Get(ctx, &ok)
	})
	if err != nil {
		if refused(err) {
			return false, nil
		}
		return false, s.failed(ctx, name, sessionID, requestID, err)
	}
	return ok, nil
}

func refused(err error) bool {
	var app *temporal.ApplicationError
	return errors.As(err, &app) && app.Type() == sessionrpc.RejectedErrorType
}

// Snapshot reads a session as a UI shows it.
func (s *Sessions) Snapshot(ctx context.Context, sessionID string) (Snapshot, error) {
	var snap session.Snapshot
	if err := s.query(ctx, sessionID, sessionrpc.QuerySnapshot, &snap); err != nil {
		return Snapshot{}, err
	}
	return snapshotView(snap), nil
}

// Messages reads a page of stored messages, oldest first; the limit is
// clamped to 1..200.
func (s *Sessions) Messages(ctx context.Context, sessionID string, req MessagesRequest) (MessagesPage, error) {
	var page session.MessagesPage
	if err := s.query(ctx, sessionID, sessionrpc.QueryListMessages, &page,
		session.ListMessagesRequest{BeforeSequence: req.BeforeSequence, Limit: req.Limit}); err != nil {
		return MessagesPage{}, err
	}
	return messagesPageView(page), nil
}

func (s *Sessions) query(ctx context.Context, sessionID, name string, out any, args ...any) error {
	workflowID, err := s.workflowID(ctx, sessionID)
	if err != nil {
		return fmt.Errorf("%s of session %s: %w", name, sessionID, err)
	}
	resp, err := s.c.QueryWorkflow(ctx, workflowID, "", name, args...)
	if err != nil {
		return fmt.Errorf("%s of session %s: %w", name, sessionID, err)
	}
	return resp.Get(out)
}
