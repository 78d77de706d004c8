package session

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
)

// FlowGraphSchema names the format of the graph document, so readers can
// refuse one they do not understand.
const FlowGraphSchema = "agents.stepwise.run/session-flow-graph/v1"

// TransitionKind says why the session moves along a transition.
type TransitionKind string

// Transition kinds.
const (
	// TransitionNext is the Step's own outcome.
	TransitionNext TransitionKind = "next"
	// TransitionFailure is taken when an effect Step's attempts run out.
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

// transitions follows the seed's Flow shape, Step by Step.
var transitions = []Transition{
	{StepStartAgentSession, StepRunModel, TransitionNext, "the start input has a non-blank initial message"},
	{StepStartAgentSession, StepAwaitUserMessage, TransitionNext, "no initial message"},

	{StepAwaitUserMessage, StepRunModel, TransitionNext, "a queued message or a plan approval starts a turn"},
	{StepAwaitUserMessage, StepApplyTurnControl, TransitionNext, "a steer arrives while no turn is active"},
	{StepAwaitUserMessage, StepAwaitUserMessage, TransitionNext, "a stale plan approval"},

	{StepRunModel, StepAwaitUserMessage, TransitionNext, "the model answered and the turn completed"},
	{StepRunModel, StepRunModel, TransitionNext, "the turn continues with another model call"},
	{StepRunModel, StepApplyTurnControl, TransitionNext, "the turn was steered or cancelled"},
	{StepRunModel, StepCompactContext, TransitionNext, "the estimated input crossed the compaction trigger"},
	{StepRunModel, StepAwaitToolApproval, TransitionNext, "per tool call that needs approval"},
	{StepRunModel, StepCallTool, TransitionNext, "per read or idempotent_write call"},
	{StepRunModel, StepCallSingleAttemptTool, TransitionNext, "per non_idempotent_write or unclassified call"},
	{StepRunModel, StepAwaitQuestionAnswer, TransitionNext, "per ask_user call"},
	{StepRunModel, StepAwaitTimer, TransitionNext, "per durable_wait call"},
	{StepRunModel, StepResumeTurn, TransitionNext, "the model requested tool calls"},
	{StepRunModel, StepRecordTurnFailure, TransitionFailure, "the model call's attempts ran out"},
	{StepRunModel, StepFinishTurnCancellation, TransitionCancel, "cancel_turn"},

	{StepCompactContext, StepRunModel, TransitionNext, "the summary is stored"},
	{StepCompactContext, StepRecordTurnFailure, TransitionFailure, "the summary call's attempts ran out"},
	{StepCompactContext, StepFinishTurnCancellation, TransitionCancel, "cancel_turn"},

	{StepAwaitToolApproval, StepCallTool, TransitionNext, "approved read or idempotent_write call"},
	{StepAwaitToolApproval, StepCallSingleAttemptTool, TransitionNext, "approved non_idempotent_write or unclassified call"},
	{StepAwaitToolApproval, StepResumeTurn, TransitionResult, "rejected, expired, or cancelled by a steer"},
	{StepAwaitToolApproval, StepFinishTurnCancellation, TransitionCancel, "cancel_turn"},

	{StepAwaitQuestionAnswer, StepCallTool, TransitionNext, "a tool's question was answered"},
	{StepAwaitQuestionAnswer, StepCallSingleAttemptTool, TransitionNext, "a tool's question was answered"},
	{StepAwaitQuestionAnswer, StepPollToolTask, TransitionNext, "a task's question was resolved"},
	{StepAwaitQuestionAnswer, StepAwaitQuestionAnswer, TransitionNext, "a tool's question is not raised yet"},
	{StepAwaitQuestionAnswer, StepResumeTurn, TransitionResult, "an ask_user answer, decline, deadline, or steer"},
	{StepAwaitQuestionAnswer, StepFinishTurnCancellation, TransitionCancel, "cancel_turn"},

	{StepAwaitTimer, StepResumeTurn, TransitionResult, "the timer fired, or a steer cancelled the wait"},
	{StepAwaitTimer, StepFinishTurnCancellation, TransitionCancel, "cancel_turn"},

	{StepCallTool, StepAwaitQuestionAnswer, TransitionNext, "the tool asked a question before taking any effect"},
	{StepCallTool, StepPollToolTask, TransitionNext, "the tool started a task"},
	{StepCallTool, StepResumeTurn, TransitionResult, "the call succeeded, failed, or was cancelled before it started"},
	{StepCallTool, StepRecordToolFailure, TransitionFailure, "the call's attempts ran out"},

	{StepCallSingleAttemptTool, StepAwaitQuestionAnswer, TransitionNext, "the tool asked a question before taking any effect"},
	{StepCallSingleAttemptTool, StepPollToolTask, TransitionNext, "the tool started a task"},
	{StepCallSingleAttemptTool, StepResumeTurn, TransitionResult, "the call succeeded, failed, or was cancelled before it started"},
	{StepCallSingleAttemptTool, StepRecordToolOutcomeUnknown, TransitionFailure, "the single attempt failed"},

	{StepPollToolTask, StepPollToolTask, TransitionNext, "the task is still pending"},
	{StepPollToolTask, StepAwaitQuestionAnswer, TransitionNext, "the task asked for input"},
	{StepPollToolTask, StepResumeTurn, TransitionResult, "the task finished"},
	{StepPollToolTask, StepRecordToolFailure, TransitionFailure, "a read or idempotent_write call's poll attempts ran out"},
	{StepPollToolTask, StepRecordToolOutcomeUnknown, TransitionFailure, "another call's poll attempts ran out"},
	{StepPollToolTask, StepFinishTurnCancellation, TransitionCancel, "cancel_turn"},

	{StepRecordToolFailure, StepResumeTurn, TransitionResult, "the record is final"},
	{StepRecordToolOutcomeUnknown, StepResumeTurn, TransitionResult, "the record is final"},

	{StepResumeTurn, StepRunModel, TransitionNext, "every tool call published its result"},
	{StepResumeTurn, StepApplyTurnControl, TransitionNext, "the turn was steered or cancelled"},
	{StepResumeTurn, StepResumeTurn, TransitionNext, "a steer woke the turn's waits, or a result left a record unfinished"},

	{StepApplyTurnControl, StepRunModel, TransitionNext, "steered messages start the next turn"},
	{StepApplyTurnControl, StepAwaitUserMessage, TransitionNext, "no steered messages"},

	{StepRecordTurnFailure, StepAwaitUserMessage, TransitionNext, "the turn's error is recorded"},

	{StepFinishTurnCancellation, StepApplyTurnControl, TransitionNext, "the model call or compaction was cancelled, or the last wait ended"},
	{StepFinishTurnCancellation, StepCancelToolTask, TransitionNext, "per abandoned tool task"},

	{StepCancelToolTask, StepResumeTurn, TransitionResult, "the call is recorded outcome_unknown"},
	{StepCancelToolTask, StepRecordToolOutcomeUnknown, TransitionFailure, "the cancellation's attempts ran out"},
}

// actions are the requests of the session's client API.
var actions = []Action{
	{"start_session", "update", "Starts a session, with an optional first message and settings."},
	{"send_user_message", "update", "Queues a user message; it starts the next turn."},
	{"steer_user_message", "update", "Steers the running turn with new text or a queued message."},
	{"delete_queued_message", "update", "Deletes a message that is still queued."},
	{"cancel_turn", "update", "Stops the running turn now."},
	{"resolve_interrupt", "update", "Approves or rejects a tool call, or declines a question."},
	{"answer_question", "update", "Answers a pending question."},
	{"execute_plan", "update", "Approves a plan revision and starts executing it."},
	{"update_session_settings", "update", "Replaces the session settings from the next turn on."},
	{"get_agent_snapshot", "query", "Reads the session's state, recent messages, interrupts, tool calls, usage and plan."},
	{"list_agent_messages", "query", "Pages through stored messages, oldest first."},
}

// Graph returns the session Flow graph of a Flow type. Every Flow type has
// the same Steps; the graph names the Flow type and the engine version so a
// reader knows which sessions it draws.
func Graph(flowType, engineVersion string) FlowGraph {
	g := FlowGraph{
		Schema:        FlowGraphSchema,
		FlowType:      flowType,
		EngineVersion: engineVersion,
		Start:         StepStartAgentSession,
		Transitions:   append([]Transition(nil), transitions...),
		Actions:       append([]Action(nil), actions...),
	}
	for _, s := range stepSpecs {
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
	return g
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
