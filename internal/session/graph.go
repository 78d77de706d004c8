package session

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	"github.com/stepwise-run/stepwise/internal/version"
)

// FlowGraphSchema names the format of the graph document, so readers can
// refuse one they do not understand. v2 calls the Steps that call a model
// or a tool "call"; v1 called them "effect", the word of a tool's effect
// class, and is otherwise the same.
const FlowGraphSchema = "agents.stepwise.run/session-flow-graph/v2"

// TransitionKind says why the session moves along a transition.
type TransitionKind string

// Transition kinds.
const (
	// TransitionNext is the Step's own outcome.
	TransitionNext TransitionKind = "next"
	// TransitionFailure is taken when a call Step's attempts run out.
	TransitionFailure TransitionKind = "failure"
	// TransitionCancel is taken when cancel_turn stops the Step.
	TransitionCancel TransitionKind = "cancel"
	// TransitionResult publishes a tool call's final record to ResumeTurn.
	TransitionResult TransitionKind = "result"
)

// Transition is one edge of the session Flow graph.
type Transition struct {
	From StepName       `json:"from"`
	To   StepName       `json:"to"`
	Kind TransitionKind `json:"kind"`
	// On says when the session takes the transition.
	On string `json:"on"`
}

// GraphStep is a Step as the graph document shows it.
type GraphStep struct {
	Name             StepName   `json:"name"`
	Kind             StepKind   `json:"kind"`
	Input            StepInput  `json:"input"`
	PerToolCall      bool       `json:"perToolCall,omitempty"`
	Summary          string     `json:"summary"`
	AttemptTimeout   string     `json:"attemptTimeout,omitempty"`
	HeartbeatTimeout string     `json:"heartbeatTimeout,omitempty"`
	MaxAttempts      int        `json:"maxAttempts,omitempty"`
	AttemptsWithin   string     `json:"attemptsWithin,omitempty"`
	FailureRoutes    []StepName `json:"failureRoutes,omitempty"`
	Cancellable      bool       `json:"cancellable,omitempty"`
	WaitsForPerson   bool       `json:"waitsForPerson,omitempty"`
}

// Action is a request an application sends a session.
type Action struct {
	Name string `json:"name"`
	// Kind is "update" for a request that may change the session and answers
	// true or false, "query" for a read.
	Kind    string `json:"kind"`
	Summary string `json:"summary"`
}

// FlowGraph is the session Flow graph of one Flow type: every Step, every
// transition between Steps, and the actions an application can send. Tools
// and UIs draw sessions from it.
type FlowGraph struct {
	Schema        string       `json:"schema"`
	FlowType      string       `json:"flowType"`
	EngineVersion string       `json:"engineVersion"`
	Start         StepName     `json:"start"`
	Steps         []GraphStep  `json:"steps"`
	Transitions   []Transition `json:"transitions"`
	Actions       []Action     `json:"actions"`
}

// Engine versions in which parts of the graph first appeared.
const (
	since010 = "0.1.0"
	// since020 brought compaction, tool tasks, steering and cancel_turn,
	// turn continuation, plans and session settings.
	since020 = "0.2.0"
)

// graphTransition is a transition and the engine version that first took
// it.
type graphTransition struct {
	Transition
	since string
}

