package session

import (
	"context"
	"encoding/json"
	"time"

	"github.com/stepwise-run/stepwise/pkg/agent"
)

// Runner is the runner contract: what a RunModel Step and a tool Step call.
// Each call may run again after a crash or retry, so a runner keeps no state
// between calls and derives everything from its arguments.
type Runner interface {
	// RunModelStep makes at most one model call for the turn and stops
	// before it runs any tool it can defer.
	RunModelStep(ctx context.Context, turn TurnContext) (ModelOutcome, error)
	// ExecuteToolCall runs one deferred tool call once.
	ExecuteToolCall(ctx context.Context, call ToolExecution) (ToolOutcome, error)
}

// TurnContext is the committed state a RunModel Step works from.
type TurnContext struct {
	SessionID string `json:"sessionId"`
	TurnID    string `json:"turnId"`
	// Attempt is the one-based RunModel attempt.
	Attempt int             `json:"attempt"`
	Mode    InteractionMode `json:"mode"`
	// Messages are the stored messages in sequence order: every one, or,
	// once the session compacted, those after the summary.
	Messages []Message `json:"messages"`
	// ModelCalls counts the turn's model calls made so far.
	ModelCalls int `json:"modelCalls"`
	// RunState is empty for the turn's first model call.
	RunState string `json:"runState,omitempty"`
	// ToolCalls are the turn's final records.
	ToolCalls []ToolCallRecord `json:"toolCalls,omitempty"`
	// Settings are the session settings the turn started with, as a JSON
	// object; nil when there are none.
	Settings json.RawMessage `json:"settings,omitempty"`
	// Plan is the session's plan, nil when there is none; the model sees
	// it in every call.
	Plan *Plan `json:"plan,omitempty"`
	// Summary, once the session compacted, stands for the messages before
	// Messages, which are only those after it.
	Summary *ContextSummary `json:"summary,omitempty"`
	// CompactThrough is the last message to summarize in a CompactContext
	// Step.
	CompactThrough int64 `json:"compactThrough,omitempty"`
	// SessionUsage is what the session's committed model calls used, for
	// spend limits.
	SessionUsage Usage `json:"sessionUsage"`
	// TraceContext is the traceparent of the activation's root, which the
	// attempt's chat span is parented from; empty when none was stored.
	TraceContext string `json:"traceContext,omitempty"`
	// NextSequence is the sequence the call's first new message is stored
	// under, so its span can name the messages it produced.
	NextSequence int64 `json:"nextSequence,omitempty"`
	// Events writes the Step's events; set by the engine binding.
	Events EventWriter `json:"-"`
	// Heartbeat records liveness; set by the engine binding.
	Heartbeat func() `json:"-"`
}

// OutcomeKind says how a model call ended.
type OutcomeKind string

// Model outcomes.
const (
	// OutcomeTurnCompleted is a final answer, or a turn the runner ended.
	OutcomeTurnCompleted OutcomeKind = "turn_completed"
	// OutcomeToolCallsRequested asks for tool calls.
	OutcomeToolCallsRequested OutcomeKind = "tool_calls_requested"
	// OutcomeTurnContinued stores the new messages and makes another model
	// call in the same turn, in its own RunModel Step.
	OutcomeTurnContinued OutcomeKind = "turn_continued"
	// OutcomeCompactionNeeded makes no model call: the input passed the
	// compaction threshold, and CompactContext summarizes through
	// CompactThrough first.
	OutcomeCompactionNeeded OutcomeKind = "compaction_needed"
)

// ModelOutcome is what one RunModel Step returns.
type ModelOutcome struct {
	Kind OutcomeKind `json:"kind"`
	// NewMessages are the turn's messages not stored yet, appended in this
	// Step's commit.
	NewMessages []Message `json:"newMessages,omitempty"`
	// ToolCalls are the requested calls in model order.
	ToolCalls []DeferredToolCall `json:"toolCalls,omitempty"`
	// RunState continues the turn after the tool calls, or in the next
	// model call of a continued turn.
	RunState string `json:"runState,omitempty"`
	// Usage is this model call's usage only.
	Usage Usage `json:"usage"`
	// TurnError ends a completed turn as failed, without a retry.
	TurnError string `json:"turnError,omitempty"`
	// Options are the session options the Step worked with.
	Options TurnOptions `json:"options"`
	// Metadata describes the model call for tracing.
	Metadata CallMetadata `json:"metadata"`
	// Attempt is the RunModel attempt that made the call; the engine binding
	// sets it, so the commit's events name the attempt that counted.
	Attempt int `json:"attempt,omitempty"`
	// CompactThrough is the last message to summarize, for
	// OutcomeCompactionNeeded.
	CompactThrough int64 `json:"compactThrough,omitempty"`
}

// Compactor is a runner that can summarize the earlier conversation, for a
// session with a compaction policy.
type Compactor interface {
	// SummarizeContext makes one summary call for the messages through
	// turn.CompactThrough that the current summary does not cover.
	SummarizeContext(ctx context.Context, turn TurnContext) (CompactionOutcome, error)
}

