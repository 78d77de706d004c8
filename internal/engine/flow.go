package engine

import (
	"errors"
	"fmt"
	"slices"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/stepwise-run/stepwise/internal/session"
	"github.com/stepwise-run/stepwise/internal/tenancy"
	"github.com/stepwise-run/stepwise/internal/tracing"
)

// EventSink receives session events. Workflow code writes only while it is
// not replaying, so events stay off the workflow history and are not
// repeated when a worker rebuilds a session.
type EventSink interface {
	Write(sessionID string, e session.Event)
}

// discardEvents drops every event.
type discardEvents struct{}

func (discardEvents) Write(string, session.Event) {}

// Flow is the session workflow of one Flow type.
type Flow struct {
	// Events receives the session events; nil drops them.
	Events EventSink
	// Timings are the Step limits.
	Timings Timings
	// PlanMode lets messages ask for a planning turn.
	PlanMode bool
	// ImageStoreURI is the location of the agent's media store; empty
	// refuses messages with images.
	ImageStoreURI string
	// HistoryBudget is when a session continues in a new run of its
	// workflow, if Temporal has not suggested it first; zero uses
	// DefaultHistoryBudget.
	HistoryBudget HistoryBudget
	// Trace, when set, is told every move of a session from one Step to the
	// next, so a test can hold what sessions do against the published Flow
	// graph. It is called again when a worker replays a session.
	Trace StepTrace
	// Tracer, when set, derives each activation's trace context and emits
	// its root span; nil stores no trace context.
	Tracer ActivationTracer
	// MoveTo, when set, moves the sessions this Flow runs on the shared
	// task queue of engine 0.7.0 and earlier to the Agent's own names,
	// between turns; nil leaves them there.
	MoveTo *OwnNames
}

// OwnNames are where a session of the shared names moves: the Agent's own
// task queue, and the owner it then records.
type OwnNames struct {
	TaskQueue string        `json:"taskQueue"`
	Owner     tenancy.Owner `json:"owner"`
}

// ActivationTracer derives an activation root's trace context from the
// session alone, so a replaying worker stores the same value, and emits
// the root, which the workflow does only while not replaying.
type ActivationTracer interface {
	RootContext(a tracing.Activation) string
	EmitRoot(a tracing.Activation)
}

// StepTrace is told that a session moved from one Step to the next: along
// the turn's own Steps, or along one tool call's.
type StepTrace func(from, to session.StepName, kind session.TransitionKind)

// Revisions of the workflow code that change the commands a session writes.
// A run records the revision it begins with in a version marker and keeps
// that revision's behaviour to its end, so a history an earlier engine
// version wrote replays unchanged. A new revision is a new engine version.
const (
	revisionChangeID = "stepwise-engine"
	// revisionSearchOncePerTask writes ActiveStepTypes at most once per
	// workflow task, with the value the task ends with (engine 0.4.0).
	// Earlier runs wrote it at every Step change, a transient empty value
	// included.
	revisionSearchOncePerTask workflow.Version = 1
	// revisionControlEndsToolQuestions keeps a steered or cancelled turn
	// from asking the user on a tool's behalf (engine 0.7.0): a question a
	// tool asks once its turn was steered or cancelled rejects the call,
	// which took no effect, and a call whose question was answered before
	// the steer is rejected rather than run again. Earlier runs raised the
	// question, so a cancelled turn could wait for a person, and scheduled
	// the answered call's tool Step again.
	revisionControlEndsToolQuestions workflow.Version = 2
	// revisionTenantNames records the session's owner in its search
	// attributes, from the start input, when the run does not carry them
	// (engine 0.8.0): a session that moved from the shared names to its
	// Agent's own gets them in its first run there.
	revisionTenantNames workflow.Version = 3
	currentRevision                      = revisionTenantNames

	// moveChangeID starts the change ID of the version marker that records
	// a run on the shared task queue deciding to move the session to its
	// Agent's own names (engine 0.8.0); a history written before has none
	// and replays as it ran.
	moveChangeID = "stepwise-own-names"
	// moveTargetID names the side effect that records where the session
	// moves, which the worker's configuration says.
	moveTargetID = "stepwise-own-names-target"
)

