package engine

import (
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/stepwise-run/stepwise/internal/session"
	"github.com/stepwise-run/stepwise/internal/sessionrpc"
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
	// ContinueAsNewThreshold is when a session continues in a new run of its
	// workflow, if Temporal has not suggested it first; zero uses
	// DefaultContinueAsNewThreshold.
	ContinueAsNewThreshold ContinueAsNewThreshold
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
	input sessionrpc.SessionInput
	// activations counts the activations the run began, numbering their
	// roots; replay counts them again in the same order.
	activations int
	// moveWoken is where the move signal found an idle session on the
	// shared task queue must move.
	moveWoken *OwnNames
}

// Run is the session workflow: StartAgentSession, then turns for as long as
// the session lives. A session never completes by itself.
func (f *Flow) Run(ctx workflow.Context, in sessionrpc.SessionInput) error {
	sessionID := in.SessionID
	if sessionID == "" {
		// The shared names: the workflow ID is the session ID.
		sessionID = workflow.GetInfo(ctx).WorkflowExecution.ID
	}
	r := &run{
		ctx: ctx, flow: f, active: make([]int, len(session.Steps())), events: f.Events,
		s:      session.NewState(sessionID),
		search: in.StepSearch != sessionrpc.StepSearchDisabled, input: in, at: map[string]session.StepName{},
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
			return temporal.NewNonRetryableApplicationError(err.Error(), sessionrpc.RejectedErrorType, nil)
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
