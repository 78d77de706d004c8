package client

import (
	"encoding/json"
	"strings"
	"time"

	"github.com/stepwise-run/stepwise/internal/session"
	"github.com/stepwise-run/stepwise/pkg/agent"
)

// The types in this file are what the client returns: a view of a session
// for applications and UIs, with JSON names chosen for them. They are
// mapped from the session's query results in this file only, so the
// session's stored state can change without changing this API, and this
// API can change without touching stored state.

// Snapshot is a session as a UI shows it: its state, the last 200 messages,
// pending interrupts, the active turn's tool calls, usage, the messages
// waiting for a turn, the settings and the plan.
type Snapshot struct {
	// State is nil until the session's start commits.
	State *SessionState `json:"state"`
	// Messages are the last 200 stored messages, oldest first.
	Messages []Message `json:"messages"`
	// PendingInterrupts wait for a person: approvals and questions.
	PendingInterrupts []Interrupt `json:"pendingInterrupts"`
	// ToolCalls are the active turn's tool calls in model order.
	ToolCalls []ToolCall `json:"toolCalls"`
	// Usage counts the tokens of every model call of the session.
	Usage Usage `json:"usage"`
	// QueuedMessages wait for a turn, oldest first.
	QueuedMessages []QueuedMessage `json:"queuedMessages"`
	// SteeredMessages steered the running turn and start the next one.
	SteeredMessages []QueuedMessage `json:"steeredMessages"`
	// Settings are the session settings the next turn starts with, a JSON
	// object; a running turn keeps those it started with.
	Settings json.RawMessage `json:"settings"`
	// Plan is nil until the model first writes one.
	Plan *Plan `json:"plan"`
	// PendingPlanExecution is the plan revision ExecutePlan approved that no
	// turn has started yet; zero when none.
	PendingPlanExecution int `json:"pendingPlanExecution,omitempty"`
}

// SessionState is what the session is doing.
type SessionState struct {
	Status Status `json:"status"`
	// Mode is the kind of the active turn, or of the last one.
	Mode Mode `json:"mode"`
	// ActiveTurnID is the running turn; empty while the session waits for
	// a message.
	ActiveTurnID string `json:"activeTurnId,omitempty"`
	// TurnCount counts the turns that started.
	TurnCount int `json:"turnCount"`
	// LastTurnError says why the last turn failed or was cut short; empty
	// once a later turn completes.
	LastTurnError string `json:"lastTurnError,omitempty"`
}

// Status is what a session is doing.
type Status string

// Session statuses.
const (
	StatusWaitingForUserMessage Status = "waiting_for_user_message"
	StatusRunningModel          Status = "running_model"
	StatusRunningTools          Status = "running_tools"
	StatusCompactingContext     Status = "compacting_context"
)

// Mode is the kind of a turn.
type Mode string

// Turn modes.
const (
	ModeChat Mode = "chat"
	// ModePlanning is a turn that may only write the plan.
	ModePlanning Mode = "planning"
	// ModeExecuting is a turn that executes an approved plan.
	ModeExecuting Mode = "executing"
)

// Message is one stored message.
type Message struct {
	// Sequence numbers the session's messages from 1.
	Sequence int64  `json:"sequence"`
	TurnID   string `json:"turnId"`
	Role     Role   `json:"role"`
	// Text is the user's words, the model's answer, or a tool result as the
	// model saw it.
	Text string `json:"text,omitempty"`
	// Reasoning is the reasoning text an assistant message showed, where the
	// provider sends one.
	Reasoning string `json:"reasoning,omitempty"`
	// ToolCalls are the calls an assistant message requested, in model
	// order.
	ToolCalls []RequestedToolCall `json:"toolCalls,omitempty"`
	// ToolCallID and ToolName name the call a tool message answers.
	ToolCallID string `json:"toolCallId,omitempty"`
	ToolName   string `json:"toolName,omitempty"`
	// Images are a user message's images, or a tool result's.
	Images []ImageReference `json:"images,omitempty"`
}

// ImageReference is an image as sessions store it: where its bytes are in
// the agent's media store and what they must be. Sessions never hold image
// bytes; a UI reads them from the store.
type ImageReference struct {
	// Type is always "image".
	Type string `json:"type"`
	// URI is <store URI>/sha256/<SHA256>.
	URI string `json:"uri"`
	// MIMEType is image/png, image/jpeg, image/gif or image/webp.
	MIMEType string `json:"mimeType"`
	// SHA256 is the lowercase hex SHA-256 of the bytes.
	SHA256 string `json:"sha256"`
	// SizeBytes is the number of bytes.
	SizeBytes int64 `json:"sizeBytes"`
}