// HistoryBudget bounds one workflow run of a session. A session that
// reaches it continues as new between Steps, carrying its state, well
// before Temporal's own limits (51,200 events or 50 MB per run).
type HistoryBudget struct {
	Events int
	Bytes  int
}

// DefaultHistoryBudget leaves ample room under Temporal's limits.
var DefaultHistoryBudget = HistoryBudget{Events: 10_000, Bytes: 10 << 20}

// run is one session workflow run: its state and the Steps it is in.
type run struct {
	ctx     workflow.Context
	flow    *Flow
	events  EventSink
	s       *session.State
	stepSeq int
	// revision is the workflow code revision this run keeps.
	revision workflow.Version
	// active counts the executions of each Step the session is in, by the
	// Step's position in the Flow graph; shown is what the search
	// attribute holds.
	active []int
	shown  []string
	// activeChanges counts changes to active, so the search attribute is
	// written only once the workflow task's coroutines have settled.
	activeChanges int
	searchStale   bool
	// search is false when the session was started without the
	// active-Step search.
	search bool
	// at is the Step each track of the session is in: the turn's own
	// Steps under turnTrack, and each tool call's under its ID.
	at map[string]session.StepName
	// cancelModel cancels the running RunModel Step, for cancel_turn.
	cancelModel workflow.CancelFunc
	// input started the run; a new run gets it again, with the state.
	input SessionInput
	// activations counts the activations the run began, numbering their
	// roots; replay counts them again in the same order.
	activations int
	// moveWoken is where the move signal found an idle session on the
	// shared task queue must move.
	moveWoken *OwnNames
}

// Run is the session workflow: StartAgentSession, then turns for as long as
// the session lives. A session never completes by itself.
func (f *Flow) Run(ctx workflow.Context, in SessionInput) error {
	sessionID := in.SessionID
	if sessionID == "" {
		// The shared names: the workflow ID is the session ID.
		sessionID = workflow.GetInfo(ctx).WorkflowExecution.ID
	}
	r := &run{
		ctx: ctx, flow: f, active: make([]int, len(session.Steps())), events: f.Events,
		s:      session.NewState(sessionID),
		search: in.StepSearch != StepSearchDisabled, input: in, at: map[string]session.StepName{},
		revision: workflow.GetVersion(ctx, revisionChangeID, workflow.DefaultVersion, currentRevision),
	}
	if in.Carried != nil {
		// A new run of a session that continued as new.
		r.s, r.stepSeq = in.Carried.State, in.Carried.StepSeq
		r.input.Carried = nil
	}
	r.s.PlanModeEnabled = f.PlanMode
	r.s.ImageStoreURI = f.ImageStoreURI
	if r.events == nil {
		r.events = discardEvents{}
	}
	if err := r.register(); err != nil {
		return err
	}
	if r.revision >= revisionTenantNames {
		r.recordOwner()
	}
	if r.search && r.revision >= revisionSearchOncePerTask {
		workflow.Go(ctx, r.keepSearchCurrent)
	}
	if in.Carried == nil {
		r.move(turnTrack, session.StepStartAgentSession, session.TransitionNext)
		if err := session.CheckStartSettings(in.Start.Settings); err != nil {
			// The session never initializes, so a retry could not fix it.
			return temporal.NewNonRetryableApplicationError(err.Error(), RejectedErrorType, nil)
		}
		if events := r.s.Start(in.Start); len(events) > 0 {
			stepID := waitStepID(session.StepStartAgentSession, r.s.Turn.ID, "")
			r.emit(stepID, events)
			r.activateTurn(session.StepStartAgentSession, stepID)
		}
	}
	for {
		if r.s.Turn == nil {
			if target := r.moveTarget(); target != nil {
				// Between turns, nothing of a turn is left to replay:
				// the session leaves the shared names for its Agent's own.
				return r.moveToOwnNames(target)
			}
			r.move(turnTrack, session.StepAwaitUserMessage, session.TransitionNext)
			r.enter(session.StepAwaitUserMessage)
			err := workflow.Await(ctx, func() bool {
				return r.s.CanBeginTurn() || r.runIsFull() || r.versionMoved() || r.moveWoken != nil
			})
			r.leave(session.StepAwaitUserMessage)
			if err != nil {
				return err
			}
			if target := r.moveWoken; target != nil {
				return r.moveToOwnNames(target)
			}
			if r.versionMoved() {
				// Between turns is the one place a session may change
				// worker version: nothing of a turn is left to replay.
				return r.continueAsNew(workflow.ContinueAsNewVersioningBehaviorAutoUpgrade)
			}
			if !r.s.CanBeginTurn() {
				return r.continueAsNew(workflow.ContinueAsNewVersioningBehaviorUnspecified)
			}
			events := r.s.BeginTurn()
			stepID := waitStepID(session.StepAwaitUserMessage, r.s.Turn.ID, "")
			r.emit(stepID, events)
			r.activateTurn(session.StepAwaitUserMessage, stepID)
		}
		if err := r.runTurn(); err != nil {
			return err
		}
	}
}

