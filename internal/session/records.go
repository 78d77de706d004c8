package session

import (
	"encoding/json"
	"time"

	"github.com/stepwise-run/stepwise/pkg/agent"
)

// Status is what a session is doing.
type Status string

// Session statuses.
const (
	StatusWaitingForUserMessage Status = "waiting_for_user_message"
	StatusRunningModel          Status = "running_model"
	StatusRunningTools          Status = "running_tools"
	StatusCompactingContext     Status = "compacting_context"
)

// InteractionMode is the kind of the active turn.
type InteractionMode string

// Interaction modes.
const (
	ModeChat      InteractionMode = "chat"
	ModePlanning  InteractionMode = "planning"
	ModeExecuting InteractionMode = "executing"
)

// ToolCallStatus is where a tool call record stands. The first five wait;
// the last four are final.
type ToolCallStatus string

// Tool call statuses.
const (
	ToolCallAwaitingApproval ToolCallStatus = "awaiting_approval"
	ToolCallApproved         ToolCallStatus = "approved"
	ToolCallAwaitingAnswer   ToolCallStatus = "awaiting_answer"
	ToolCallWaitingForTimer  ToolCallStatus = "waiting_for_timer"
	ToolCallWaitingForTask   ToolCallStatus = "waiting_for_task"
	// ToolCallWriteQueued is an ordered write that waits for the earlier
	// write of its model response; its approval is asked only then.
	ToolCallWriteQueued    ToolCallStatus = "write_queued"
	ToolCallRejected       ToolCallStatus = "rejected"
	ToolCallSucceeded      ToolCallStatus = "succeeded"
	ToolCallFailed         ToolCallStatus = "failed"
	ToolCallOutcomeUnknown ToolCallStatus = "outcome_unknown"
)

// Final reports whether the status is an outcome.
func (s ToolCallStatus) Final() bool {
	switch s {
	case ToolCallRejected, ToolCallSucceeded, ToolCallFailed, ToolCallOutcomeUnknown:
		return true
	}
	return false
}

// ToolCallRecord is one tool call of the active turn, from the model's
// request to its outcome.
type ToolCallRecord struct {
	ID        string `json:"id"`
	Name      string `json:"name"`
	Arguments string `json:"arguments"`
	// Order is the call's place in model order across the turn, for display
	// and for the turn-failure note.
	Order  int          `json:"order"`
	Effect agent.Effect `json:"effect"`
	// RequiresApproval is the resolved policy's approval.
	RequiresApproval bool `json:"requiresApproval"`
	// BuiltIn names the built-in tool the session runs for this call.
	BuiltIn agent.BuiltInTool `json:"builtIn,omitempty"`
	// SourceReference lets a tool source resolve the tool in the tool Step
	// without listing it again.
	SourceReference string `json:"sourceReference,omitempty"`
	// Ordered is set on an ordered write; AfterWrite names the ordered
	// write of the same model response that runs before it.
	Ordered    bool   `json:"ordered,omitempty"`
	AfterWrite string `json:"afterWrite,omitempty"`
	// StepLimit is the call's own tool Step limit.
	StepLimit *agent.StepLimit `json:"stepLimit,omitempty"`
	Status    ToolCallStatus   `json:"status"`
	// Output is the model-visible result of a succeeded call, or of a
	// built-in call that ended without running (a declined question).
	Output string `json:"output,omitempty"`
	// Images are the images of a succeeded call's result.
	Images []ImageReference `json:"images,omitempty"`
	// Error says why a call failed or why its outcome is unknown.
	Error              string `json:"error,omitempty"`
	RejectionMessage   string `json:"rejectionMessage,omitempty"`
	CancellationReason string `json:"cancellationReason,omitempty"`
	// WaitUntil and WaitReason describe a durable wait.
	WaitUntil  *time.Time `json:"waitUntil,omitempty"`
	WaitReason string     `json:"waitReason,omitempty"`
	// Question is the question of an ask_user call.
	Question *Question `json:"question,omitempty"`
	// InputQuestions counts the questions the tool asked; InputAnswers are
	// their resolutions and InputContinuation what the tool asked to get
	// back, handed to the tool when it runs again.
	InputQuestions    int                    `json:"inputQuestions,omitempty"`
	InputAnswers      []agent.QuestionAnswer `json:"inputAnswers,omitempty"`
	InputContinuation string                 `json:"inputContinuation,omitempty"`
	// TaskID is the task the call's tool started; the call then waits in
	// PollToolTask. TaskPollInterval is the wait before the next poll, and
	// TaskAnswer a task question's resolution, handed to the next poll.
	TaskID           string                `json:"taskId,omitempty"`
	TaskPollInterval time.Duration         `json:"taskPollInterval,omitempty"`
	TaskAnswer       *agent.QuestionAnswer `json:"taskAnswer,omitempty"`
	// TaskAbandoned is set when cancel_turn abandons the call's task: the
	// session asks the tool to cancel it and records outcome_unknown.
	TaskAbandoned bool `json:"taskAbandoned,omitempty"`
	// TraceContext is the traceparent of the root of the activation that
	// deferred the call, or that approved or answered it, which the call's
	// tool spans are parented from.
	TraceContext string `json:"traceContext,omitempty"`
	// ResultStored is true once the call's result is a stored message.
	ResultStored bool `json:"resultStored,omitempty"`
}