// Role says who a message comes from.
type Role string

// Message roles.
const (
	RoleUser      Role = "user"
	RoleAssistant Role = "assistant"
	RoleTool      Role = "tool"
)

// RequestedToolCall is a tool call as the model requested it.
type RequestedToolCall struct {
	ID   string `json:"id"`
	Name string `json:"name"`
	// Arguments is the JSON text the model sent.
	Arguments string `json:"arguments"`
}

// Interrupt is a pending request for a person: approve a tool call, or
// answer a question.
type Interrupt struct {
	// ID is what Approve, Reject and Answer take.
	ID         string        `json:"id"`
	Kind       InterruptKind `json:"kind"`
	TurnID     string        `json:"turnId"`
	ToolCallID string        `json:"toolCallId"`
	ToolName   string        `json:"toolName"`
	// Arguments are the call's arguments, for an approval.
	Arguments string `json:"arguments,omitempty"`
	// Deadline, when set, is when the interrupt expires, on the engine's
	// clock.
	Deadline *time.Time `json:"deadline,omitempty"`
	// Question is set for a question.
	Question *Question `json:"question,omitempty"`
	// AskedBy says, for a question, who asks it: the agent (its model, by
	// ask_user), a tool before it runs, or a tool's running task (such as
	// an MCP task's input request). A person answers a tool's question
	// knowing the tool's server wrote it, not the agent.
	AskedBy Asker `json:"askedBy,omitempty"`
}

// Asker is who asks a question.
type Asker string

// Askers.
const (
	AskedByAgent Asker = "agent"
	AskedByTool  Asker = "tool"
	AskedByTask  Asker = "task"
)

// askerOf is who asks the question of interrupt in, whose call is r (nil
// when the snapshot lacks it: then the name tells ask_user from a tool).
func askerOf(in session.Interrupt, r *session.ToolCallRecord) Asker {
	switch {
	case r == nil && in.ToolName == string(agent.BuiltInAskUser):
		return AskedByAgent
	case r == nil:
		return AskedByTool
	case r.BuiltIn == agent.BuiltInAskUser:
		return AskedByAgent
	case r.TaskID != "":
		return AskedByTask
	}
	return AskedByTool
}

// InterruptKind says what an interrupt waits for.
type InterruptKind string

// Interrupt kinds.
const (
	InterruptApproval InterruptKind = "approval"
	InterruptQuestion InterruptKind = "question"
)

// Question is a question put to the user.
type Question struct {
	Text string `json:"text"`
	// Choices, when set, are the answers the user may give; with
	// AllowsFreeText any other text is an answer too.
	Choices        []string `json:"choices,omitempty"`
	AllowsFreeText bool     `json:"allowsFreeText"`
}

// ToolCall is one tool call of the active turn, from the model's request to
// its outcome.
type ToolCall struct {
	ID        string `json:"id"`
	Name      string `json:"name"`
	Arguments string `json:"arguments"`
	// Order is the call's place in model order across the turn.
	Order int `json:"order"`
	// Effect is the call's effect class after the tool policies: read,
	// idempotent_write, non_idempotent_write or unclassified.
	Effect           string `json:"effect"`
	RequiresApproval bool   `json:"requiresApproval"`
	// BuiltIn names the built-in tool the session runs for the call:
	// ask_user, durable_wait or write_todos.
	BuiltIn string         `json:"builtIn,omitempty"`
	Status  ToolCallStatus `json:"status"`
	// Output is the result of a succeeded call, and Images its images.
	Output string           `json:"output,omitempty"`
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
	// Answers are how the user resolved the questions the tool itself
	// asked, oldest first.
	Answers []QuestionAnswer `json:"answers,omitempty"`
	// TaskID is the remote task the call's tool started, which the session
	// polls.
	TaskID string `json:"taskId,omitempty"`
}

// ToolCallStatus is where a tool call stands. The first six wait; the last
// four are outcomes.
type ToolCallStatus string