// transitions are the moves the engine makes between Steps: along the
// turn's own Steps, and along each tool call's, whose track begins at the
// RunModel that made the call and ends when its result reaches ResumeTurn.
// The engine tests trace every move sessions make and hold them to this
// list, both ways.
var transitions = []graphTransition{
	{Transition{StepStartAgentSession, StepRunModel, TransitionNext, "the start input has a non-blank initial message"}, since010},
	{Transition{StepStartAgentSession, StepAwaitUserMessage, TransitionNext, "no initial message"}, since010},

	{Transition{StepAwaitUserMessage, StepRunModel, TransitionNext, "a queued message, or a plan approval, starts a turn"}, since010},

	{Transition{StepRunModel, StepAwaitUserMessage, TransitionNext, "the model answered and the turn completed"}, since010},
	{Transition{StepRunModel, StepRunModel, TransitionNext, "the turn continues with another model call"}, since020},
	{Transition{StepRunModel, StepApplyTurnControl, TransitionNext, "the turn was steered or cancelled while its model call ran"}, since020},
	{Transition{StepRunModel, StepApplyTurnControl, TransitionCancel, "cancel_turn cancelled the model call; its answer is dropped"}, since020},
	{Transition{StepRunModel, StepCompactContext, TransitionNext, "the estimated input crossed the compaction trigger"}, since020},
	{Transition{StepRunModel, StepResumeTurn, TransitionNext, "the model requested tool calls"}, since010},
	{Transition{StepRunModel, StepAwaitToolApproval, TransitionNext, "per tool call that needs approval"}, since010},
	{Transition{StepRunModel, StepCallTool, TransitionNext, "per read or idempotent_write call"}, since010},
	{Transition{StepRunModel, StepCallSingleAttemptTool, TransitionNext, "per non_idempotent_write or unclassified call"}, since010},
	{Transition{StepRunModel, StepAwaitQuestionAnswer, TransitionNext, "per ask_user call"}, since010},
	{Transition{StepRunModel, StepAwaitTimer, TransitionNext, "per durable_wait call"}, since010},
	{Transition{StepRunModel, StepResumeTurn, TransitionResult, "per call settled in the model call's commit: write_todos, a built-in call with invalid arguments, a call a planning turn rejects, or a write skipped after one that did not succeed"}, since010},
	{Transition{StepRunModel, StepRecordTurnFailure, TransitionFailure, "the model call's attempts ran out"}, since010},
	{Transition{StepRunModel, StepRecordTurnFailure, TransitionNext, "the session's stored messages reached their limit; no model call"}, since020},

	{Transition{StepCompactContext, StepRunModel, TransitionNext, "the summary is stored"}, since020},
	{Transition{StepCompactContext, StepApplyTurnControl, TransitionNext, "the turn was steered while the summary call ran"}, since020},
	{Transition{StepCompactContext, StepApplyTurnControl, TransitionCancel, "cancel_turn cancelled the summary call"}, since020},
	{Transition{StepCompactContext, StepRecordTurnFailure, TransitionFailure, "the summary call's attempts ran out"}, since020},

	{Transition{StepAwaitToolApproval, StepCallTool, TransitionNext, "approved read or idempotent_write call"}, since010},
	{Transition{StepAwaitToolApproval, StepCallSingleAttemptTool, TransitionNext, "approved non_idempotent_write or unclassified call"}, since010},
	{Transition{StepAwaitToolApproval, StepResumeTurn, TransitionResult, "rejected, expired, steered, or cancelled by cancel_turn"}, since010},

	{Transition{StepAwaitQuestionAnswer, StepCallTool, TransitionNext, "a tool's question was resolved"}, since010},
	{Transition{StepAwaitQuestionAnswer, StepCallSingleAttemptTool, TransitionNext, "a tool's question was resolved"}, since010},
	{Transition{StepAwaitQuestionAnswer, StepPollToolTask, TransitionNext, "a task's question was resolved"}, since020},
	{Transition{StepAwaitQuestionAnswer, StepCancelToolTask, TransitionCancel, "cancel_turn abandoned the task that asked"}, since020},
	{Transition{StepAwaitQuestionAnswer, StepResumeTurn, TransitionResult, "an ask_user answer, decline, deadline, steer or cancel_turn"}, since010},

	{Transition{StepAwaitTimer, StepResumeTurn, TransitionResult, "the timer fired, or a steer or cancel_turn ended the wait"}, since010},

	{Transition{StepCallTool, StepAwaitQuestionAnswer, TransitionNext, "the tool asked a question before taking any effect"}, since010},
	{Transition{StepCallTool, StepPollToolTask, TransitionNext, "the tool started a task"}, since020},
	{Transition{StepCallTool, StepResumeTurn, TransitionResult, "the call succeeded, failed, or was steered or cancelled before it started"}, since010},
	{Transition{StepCallTool, StepRecordToolFailure, TransitionFailure, "the call's attempts ran out"}, since010},

	{Transition{StepCallSingleAttemptTool, StepAwaitQuestionAnswer, TransitionNext, "the tool asked a question before taking any effect"}, since010},
	{Transition{StepCallSingleAttemptTool, StepPollToolTask, TransitionNext, "the tool started a task"}, since020},
	{Transition{StepCallSingleAttemptTool, StepResumeTurn, TransitionResult, "the call succeeded, failed, or was steered or cancelled before it started"}, since010},
	{Transition{StepCallSingleAttemptTool, StepRecordToolOutcomeUnknown, TransitionFailure, "the single attempt failed"}, since010},

	{Transition{StepPollToolTask, StepPollToolTask, TransitionNext, "the task is still running"}, since020},
	{Transition{StepPollToolTask, StepAwaitQuestionAnswer, TransitionNext, "the task asked for input"}, since020},
	{Transition{StepPollToolTask, StepResumeTurn, TransitionResult, "the task finished"}, since020},
	{Transition{StepPollToolTask, StepRecordToolFailure, TransitionFailure, "a read or idempotent_write call's poll attempts ran out"}, since020},
	{Transition{StepPollToolTask, StepRecordToolOutcomeUnknown, TransitionFailure, "another call's poll attempts ran out"}, since020},
	{Transition{StepPollToolTask, StepCancelToolTask, TransitionCancel, "cancel_turn abandoned the task; a running poll's result is dropped"}, since020},

	{Transition{StepRecordToolFailure, StepResumeTurn, TransitionResult, "the record is final"}, since010},
	{Transition{StepRecordToolOutcomeUnknown, StepResumeTurn, TransitionResult, "the record is final"}, since010},

	{Transition{StepCancelToolTask, StepResumeTurn, TransitionResult, "the call is recorded outcome_unknown"}, since020},
	{Transition{StepCancelToolTask, StepRecordToolOutcomeUnknown, TransitionFailure, "the cancellation's attempts ran out"}, since020},

	{Transition{StepResumeTurn, StepRunModel, TransitionNext, "every tool call of the response is final"}, since010},
	{Transition{StepResumeTurn, StepApplyTurnControl, TransitionNext, "the turn was steered or cancelled"}, since020},

	{Transition{StepApplyTurnControl, StepRunModel, TransitionNext, "steered messages start the next turn"}, since020},
	{Transition{StepApplyTurnControl, StepAwaitUserMessage, TransitionNext, "no steered messages"}, since020},

	{Transition{StepRecordTurnFailure, StepAwaitUserMessage, TransitionNext, "the turn's error is recorded"}, since010},
}

