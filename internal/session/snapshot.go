package session

import (
	"encoding/json"
)

// Paging limits of the message queries.
const (
	SnapshotMessageCount = 200
	MaxMessagePageSize   = 200
)

// StateView is the session state a snapshot shows.
type StateView struct {
	Status          Status          `json:"status"`
	InteractionMode InteractionMode `json:"interactionMode"`
	ActiveTurnID    string          `json:"activeTurnId,omitempty"`
	TurnCount       int             `json:"turnCount"`
	LastTurnError   string          `json:"lastTurnError,omitempty"`
}

// Snapshot is get_agent_snapshot's result.
type Snapshot struct {
	// State is nil until StartAgentSession commits.
	State             *StateView       `json:"state"`
	Messages          []Message        `json:"messages"`
	PendingInterrupts []Interrupt      `json:"pendingInterrupts"`
	ToolCalls         []ToolCallRecord `json:"toolCalls"`
	Usage             Usage            `json:"usage"`
	// QueuedMessageCount and QueuedMessages are the messages waiting for a
	// turn.
	QueuedMessageCount int           `json:"queuedMessageCount"`
	QueuedMessages     []UserMessage `json:"queuedMessages"`
	// SteeredMessages are the steered messages not applied yet.
	SteeredMessages []UserMessage `json:"steeredMessages"`
	// SessionSettings are the settings the next turn starts with, not
	// necessarily the running turn's.
	SessionSettings json.RawMessage `json:"sessionSettings"`
	// Plan is the session's plan, nil until write_todos first succeeds.
	Plan *Plan `json:"plan"`
	// PendingPlanExecution is the plan revision approved by execute_plan
	// that no turn has started yet; zero when none.
	PendingPlanExecution int `json:"pendingPlanExecution,omitempty"`
}

// Snapshot returns the session as a UI shows it: the state, the last 200
// messages, pending interrupts, the active turn's tool calls, usage and the
// queued messages.
func (s *State) Snapshot() Snapshot {
	snap := Snapshot{
		Messages:             []Message{},
		PendingInterrupts:    append([]Interrupt{}, s.Interrupts...),
		ToolCalls:            []ToolCallRecord{},
		Usage:                s.Usage,
		QueuedMessages:       append([]UserMessage{}, s.Queued...),
		SteeredMessages:      append([]UserMessage{}, s.Steered...),
		SessionSettings:      json.RawMessage("{}"),
		Plan:                 s.Plan,
		PendingPlanExecution: s.PendingPlanExecution,
	}
	if len(s.Settings) > 0 {
		snap.SessionSettings = append(json.RawMessage(nil), s.Settings...)
	}
	snap.QueuedMessageCount = len(snap.QueuedMessages)
	if !s.Started {
		return snap
	}
	view := &StateView{Status: s.Status, InteractionMode: s.Mode, TurnCount: s.TurnCount, LastTurnError: s.LastTurnError}
	if s.Turn != nil {
		view.ActiveTurnID = s.Turn.ID
		for _, r := range s.Turn.ToolCalls {
			snap.ToolCalls = append(snap.ToolCalls, *r)
		}
	}
	snap.State = view
	all := s.Messages()
	from := max(0, len(all)-SnapshotMessageCount)
	snap.Messages = append(snap.Messages, all[from:]...)
	return snap
}

// ListMessagesRequest pages through stored messages, newest page first.
type ListMessagesRequest struct {
	// BeforeSequence, when set, lists messages before that sequence; zero
	// lists the newest.
	BeforeSequence int64 `json:"beforeSequence,omitempty"`
	// Limit is clamped to 1..200.
	Limit int `json:"limit,omitempty"`
}

// MessagesPage is list_agent_messages' result.
type MessagesPage struct {
	// Messages are oldest first.
	Messages []Message `json:"messages"`
	// FirstSequence is the session's oldest stored message; the last page
	// starts there.
	FirstSequence int64 `json:"firstSequence"`
	// NextBeforeSequence continues to older messages; zero on the last page.
	NextBeforeSequence int64 `json:"nextBeforeSequence,omitempty"`
	// DeletedBeforeSequence is set once retention deleted earlier messages.
	DeletedBeforeSequence int64 `json:"deletedBeforeSequence,omitempty"`
}

// ClampLimit clamps a page size to 1..200.
func ClampLimit(limit int) int {
	return min(max(limit, 1), MaxMessagePageSize)
}

// ListMessages is list_agent_messages.
func (s *State) ListMessages(req ListMessagesRequest) MessagesPage {
	limit := ClampLimit(req.Limit)
	page := MessagesPage{Messages: []Message{}}
	page.DeletedBeforeSequence = s.DeletedBeforeSequence
	all := s.Messages()
	if len(all) == 0 {
		return page
	}
	page.FirstSequence = all[0].Sequence
	end := len(all)
	if req.BeforeSequence > 0 {
		end = 0
		for end < len(all) && all[end].Sequence < req.BeforeSequence {
			end++
		}
	}
	start := max(0, end-limit)
	page.Messages = append(page.Messages, all[start:end]...)
	if start > 0 {
		page.NextBeforeSequence = all[start].Sequence
	}
	return page
}