// recordOwner writes the owner search attributes the run's input names when
// the run does not carry them already: a client sets them when it starts a
// session, and a session that moved from the shared names gets them here.
func (r *run) recordOwner() {
	owner := r.input.Owner
	if owner == nil {
		return
	}
	if recorded, ok := RecordedOwner(workflow.GetTypedSearchAttributes(r.ctx)); ok && recorded == *owner {
		return
	}
	// A failed upsert is logged by the SDK; clients then find the session
	// by its workflow ID and task queue alone.
	_ = workflow.UpsertTypedSearchAttributes(r.ctx, ownerUpdates(*owner)...)
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
	in.Carried = &CarriedState{State: r.s, StepSeq: r.stepSeq}
	in.SessionID = r.s.SessionID
	owner := target.Owner
	in.Owner = &owner
	ctx := workflow.WithWorkflowTaskQueue(r.ctx, target.TaskQueue)
	return workflow.NewContinueAsNewErrorWithOptions(ctx,
		workflow.ContinueAsNewErrorOptions{InitialVersioningBehavior: workflow.ContinueAsNewVersioningBehaviorAutoUpgrade},
		workflow.GetInfo(r.ctx).WorkflowType.Name, in)
}

// runIsFull reports whether the run should end in a new one: Temporal
// suggests it, or the history reached the Flow's budget.
func (r *run) runIsFull() bool {
	info := workflow.GetInfo(r.ctx)
	budget := r.flow.HistoryBudget
	if budget == (HistoryBudget{}) {
		budget = DefaultHistoryBudget
	}
	return info.GetContinueAsNewSuggested() || info.GetCurrentHistoryLength() >= budget.Events ||
		info.GetCurrentHistorySize() >= budget.Bytes
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
	in.Carried = &CarriedState{State: r.s, StepSeq: r.stepSeq}
	name := workflow.GetInfo(r.ctx).WorkflowType.Name
	if versioning == workflow.ContinueAsNewVersioningBehaviorUnspecified {
		return workflow.NewContinueAsNewError(r.ctx, name, in)
	}
	return workflow.NewContinueAsNewErrorWithOptions(r.ctx,
		workflow.ContinueAsNewErrorOptions{InitialVersioningBehavior: versioning}, name, in)
}