// IdempotencyKey is the key every attempt of the call passes on.
func IdempotencyKey(sessionID, turnID, toolCallID string) string {
	return sessionID + "/" + turnID + "/" + toolCallID
}

// Question is a question put to the user.
type Question struct {
	Text           string   `json:"text"`
	Choices        []string `json:"choices,omitempty"`
	AllowsFreeText bool     `json:"allowsFreeText"`
}

// InterruptKind says what an interrupt waits for.
type InterruptKind string

// Interrupt kinds.
const (
	InterruptApproval InterruptKind = "approval"
	InterruptQuestion InterruptKind = "question"
)

// Interrupt is a pending request for a person: approve a tool call, or
// answer a question.
type Interrupt struct {
	ID         string        `json:"id"`
	Kind       InterruptKind `json:"kind"`
	TurnID     string        `json:"turnId"`
	ToolCallID string        `json:"toolCallId"`
	ToolName   string        `json:"toolName"`
	// Arguments are the call's arguments, for an approval.
	Arguments string `json:"arguments,omitempty"`
	// Deadline, when set, is when the interrupt expires on the engine's
	// clock.
	Deadline *time.Time `json:"deadline,omitempty"`
	Question *Question  `json:"question,omitempty"`
}

// UserMessage is a message a user sent that waits for a turn.
type UserMessage struct {
	ID   string `json:"id"`
	Text string `json:"text"`
	// Images are the message's images.
	Images []ImageReference `json:"images,omitempty"`
	// PlanMode asks for a planning turn.
	PlanMode bool `json:"planMode,omitempty"`
}

// Turn is the active turn.
type Turn struct {
	ID     string          `json:"id"`
	Number int             `json:"number"`
	Mode   InteractionMode `json:"mode"`
	// FirstSequence is the sequence of the turn's first message.
	FirstSequence int64 `json:"firstSequence"`
	// ModelCalls counts the turn's model calls.
	ModelCalls int `json:"modelCalls"`
	// RunState is the runner's state from the turn's last tool call
	// request; the turn's later model calls read it.
	RunState string `json:"runState,omitempty"`
	// ToolCalls are the turn's records in model order.
	ToolCalls []*ToolCallRecord `json:"toolCalls,omitempty"`
	// Options are the session options the last RunModel worked with.
	Options TurnOptions `json:"options"`
	// CompactThrough is the last message CompactContext summarizes, while
	// the session compacts.
	CompactThrough int64 `json:"compactThrough,omitempty"`
	// Control records a steer or cancel_turn of the turn.
	Control TurnControl `json:"control,omitzero"`
	// Settings are the session settings the turn started with; its model
	// calls read only this copy, so an update never changes a running turn.
	Settings json.RawMessage `json:"settings,omitempty"`
	Usage    Usage           `json:"usage"`
}

// TurnOptions are the session options a RunModel Step worked with, recorded
// with its outcome so the waits it sets up replay the same way whatever
// configuration a later worker has.
type TurnOptions struct {
	BuiltInTools      []agent.BuiltInTool `json:"builtInTools,omitempty"`
	InterruptDeadline time.Duration       `json:"interruptDeadline,omitempty"`
	MaxDurableWait    time.Duration       `json:"maxDurableWait,omitempty"`
	// RetainedMessages is how many newest messages retention keeps; zero
	// keeps every message.
	RetainedMessages int `json:"retainedMessages,omitempty"`
}

// Enabled reports whether a built-in tool is enabled.
func (o TurnOptions) Enabled(b agent.BuiltInTool) bool {
	for _, e := range o.BuiltInTools {
		if e == b {
			return true
		}
	}
	return false
}

// ToolCall returns the turn's record of a call.
func (t *Turn) ToolCall(id string) *ToolCallRecord {
	for _, r := range t.ToolCalls {
		if r.ID == id {
			return r
		}
	}
	return nil
}
