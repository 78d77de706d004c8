package session

import (
	"fmt"
	"slices"
	"strings"
	"time"
)

// Cancellation reasons of a tool call that a steer or cancel_turn settled
// before it started.
const (
	CancelledBySteer = "steered"
	CancelledByUser  = "turn_cancelled"
)

// Model-visible results of calls that a steer or cancel_turn settled.
const (
	SteeredResultText   = `{"status":"cancelled","reason":"superseded_by_steered_user_message"}`
	CancelledResultText = `{"status":"cancelled","reason":"turn_cancelled_by_user"}`
)

// TurnControl records a steer or cancel_turn of the active turn. The turn
// ends at ApplyTurnControl: a steered one at its next safe Step boundary, a
// cancelled one as soon as its started tool Steps end.
type TurnControl struct {
	Steered   bool `json:"steered,omitempty"`
	Cancelled bool `json:"cancelled,omitempty"`
}

// Requested reports whether the turn was steered or cancelled.
func (c TurnControl) Requested() bool { return c.Steered || c.Cancelled }

// reason is the cancellation reason of the calls the control settles; a
// cancel wins over a steer.
func (c TurnControl) reason() string {
	if c.Cancelled {
		return CancelledByUser
	}
	return CancelledBySteer
}

// SteerRequest is steer_user_message's input: exactly one of a queued
// message's ID or new text.
type SteerRequest struct {
	MessageID string `json:"messageId,omitempty"`
	Text      string `json:"text,omitempty"`
}

// CheckSteer is steer_user_message's validator.
func (s *State) CheckSteer(req SteerRequest) error {
	switch {
	case !s.Started:
		return reject("the session has not started")
	case req.MessageID != "" && req.Text != "":
		return reject("steer with a queued message's ID or with text, not both")
	case req.MessageID == "" && req.Text == "":
		return reject("steer with a queued message's ID or with text")
	case req.MessageID == "" && strings.TrimSpace(req.Text) == "":
		return reject("the message text is blank")
	case req.MessageID != "" && s.queuedIndex(req.MessageID) < 0:
		return reject("message %q is not queued", req.MessageID)
	}
	return nil
}

func (s *State) queuedIndex(id string) int {
	return slices.IndexFunc(s.Queued, func(m UserMessage) bool { return m.ID == id })
}

// Steer is steer_user_message. While a turn runs, the message is steered:
// the turn ends at its next safe Step boundary and the steered messages
// start the next turn, in order; every call of the turn still waiting is
// rejected now. While no turn runs, new text is queued like a sent message,
// so it starts the next turn at once.
func (s *State) Steer(req SteerRequest, now time.Time) ([]Event, error) {
	if err := s.CheckSteer(req); err != nil {
		return nil, err
	}
	if s.Turn == nil && req.Text != "" {
		s.queue(req.Text)
		return nil, nil
	}
	var msg UserMessage
	if req.MessageID != "" {
		i := s.queuedIndex(req.MessageID)
		msg = s.Queued[i]
		s.Queued = slices.Delete(s.Queued, i, i+1)
	} else {
		msg = s.newMessage(req.Text)
	}
	s.Steered = append(s.Steered, msg)
	if s.Turn == nil {
		return nil, nil
	}
	s.Turn.Control.Steered = true
	return s.settleWaits(now), nil
}

// DeleteRequest is delete_queued_message's input.
type DeleteRequest struct {
	MessageID string `json:"messageId"`
}

// CheckDelete is delete_queued_message's validator.
func (s *State) CheckDelete(req DeleteRequest) error {
	if s.queuedIndex(req.MessageID) < 0 {
		return reject("message %q is not queued", req.MessageID)
	}
	return nil
}

// DeleteQueued is delete_queued_message.
func (s *State) DeleteQueued(req DeleteRequest) error {
	if err := s.CheckDelete(req); err != nil {
		return err
	}
	i := s.queuedIndex(req.MessageID)
	s.Queued = slices.Delete(s.Queued, i, i+1)
	return nil
}

// CancelRequest is cancel_turn's input.
type CancelRequest struct {
	TurnID string `json:"turnId"`
}

// CheckCancel is cancel_turn's validator.
func (s *State) CheckCancel(req CancelRequest) error {
	switch {
	case s.Turn == nil:
		return reject("no turn is active")
	case s.Turn.ID != req.TurnID:
		return reject("turn %q is not the active turn", req.TurnID)
	}
	return nil
}

// CancelTurn is cancel_turn: the turn stops now. Every call still waiting
// is rejected; the engine binding cancels a running model call, whose answer
// is dropped, and the turn ends once its started tool Steps end. A second
// cancel of the same turn changes nothing.
func (s *State) CancelTurn(req CancelRequest, now time.Time) ([]Event, error) {
	if err := s.CheckCancel(req); err != nil {
		return nil, err
	}
	if s.Turn.Control.Cancelled {
		return nil, nil
	}
	s.Turn.Control.Cancelled = true
	return append(s.settleWaits(now), s.abandonTasks()...), nil
}