// register installs the RPC handlers before the workflow first blocks, so
// an update delivered with the start is handled.
func (r *run) register() error {
	s := r.s
	// The move signal only wakes the session: the move itself is decided
	// from what Temporal records, so receiving is all it takes.
	moves := workflow.GetSignalChannel(r.ctx, SignalMoveToCurrentVersion)
	workflow.Go(r.ctx, func(ctx workflow.Context) {
		for moves.Receive(ctx, nil) {
			// An idle session on the shared task queue moves to its
			// Agent's own names when woken, as a pinned one moves version.
			if r.s.Turn == nil && r.moveWoken == nil {
				r.moveWoken = r.moveTarget()
			}
		}
	})
	if err := workflow.SetQueryHandler(r.ctx, QuerySnapshot, func() (session.Snapshot, error) {
		return s.Snapshot(), nil
	}); err != nil {
		return err
	}
	if err := workflow.SetQueryHandler(r.ctx, QueryListMessages, func(req session.ListMessagesRequest) (session.MessagesPage, error) {
		return s.ListMessages(req), nil
	}); err != nil {
		return err
	}
	if err := workflow.SetQueryHandler(r.ctx, queryTurnContext, func(turnID string) (session.TurnContext, error) {
		return s.TurnContext(turnID)
	}); err != nil {
		return err
	}
	if err := workflow.SetQueryHandler(r.ctx, queryToolCallControl, func(req ToolCallControlRequest) (string, error) {
		return s.ToolCallControl(req.TurnID, req.ToolCallID), nil
	}); err != nil {
		return err
	}
	handlers := []struct {
		name      string
		handler   any
		validator any
	}{
		{UpdateStartSession,
			func(ctx workflow.Context, in session.StartInput) (bool, error) {
				if err := workflow.Await(ctx, func() bool { return s.Started }); err != nil {
					return false, err
				}
				return s.StartRequestID == in.RequestID, nil
			},
			func(ctx workflow.Context, in session.StartInput) error {
				if s.Started && s.StartRequestID != in.RequestID {
					return temporal.NewNonRetryableApplicationError("the session was started by another start_session call", RejectedErrorType, nil)
				}
				if err := session.CheckStartSettings(in.Settings); err != nil {
					return temporal.NewNonRetryableApplicationError(err.Error(), RejectedErrorType, nil)
				}
				return nil
			}},
		{UpdateSendUserMessage,
			answerOnce(s, func(ctx workflow.Context, req SendRequest) (bool, error) {
				if _, err := s.Send(req); err != nil {
					return false, rejected(err)
				}
				return true, nil
			}),
			validateOnce(s, func(ctx workflow.Context, req SendRequest) error { return rejected(s.CheckSend(req)) })},
		{UpdateExecutePlan,
			answerOnce(s, func(ctx workflow.Context, req session.ExecutePlanRequest) (bool, error) {
				if err := s.ExecutePlan(req); err != nil {
					return false, rejected(err)
				}
				return true, nil
			}),
			validateOnce(s, func(ctx workflow.Context, req session.ExecutePlanRequest) error {
				return rejected(s.CheckExecutePlan(req))
			})},
		{UpdateResolveInterrupt,
			answerOnce(s, func(ctx workflow.Context, req session.ResolveRequest) (bool, error) {
				// A decline ends a question's wait, not an approval's.
				in, _ := s.Interrupt(req.InterruptID)
				step := session.StepAwaitToolApproval
				if in.Kind == session.InterruptQuestion {
					step = session.StepAwaitQuestionAnswer
				}
				events, err := s.Resolve(req, workflow.Now(ctx))
				if err != nil {
					return false, rejected(err)
				}
				stepID := waitStepID(step, in.TurnID, in.ToolCallID)
				r.emit(stepID, events)
				a := tracing.Activation{Trigger: tracing.TriggerInterruptResolution, InterruptID: in.ID}
				if in.Kind == session.InterruptApproval {
					a.Approved = &req.Approved
				}
				r.activate(a, step, stepID, in.ToolCallID)
				return true, nil
			}),
			validateOnce(s, func(ctx workflow.Context, req session.ResolveRequest) error {
				return rejected(s.CheckResolve(req, workflow.Now(ctx)))
			})},
		{UpdateAnswerQuestion,
			answerOnce(s, func(ctx workflow.Context, req session.AnswerRequest) (bool, error) {
				in, _ := s.Interrupt(req.InterruptID)
				events, err := s.Answer(req, workflow.Now(ctx))
				if err != nil {
					return false, rejected(err)
				}
				stepID := waitStepID(session.StepAwaitQuestionAnswer, in.TurnID, in.ToolCallID)
				r.emit(stepID, events)
				r.activate(tracing.Activation{Trigger: tracing.TriggerInterruptResolution, InterruptID: in.ID},
					session.StepAwaitQuestionAnswer, stepID, in.ToolCallID)
				return true, nil
			}),
			validateOnce(s, func(ctx workflow.Context, req session.AnswerRequest) error {
				return rejected(s.CheckAnswer(req, workflow.Now(ctx)))
			})},
		{UpdateSteerUserMessage,
			answerOnce(s, func(ctx workflow.Context, req session.SteerRequest) (bool, error) {
				turnID := r.activeTurnID()
				events, err := s.Steer(req, workflow.Now(ctx))
				if err != nil {
					return false, rejected(err)
				}
				r.emit(rpcStepID(UpdateSteerUserMessage, turnID), events)
				return true, nil
			}),
			validateOnce(s, func(ctx workflow.Context, req session.SteerRequest) error { return rejected(s.CheckSteer(req)) })},
		{UpdateDeleteQueuedMessage,
			answerOnce(s, func(ctx workflow.Context, req session.DeleteRequest) (bool, error) {
				if err := s.DeleteQueued(req); err != nil {
					return false, rejected(err)
				}
				return true, nil
			}),
			validateOnce(s, func(ctx workflow.Context, req session.DeleteRequest) error { return rejected(s.CheckDelete(req)) })},
		{UpdateCancelTurn,
			answerOnce(s, func(ctx workflow.Context, req session.CancelRequest) (bool, error) {
				events, err := s.CancelTurn(req, workflow.Now(ctx))
				if err != nil {
					return false, rejected(err)
				}
				if r.cancelModel != nil {
					// The model call's answer is dropped.
					r.cancelModel()
				}
				r.emit(rpcStepID(UpdateCancelTurn, req.TurnID), events)
				return true, nil
			}),
			validateOnce(s, func(ctx workflow.Context, req session.CancelRequest) error { return rejected(s.CheckCancel(req)) })},
		{UpdateSessionSettings,
			answerOnce(s, func(ctx workflow.Context, req SettingsRequest) (bool, error) {
				if err := s.UpdateSettings(req.Settings); err != nil {
					return false, rejected(err)
				}
				return true, nil
			}),
			validateOnce(s, func(ctx workflow.Context, req SettingsRequest) error {
				return rejected(s.CheckSettingsUpdate(req.Settings))
			})},
	}
	for _, h := range handlers {
		opts := workflow.UpdateHandlerOptions{Validator: h.validator}
		if err := workflow.SetUpdateHandlerWithOptions(r.ctx, h.name, h.handler, opts); err != nil {
			return fmt.Errorf("registering %s: %w", h.name, err)
		}
	}
	return nil
}