// Tool call statuses.
const (
	ToolCallAwaitingApproval ToolCallStatus = "awaiting_approval"
	ToolCallApproved         ToolCallStatus = "approved"
	ToolCallAwaitingAnswer   ToolCallStatus = "awaiting_answer"
	ToolCallWaitingForTimer  ToolCallStatus = "waiting_for_timer"
	ToolCallWaitingForTask   ToolCallStatus = "waiting_for_task"
	// ToolCallWriteQueued is an ordered write that waits for the write
	// before it.
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

// QuestionAnswer is how the user resolved a question a tool asked.
type QuestionAnswer struct {
	QuestionID string `json:"questionId"`
	Question   string `json:"question"`
	// Resolution is answered, declined or deadline_passed.
	Resolution string `json:"resolution"`
	Answer     string `json:"answer,omitempty"`
}

// Usage counts the tokens of model calls.
type Usage struct {
	ModelCalls        int64 `json:"modelCalls"`
	InputTokens       int64 `json:"inputTokens"`
	OutputTokens      int64 `json:"outputTokens"`
	CachedInputTokens int64 `json:"cachedInputTokens"`
	ReasoningTokens   int64 `json:"reasoningTokens"`
}

// QueuedMessage is a message a user sent that waits for a turn; its ID is
// what SteerQueued and DeleteQueued take.
type QueuedMessage struct {
	ID   string `json:"id"`
	Text string `json:"text"`
	// Images are the message's images.
	Images []ImageReference `json:"images,omitempty"`
	// PlanMode asks for a planning turn.
	PlanMode bool `json:"planMode,omitempty"`
}

// Plan is the session's plan, replaced as a whole each time the model
// writes it.
type Plan struct {
	Revision int        `json:"revision"`
	Status   PlanStatus `json:"status"`
	Todos    []Todo     `json:"todos"`
}

// PlanStatus is where a plan stands.
type PlanStatus string

// Plan statuses.
const (
	// PlanDraft waits for ExecutePlan.
	PlanDraft     PlanStatus = "draft"
	PlanActive    PlanStatus = "active"
	PlanCompleted PlanStatus = "completed"
	// PlanCleared has no tasks.
	PlanCleared PlanStatus = "cleared"
)

// Todo is one task of a plan.
type Todo struct {
	Content string     `json:"content"`
	Status  TodoStatus `json:"status"`
}

// TodoStatus is where one task of a plan stands.
type TodoStatus string

// Task statuses.
const (
	TodoPending    TodoStatus = "pending"
	TodoInProgress TodoStatus = "in_progress"
	TodoCompleted  TodoStatus = "completed"
)

// MessagesPage is one page of stored messages.
type MessagesPage struct {
	// Messages are oldest first.
	Messages []Message `json:"messages"`
	// FirstSequence is the session's oldest stored message; the last page
	// starts there.
	FirstSequence int64 `json:"firstSequence"`
	// NextBeforeSequence continues to older messages; zero on the last
	// page.
	NextBeforeSequence int64 `json:"nextBeforeSequence,omitempty"`
	// DeletedBeforeSequence is set once retention deleted the messages
	// before it.
	DeletedBeforeSequence int64 `json:"deletedBeforeSequence,omitempty"`
}

// MessagesRequest pages through stored messages, newest page first.
type MessagesRequest struct {
	// BeforeSequence, when set, lists the messages before that sequence;
	// zero lists the newest.
	BeforeSequence int64 `json:"beforeSequence,omitempty"`
	// Limit is clamped to 1..200.
	Limit int `json:"limit,omitempty"`
}

// snapshotView maps get_agent_snapshot's result.
func snapshotView(s session.Snapshot) Snapshot {
	out := Snapshot{
		Messages:             messagesView(s.Messages),
		PendingInterrupts:    make([]Interrupt, 0, len(s.PendingInterrupts)),
		ToolCalls:            make([]ToolCall, 0, len(s.ToolCalls)),
		Usage:                Usage(s.Usage),
		QueuedMessages:       queuedView(s.QueuedMessages),
		SteeredMessages:      queuedView(s.SteeredMessages),
		Settings:             append(json.RawMessage(nil), s.SessionSettings...),
		PendingPlanExecution: s.PendingPlanExecution,
	}
	if len(out.Settings) == 0 {
		out.Settings = json.RawMessage("{}")
	}
	if st := s.State; st != nil {
		out.State = &SessionState{
			Status: Status(st.Status), Mode: Mode(st.InteractionMode), ActiveTurnID: st.ActiveTurnID,
			TurnCount: st.TurnCount, LastTurnError: st.LastTurnError,
		}
	}
	calls := make(map[string]*session.ToolCallRecord, len(s.ToolCalls))
	for i := range s.ToolCalls {
		calls[s.ToolCalls[i].ID] = &s.ToolCalls[i]
	}
	for _, in := range s.PendingInterrupts {
		view := Interrupt{
			ID: in.ID, Kind: InterruptKind(in.Kind), TurnID: in.TurnID, ToolCallID: in.ToolCallID, ToolName: in.ToolName,
			Arguments: in.Arguments, Deadline: copyTime(in.Deadline), Question: questionView(in.Question),
		}
		if in.Question != nil {
			view.AskedBy = askerOf(in, calls[in.ToolCallID])
		}
		out.PendingInterrupts = append(out.PendingInterrupts, view)
	}
	for _, r := range s.ToolCalls {
		out.ToolCalls = append(out.ToolCalls, toolCallView(r))
	}
	if p := s.Plan; p != nil {
		plan := &Plan{Revision: p.Revision, Status: PlanStatus(p.Status), Todos: make([]Todo, 0, len(p.Todos))}
		for _, t := range p.Todos {
			plan.Todos = append(plan.Todos, Todo{Content: t.Content, Status: TodoStatus(t.Status)})
		}
		out.Plan = plan
	}
	return out
}

// toolCallView maps a tool call record. What only the engine reads (the
// source reference, Step limits, ordering links, task polling and
// continuations) stays out of the view.
func toolCallView(r session.ToolCallRecord) ToolCall {
	out := ToolCall{
		ID: r.ID, Name: r.Name, Arguments: r.Arguments, Order: r.Order, Effect: string(r.Effect),
		RequiresApproval: r.RequiresApproval, BuiltIn: string(r.BuiltIn), Status: ToolCallStatus(r.Status),
		Output: r.Output, Error: r.Error, RejectionMessage: r.RejectionMessage, CancellationReason: r.CancellationReason,
		WaitUntil: copyTime(r.WaitUntil), WaitReason: r.WaitReason, Question: questionView(r.Question), TaskID: r.TaskID,
		Images: imagesView(r.Images),
	}
	for _, a := range r.InputAnswers {
		out.Answers = append(out.Answers, QuestionAnswer{QuestionID: a.QuestionID, Question: a.Question, Resolution: string(a.Resolution), Answer: a.Answer})
	}
	return out
}

func questionView(q *session.Question) *Question {
	if q == nil {
		return nil
	}
	return &Question{Text: q.Text, Choices: append([]string(nil), q.Choices...), AllowsFreeText: q.AllowsFreeText}
}

func queuedView(in []session.UserMessage) []QueuedMessage {
	out := make([]QueuedMessage, 0, len(in))
	for _, m := range in {
		out = append(out, QueuedMessage{ID: m.ID, Text: m.Text, PlanMode: m.PlanMode, Images: imagesView(m.Images)})
	}
	return out
}

// messagesView maps stored messages. Output items stay out: they are the
// provider's own JSON, kept to replay to the same provider; the view shows
// their text, reasoning and tool calls.
func messagesView(in []session.Message) []Message {
	out := make([]Message, 0, len(in))
	for _, m := range in {
		v := Message{Sequence: m.Sequence, TurnID: m.TurnID, Role: Role(m.Role), Text: m.Text, ToolCallID: m.ToolCallID, ToolName: m.ToolName,
			Images: imagesView(m.Images)}
		var reasoning []string
		for _, item := range m.Output {
			if item.Type == session.OutputReasoning && item.Text != "" {
				reasoning = append(reasoning, item.Text)
			}
		}
		v.Reasoning = strings.Join(reasoning, "\n\n")
		for _, c := range m.ToolCalls {
			v.ToolCalls = append(v.ToolCalls, RequestedToolCall{ID: c.ID, Name: c.Name, Arguments: c.Arguments})
		}
		out = append(out, v)
	}
	return out
}

// messagesPageView maps list_agent_messages' result.
func messagesPageView(p session.MessagesPage) MessagesPage {
	return MessagesPage{
		Messages: messagesView(p.Messages), FirstSequence: p.FirstSequence,
		NextBeforeSequence: p.NextBeforeSequence, DeletedBeforeSequence: p.DeletedBeforeSequence,
	}
}

func imagesView(in []session.ImageReference) []ImageReference {
	if in == nil {
		return nil
	}
	out := make([]ImageReference, len(in))
	for i, r := range in {
		out[i] = ImageReference(r)
	}
	return out
}

func copyTime(t *time.Time) *time.Time {
	if t == nil {
		return nil
	}
	c := *t
	return &c
}