// graphAction is an action and the engine version that first served it.
type graphAction struct {
	Action
	since string
}

// actions are the requests of the session's client API.
var actions = []graphAction{
	{Action{"start_session", "update", "Starts a session, with an optional first message and settings."}, since010},
	{Action{"send_user_message", "update", "Queues a user message; it starts the next turn."}, since010},
	{Action{"steer_user_message", "update", "Steers the running turn with new text or a queued message."}, since020},
	{Action{"delete_queued_message", "update", "Deletes a message that is still queued."}, since020},
	{Action{"cancel_turn", "update", "Stops the running turn now."}, since020},
	{Action{"resolve_interrupt", "update", "Approves or rejects a tool call, or declines a question."}, since010},
	{Action{"answer_question", "update", "Answers a pending question."}, since010},
	{Action{"execute_plan", "update", "Approves a plan revision and starts executing it."}, since020},
	{Action{"update_session_settings", "update", "Replaces the session settings from the next turn on."}, since020},
	{Action{"get_agent_snapshot", "query", "Reads the session's state, recent messages, interrupts, tool calls, usage and plan."}, since010},
	{Action{"list_agent_messages", "query", "Pages through stored messages, oldest first."}, since010},
}

// Graph returns the session Flow graph that workers of an engine version
// run for a Flow type: the Steps, transitions and actions that version
// has. Every Flow type has the same Steps; the graph names the Flow type
// and the engine version so a reader knows which sessions it draws. An
// engine version this build does not know has no graph.
func Graph(flowType, engineVersion string) (FlowGraph, error) {
	rank, ok := versionRank(engineVersion)
	if !ok {
		return FlowGraph{}, fmt.Errorf("engine version %q is not one this build knows (%s)", engineVersion, strings.Join(version.EngineVersions, ", "))
	}
	has := func(since string) bool {
		r, _ := versionRank(since)
		return r <= rank
	}
	g := FlowGraph{
		Schema:        FlowGraphSchema,
		FlowType:      flowType,
		EngineVersion: engineVersion,
		Start:         StepStartAgentSession,
	}
	for _, t := range transitions {
		if has(t.since) {
			g.Transitions = append(g.Transitions, t.Transition)
		}
	}
	for _, a := range actions {
		if has(a.since) {
			g.Actions = append(g.Actions, a.Action)
		}
	}
	for _, s := range stepSpecs {
		if !has(s.since) {
			continue
		}
		gs := GraphStep{
			Name: s.Name, Kind: s.Kind, Input: s.Input, PerToolCall: s.PerToolCall, Summary: s.Summary,
			FailureRoutes: append([]StepName(nil), s.FailureRoutes...),
			Cancellable:   s.Cancellable, WaitsForPerson: s.WaitsForPerson,
		}
		if s.AttemptTimeout > 0 {
			gs.AttemptTimeout = s.AttemptTimeout.String()
		}
		if s.HeartbeatTimeout > 0 {
			gs.HeartbeatTimeout = s.HeartbeatTimeout.String()
		}
		if s.Retry != nil {
			gs.MaxAttempts = s.Retry.MaxAttempts
			if s.Retry.Within > 0 {
				gs.AttemptsWithin = s.Retry.Within.String()
			}
		}
		g.Steps = append(g.Steps, gs)
	}
	return g, nil
}

// versionRank is an engine version's place among the versions this build
// knows.
func versionRank(engineVersion string) (int, bool) {
	i := slices.Index(version.EngineVersions, engineVersion)
	return i, i >= 0
}

// Document encodes the graph as the JSON document that is published, and its
// digest. The encoding is deterministic, so an unchanged graph has an
// unchanged digest and is never rewritten.
func (g FlowGraph) Document() (doc []byte, digest string, err error) {
	doc, err = json.MarshalIndent(g, "", "  ")
	if err != nil {
		return nil, "", fmt.Errorf("encoding the session Flow graph: %w", err)
	}
	doc = append(doc, '\n')
	return doc, Digest(doc), nil
}

// Digest is the digest of a graph document as published, so a reader can
// tell whether a stored document is the one it expects.
func Digest(doc []byte) string {
	sum := sha256.Sum256(doc)
	return "sha256:" + hex.EncodeToString(sum[:])
}