// answerOnce makes an update handler answer a request the session already
// accepted with true again, changing nothing, and remember the requests it
// accepts. A request's ID is its update ID, which the client derives from
// the caller's request ID; the engine deduplicates update IDs within one
// run, and the session's own record carries them into the next.
func answerOnce[T any](s *session.State, handle func(workflow.Context, T) (bool, error)) func(workflow.Context, T) (bool, error) {
	return func(ctx workflow.Context, req T) (bool, error) {
		id := requestID(ctx)
		if s.Accepted(id) {
			return true, nil
		}
		ok, err := handle(ctx, req)
		if ok && err == nil {
			s.RecordAccepted(id)
		}
		return ok, err
	}
}

// validateOnce lets a request the session already accepted through to its
// handler, which answers it as it did the first time.
func validateOnce[T any](s *session.State, validate func(workflow.Context, T) error) func(workflow.Context, T) error {
	return func(ctx workflow.Context, req T) error {
		if s.Accepted(requestID(ctx)) {
			return nil
		}
		return validate(ctx, req)
	}
}

// requestID is the ID of the update being handled.
func requestID(ctx workflow.Context) string {
	if info := workflow.GetCurrentUpdateInfo(ctx); info != nil {
		return info.ID
	}
	return ""
}

// runTurn runs the active turn to its end: model calls, and the tool calls
// each one requests, until an answer completes it, a failure ends it, or a
// steer or cancel_turn ends it at ApplyTurnControl.
func (r *run) runTurn() error {
	for r.s.Turn != nil {
		turn := r.s.Turn
		if r.runIsFull() {
			// Between Steps: every tool call of the turn is final.
			// A turn ends on the worker version it began on.
			return r.continueAsNew(workflow.ContinueAsNewVersioningBehaviorUnspecified)
		}
		if r.s.TurnControlRequested() {
			// Steered or cancelled: no further model call.
			r.applyTurnControl(session.TransitionNext)
			return nil
		}
		if r.s.Status == session.StatusCompactingContext {
			if err := r.compact(); err != nil {
				return err
			}
			continue
		}
		stepID := r.nextStepID(session.StepRunModel, turn.ID)
		r.move(turnTrack, session.StepRunModel, session.TransitionNext)
		if r.s.StorageFull() {
			// No model call: the session could not carry more.
			r.move(turnTrack, session.StepRecordTurnFailure, session.TransitionNext)
			r.emit(stepID, r.s.FailTurn(r.s.StorageFullError()))
			return nil
		}
		var out session.ModelOutcome
		err := r.modelStep(session.StepRunModel, stepID, turn.ID, &out)
		if r.s.ModelCallCancelled() {
			// cancel_turn while the model call ran: its answer is dropped.
			r.applyTurnControl(session.TransitionCancel)
			return nil
		}
		if err != nil {
			if temporal.IsCanceledError(err) {
				return err
			}
			r.move(turnTrack, session.StepRecordTurnFailure, session.TransitionFailure)
			r.emit(stepID, r.s.FailTurn(failureDetail(err)))
			return nil
		}
		records, events := r.s.ApplyModelOutcome(out, workflow.Now(r.ctx))
		for i := range events {
			events[i].Attempt = out.Attempt
		}
		r.emit(stepID, events)
		if r.s.Turn == nil {
			return nil
		}
		if out.Kind == session.OutcomeTurnContinued || out.Kind == session.OutcomeCompactionNeeded {
			// The next Step of the turn: another model call, or
			// CompactContext before it.
			continue
		}
		for _, rec := range records {
			id := rec.ID
			// Each call's own track begins at the RunModel that made it.
			r.at[id] = session.StepRunModel
			workflow.Go(r.ctx, func(ctx workflow.Context) { r.runToolCall(ctx, id) })
		}
		r.move(turnTrack, session.StepResumeTurn, session.TransitionNext)
		r.enter(session.StepResumeTurn)
		err = workflow.Await(r.ctx, r.s.ToolCallsFinal)
		r.leave(session.StepResumeTurn)
		if err != nil {
			return err
		}
		if r.s.TurnControlRequested() {
			r.applyTurnControl(session.TransitionNext)
			return nil
		}
		r.s.ResumeTurn()
	}
	return nil
}