// TurnControlRequested reports whether the active turn was steered or
// cancelled.
func (s *State) TurnControlRequested() bool {
	return s.Turn != nil && s.Turn.Control.Requested()
}

// ModelCallCancelled reports whether the active turn's model call must be
// dropped.
func (s *State) ModelCallCancelled() bool {
	return s.Turn != nil && s.Turn.Control.Cancelled
}

// settleWaits rejects every call of a steered or cancelled turn that waits
// for a person or a timer; a call whose answer or timer committed first is
// final already and keeps its result.
func (s *State) settleWaits(_ time.Time) []Event {
	var events []Event
	for _, r := range s.Turn.ToolCalls {
		if r.TaskID != "" {
			// A started task, its questions included, is never rejected.
			continue
		}
		switch r.Status {
		case ToolCallAwaitingApproval, ToolCallAwaitingAnswer, ToolCallWaitingForTimer, ToolCallWriteQueued:
			events = append(events, s.settle(r)...)
		}
	}
	return events
}

// settle rejects one call that has not started, with the turn control's
// reason, and removes its interrupt.
func (s *State) settle(r *ToolCallRecord) []Event {
	reason := s.Turn.Control.reason()
	var events []Event
	if in, ok := s.InterruptOf(r.ID); ok {
		s.removeInterrupt(in.ID)
		events = append(events, resolvedEvent(in, false, false, "", reason))
	}
	r.CancellationReason = reason
	text := SteeredResultText
	if reason == CancelledByUser {
		text = CancelledResultText
	}
	return append(events, s.finish(r, ToolCallRejected, text, "")...)
}

// ToolCallControl is what a tool Step asks before its tool first starts:
// the cancellation reason when the turn was steered or cancelled, so the
// call is settled instead of run; empty when it may run.
func (s *State) ToolCallControl(turnID, toolCallID string) string {
	if s.Turn == nil || s.Turn.ID != turnID {
		// The turn is over: nothing may start for it.
		return CancelledByUser
	}
	r := s.Turn.ToolCall(toolCallID)
	if r == nil || r.Status.Final() || !s.Turn.Control.Requested() {
		return ""
	}
	return s.Turn.Control.reason()
}

// SettleUnstarted is a tool Step that found its turn steered or cancelled
// before the tool started: the call is rejected with the reason.
func (s *State) SettleUnstarted(id string) []Event {
	r := s.activeRecord(id)
	if r == nil || r.Status.Final() {
		return nil
	}
	if !s.Turn.Control.Requested() {
		// Only a steer or cancel keeps a tool from starting; anything else
		// leaves the call safe to make again.
		return s.finish(r, ToolCallFailed, "", ToolCallNotRunPrefix)
	}
	return s.settle(r)
}

// SettleLateQuestion is a tool Step whose tool asked a question after its
// turn was steered or cancelled. Nobody is asked: a tool asks only before
// it takes any effect, so the call is rejected with the turn control's
// reason, as a call that never started. It reports false, changing
// nothing, when the question is for the user: the turn was neither steered
// nor cancelled, or the call is a task's, whose questions steering never
// cancels.
func (s *State) SettleLateQuestion(id string) ([]Event, bool) {
	r := s.activeRecord(id)
	if r == nil || r.Status.Final() || r.TaskID != "" || !s.TurnControlRequested() {
		return nil, false
	}
	return s.settle(r), true
}

// settleNewCalls rejects the calls a model call requested in a turn that was
// steered or cancelled while it ran: none of them has started.
func (s *State) settleNewCalls(records []*ToolCallRecord) []Event {
	var events []Event
	for _, r := range records {
		if !r.Status.Final() {
			events = append(events, s.settle(r)...)
		}
	}
	return events
}

// ApplyTurnControl ends a steered or cancelled turn once every call of it is
// final: it stores the results of the calls (the turn's transcript, since
// the session stores items as they appear) and writes turn_steered or
// turn_cancelled. Steered messages then start the next turn.
func (s *State) ApplyTurnControl() []Event {
	var events []Event
	if s.TurnControlRequested() {
		turn := s.Turn
		s.storeResults()
		count := s.turnMessageCount(turn.ID)
		s.clearTurn(turn)
		if turn.Control.Cancelled {
			events = append(events, NewEvent(EventTurnCancelled, turn.ID, map[string]any{"message_count": count}))
		} else {
			events = append(events, NewEvent(EventTurnSteered, turn.ID, map[string]any{
				"steered_message_count": len(s.Steered), "message_count": count,
			}))
		}
	}
	return append(events, s.BeginTurn()...)
}

func (s *State) newMessage(text string) UserMessage {
	m := UserMessage{ID: fmt.Sprintf("msg-%d", s.NextMessageID), Text: text}
	s.NextMessageID++
	return m
}