// DeferredToolCall is one tool call the session runs in its own Step.
type DeferredToolCall struct {
	ID              string       `json:"id"`
	Name            string       `json:"name"`
	Arguments       string       `json:"arguments"`
	Policy          agent.Policy `json:"policy"`
	SourceReference string       `json:"sourceReference,omitempty"`
	// Ordered writes of one model response run one at a time in model
	// order; a write after one that did not succeed is skipped.
	Ordered bool `json:"ordered,omitempty"`
	// StepLimit, when set, is the call's own tool Step limit.
	StepLimit *agent.StepLimit `json:"stepLimit,omitempty"`
}

// ToolExecution is one approved tool call, handed to the runner by a tool
// Step.
type ToolExecution struct {
	SessionID      string         `json:"sessionId"`
	TurnID         string         `json:"turnId"`
	Call           ToolCallRecord `json:"call"`
	IdempotencyKey string         `json:"idempotencyKey"`
	Attempt        int            `json:"attempt"`
	Events         EventWriter    `json:"-"`
	Heartbeat      func()         `json:"-"`
	// Checkpoint is what an earlier attempt saved with SaveCheckpoint.
	Checkpoint     string            `json:"-"`
	SaveCheckpoint func(text string) `json:"-"`
}

// TaskRunner is a runner whose tools start tasks the session polls.
type TaskRunner interface {
	// PollToolTask polls the call's task once: its result, a question, or
	// the next interval (ToolResultTaskPending).
	PollToolTask(ctx context.Context, call ToolExecution) (ToolOutcome, error)
	// CancelToolTask stops an abandoned task, best effort.
	CancelToolTask(ctx context.Context, call ToolExecution) error
}

// ToolOutcomeKind says how a tool Step ended.
type ToolOutcomeKind string

// Tool outcomes.
const (
	ToolResultSucceeded      ToolOutcomeKind = "succeeded"
	ToolResultFailed         ToolOutcomeKind = "failed"
	ToolResultOutcomeUnknown ToolOutcomeKind = "outcome_unknown"
	// ToolResultInputRequested asks the user a question before the tool
	// takes any effect; the tool Step runs again with the answer.
	ToolResultInputRequested ToolOutcomeKind = "input_requested"
	// ToolResultNotStarted is a tool Step that found its turn steered or
	// cancelled before the tool started; the call is settled instead.
	ToolResultNotStarted ToolOutcomeKind = "not_started"
	// ToolResultTaskStarted is a tool that started a task the session
	// polls; ToolResultTaskPending is a poll of a task that still runs.
	ToolResultTaskStarted ToolOutcomeKind = "task_started"
	ToolResultTaskPending ToolOutcomeKind = "task_pending"
)

// ToolOutcome is the result of one tool Step. A failure the model should
// see, and a write whose outcome is unknown, are outcomes rather than errors,
// so they are recorded without a retry.
type ToolOutcome struct {
	Kind   ToolOutcomeKind `json:"kind"`
	Output string          `json:"output,omitempty"`
	// Images are a succeeded result's images, already in the media store.
	Images []ImageReference `json:"images,omitempty"`
	Error  string           `json:"error,omitempty"`
	// Question and InputContinuation are an input request's;
	// InputContinuation is also a pending task's, for its next poll.
	Question          *Question `json:"question,omitempty"`
	InputContinuation string    `json:"continuation,omitempty"`
	// TaskID and PollInterval are a started or pending task's.
	TaskID       string        `json:"taskId,omitempty"`
	PollInterval time.Duration `json:"pollInterval,omitempty"`
}

// EventWriter writes session events. Events are best effort and never part
// of the session's durable state.
type EventWriter interface {
	Write(e Event)
}

// Event is one session event.
type Event struct {
	Type EventType `json:"type"`
	// TurnID, StepExecutionID and Attempt let a UI group live text: within a
	// Step execution, only the highest attempt's text counts.
	TurnID          string          `json:"turnId,omitempty"`
	StepExecutionID string          `json:"stepExecutionId,omitempty"`
	Attempt         int             `json:"attempt,omitempty"`
	Payload         json.RawMessage `json:"payload"`
}

// EventType names an event.
type EventType string

// Event types. Their names are what UIs and the event hub read, so they
// never change.
const (
	EventTurnStarted          EventType = "turn_started"
	EventTurnCompleted        EventType = "turn_completed"
	EventTurnFailed           EventType = "turn_failed"
	EventTextDelta            EventType = "text_delta"
	EventReasoningDelta       EventType = "reasoning_delta"
	EventToolCallStarted      EventType = "tool_call_started"
	EventToolCallFinished     EventType = "tool_call_finished"
	EventToolCallDeferred     EventType = "tool_call_deferred"
	EventInterruptRaised      EventType = "interrupt_raised"
	EventInterruptResolved    EventType = "interrupt_resolved"
	EventTimerStarted         EventType = "timer_started"
	EventUsageRecorded        EventType = "usage_recorded"
	EventToolTaskStarted      EventType = "tool_task_started"
	EventPlanUpdated          EventType = "plan_updated"
	EventCompactionStarted    EventType = "compaction_started"
	EventCompactionFinished   EventType = "compaction_finished"
	EventTurnSteered          EventType = "turn_steered"
	EventTurnCancelled        EventType = "turn_cancelled"
	EventPlanExecutionStarted EventType = "plan_execution_started"
)

// NewEvent builds an event with a JSON payload.
func NewEvent(t EventType, turnID string, payload any) Event {
	raw, err := json.Marshal(payload)
	if err != nil {
		raw = []byte("{}")
	}
	return Event{Type: t, TurnID: turnID, Payload: raw}
}