// modelStep runs RunModel or CompactContext with RunModel's limits, where
// cancel_turn can cancel it.
func (r *run) modelStep(step session.StepName, stepID, turnID string, out any) error {
	r.enter(step)
	defer r.leave(step)
	ctx, cancel := workflow.WithCancel(r.modelOptions(stepID))
	r.cancelModel = cancel
	defer func() { r.cancelModel = nil }()
	return workflow.ExecuteActivity(ctx, string(step), RunModelInput{TurnID: turnID}).Get(r.ctx, out)
}

// compact is CompactContext: one summary call with RunModel's limits; a
// failure fails the turn, and cancel_turn drops the summary.
func (r *run) compact() error {
	turn := r.s.Turn
	stepID := r.nextStepID(session.StepCompactContext, turn.ID)
	var out session.CompactionOutcome
	r.move(turnTrack, session.StepCompactContext, session.TransitionNext)
	err := r.modelStep(session.StepCompactContext, stepID, turn.ID, &out)
	switch {
	case r.s.ModelCallCancelled():
		r.applyTurnControl(session.TransitionCancel)
	case err != nil && temporal.IsCanceledError(err):
		return err
	case err != nil:
		r.move(turnTrack, session.StepRecordTurnFailure, session.TransitionFailure)
		r.emit(stepID, r.s.FailTurn(failureDetail(err)))
	default:
		events := r.s.ApplySummary(out, workflow.Now(r.ctx))
		for i := range events {
			events[i].Attempt = out.Attempt
		}
		r.emit(stepID, events)
	}
	return nil
}

// applyTurnControl is ApplyTurnControl: it ends a steered or cancelled
// turn, and starts the next one with the steered messages. kind says how
// the session came here: a cancelled model call, or a request found
// between Steps.
func (r *run) applyTurnControl(kind session.TransitionKind) {
	r.move(turnTrack, session.StepApplyTurnControl, kind)
	turnID := r.activeTurnID()
	events := r.s.ApplyTurnControl()
	stepID := waitStepID(session.StepApplyTurnControl, turnID, "")
	r.emit(stepID, events)
	if next := r.activeTurnID(); next != "" && next != turnID {
		// The steered messages started the next turn.
		r.activateTurn(session.StepApplyTurnControl, stepID)
	}
}

func (r *run) activeTurnID() string {
	if r.s.Turn == nil {
		return ""
	}
	return r.s.Turn.ID
}

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
		r.emit(stepID, r.s.RequestToolInput(rec.ID, *out.Question, out.Continuation, workflow.Now(ctx)))
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
			r.emit(stepID, r.s.RequestToolInput(rec.ID, *out.Question, out.Continuation, workflow.Now(ctx)))
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

func (r *run) modelOptions(stepID string) workflow.Context {
	t := r.flow.Timings
	return workflow.WithActivityOptions(r.ctx, workflow.ActivityOptions{
		ActivityID:             stepID,
		StartToCloseTimeout:    t.ModelAttempt,
		ScheduleToCloseTimeout: t.ModelWithin,
		HeartbeatTimeout:       t.Heartbeat,
		RetryPolicy: &temporal.RetryPolicy{
			InitialInterval: t.RetryInterval, BackoffCoefficient: 2, MaximumAttempts: t.ModelAttempts,
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

// nextStepID names one Step execution; all its attempts share the ID, which
// events carry so a UI keeps only the newest attempt's text.
func (r *run) nextStepID(step session.StepName, subject string) string {
	r.stepSeq++
	return fmt.Sprintf("%s/%s/%d", step, subject, r.stepSeq)
}

// rpcStepID names the events an RPC writes when it settles a turn's calls.
func rpcStepID(rpc, turnID string) string {
	return rpc + "/" + turnID
}

// waitStepID names the execution of a Step that runs in workflow code: the
// Step, the turn, and the tool call it waits for. The RPC that ends a wait
// and the wait's own timer write their events under the same ID.
func waitStepID(step session.StepName, turnID, toolCallID string) string {
	id := string(step) + "/" + turnID
	if toolCallID != "" {
		id += "/" + toolCallID
	}
	return id
}

// activateTurn begins the activation of a turn that just started: with
// its user message, or with an approved plan.
func (r *run) activateTurn(step session.StepName, stepID string) {
	key, text := r.s.TurnInput()
	a := tracing.Activation{Trigger: tracing.TriggerUserMessage, UserMessageKey: key, Input: text}
	if r.s.Turn.Mode == session.ModeExecuting {
		a = tracing.Activation{Trigger: tracing.TriggerPlanExecution, UserMessageKey: key}
	}
	r.activate(a, step, stepID, "")
}

// activate begins an activation in the Step that consumed its input: it
// numbers it, stores its root's trace context in the Step's commit, and
// emits the root unless the workflow is replaying it. toolCallID names the
// call whose interrupt it resolved.
func (r *run) activate(a tracing.Activation, step session.StepName, stepID, toolCallID string) {
	info := workflow.GetInfo(r.ctx)
	r.activations++
	a.Number = r.activations
	a.Step = tracing.StepAttempt{
		SessionID: r.s.SessionID, RunID: info.WorkflowExecution.RunID, StepType: string(step),
		StepExecutionID: stepID, Attempt: 1, TurnID: r.activeTurnID(),
	}
	a.Start = workflow.Now(r.ctx)
	traceparent := ""
	if r.flow.Tracer != nil {
		traceparent = r.flow.Tracer.RootContext(a)
	}
	a.Previous = r.s.TraceActivation(traceparent, toolCallID)
	if traceparent != "" && !workflow.IsReplaying(r.ctx) {
		r.flow.Tracer.EmitRoot(a)
	}
}

// emit writes events unless the workflow is replaying them.
func (r *run) emit(stepID string, events []session.Event) {
	if workflow.IsReplaying(r.ctx) {
		return
	}
	for _, e := range events {
		if e.StepExecutionID == "" {
			e.StepExecutionID = stepID
		}
		if e.Attempt == 0 {
			e.Attempt = 1
		}
		r.events.Write(r.s.SessionID, e)
	}
}

// turnTrack is the track of the turn's own Steps, beside one track per
// tool call.
const turnTrack = ""

// move records that a track of the session moved to a Step, for the Flow's
// trace. It writes nothing to the history.
func (r *run) move(track string, to session.StepName, kind session.TransitionKind) {
	from, ok := r.at[track]
	r.at[track] = to
	if ok && r.flow.Trace != nil {
		r.flow.Trace(from, to, kind)
	}
}

// enter and leave keep the active-Step search attribute current.
func (r *run) enter(step session.StepName) {
	r.active[stepIndex(step)]++
	r.activeChanged()
}

func (r *run) leave(step session.StepName) {
	if i := stepIndex(step); r.active[i] > 0 {
		r.active[i]--
	}
	r.activeChanged()
}

// activeChanged writes the search attribute at once in runs of the first
// revision; later runs leave it to keepSearchCurrent.
func (r *run) activeChanged() {
	r.activeChanges++
	r.searchStale = true
	if r.revision < revisionSearchOncePerTask {
		r.showActive()
	}
}

// keepSearchCurrent writes the active-Step search attribute at most once
// per workflow task. After a change it lets the workflow's coroutines run
// until a whole pass of them changes nothing more, so the value it writes
// is the one the task ends with, never a transient one between two Steps.
func (r *run) keepSearchCurrent(ctx workflow.Context) {
	for {
		if err := workflow.Await(ctx, func() bool { return r.searchStale }); err != nil {
			return
		}
		for {
			seen := r.activeChanges
			if err := awaitNextPass(ctx); err != nil {
				return
			}
			if r.activeChanges == seen {
				break
			}
		}
		r.showActive()
	}
}

// awaitNextPass returns once every other coroutine of the workflow has had
// its turn to run.
func awaitNextPass(ctx workflow.Context) error {
	resumed := false
	return workflow.Await(ctx, func() bool {
		done := resumed
		resumed = true
		return done
	})
}

// showActive writes the Steps the session is in, when they differ from
// what the search attribute holds.
func (r *run) showActive() {
	r.searchStale = false
	var steps []string
	for i, spec := range session.Steps() {
		if r.active[i] > 0 {
			steps = append(steps, string(spec.Name))
		}
	}
	slices.Sort(steps)
	if steps == nil {
		steps = []string{}
	}
	if !r.search || slices.Equal(steps, r.shown) {
		return
	}
	r.shown = steps
	// An upsert that fails is logged by the SDK; the search is a view, and a
	// session never stops for it.
	_ = workflow.UpsertTypedSearchAttributes(r.ctx, activeStepsKey.ValueSet(steps))
}

// stepIndex is a Step's position in the Flow graph.
func stepIndex(step session.StepName) int {
	for i, spec := range session.Steps() {
		if spec.Name == step {
			return i
		}
	}
	panic(fmt.Sprintf("unknown Step %s", step))
}

// wholeSeconds rounds a wait up to whole seconds, as the engine's timers
// for deadlines and durable waits run.
func wholeSeconds(d time.Duration) time.Duration {
	if d <= 0 {
		return 0
	}
	return (d + time.Second - 1).Truncate(time.Second)
}

// stepStarted reports whether any attempt of a failed effect Step reached a
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
