package session

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/stepwise-run/stepwise/pkg/agent"
)

// CanBeginTurn reports whether AwaitUserMessage has a message or a plan
// approval to start a turn with.
func (s *State) CanBeginTurn() bool {
	return s.Turn == nil && (len(s.Queued) > 0 || len(s.Steered) > 0 || s.planExecutionPending())
}

// BeginTurn is AwaitUserMessage, or ApplyTurnControl with steered messages:
// it starts a turn with every steered message in order, or else the next
// queued one, or else an approved plan. A turn plans when one of its
// messages asks for plan mode or a draft plan waits for review.
func (s *State) BeginTurn() []Event {
	for s.CanBeginTurn() {
		var msgs []UserMessage
		switch {
		case len(s.Steered) > 0:
			msgs, s.Steered = s.Steered, nil
		case len(s.Queued) > 0:
			msgs, s.Queued = s.Queued[:1], s.Queued[1:]
		default:
			if events := s.beginPlanExecution(); events != nil {
				return events
			}
			// A stale approval is dropped; look again.
			continue
		}
		mode := ModeChat
		if s.Plan != nil && s.Plan.Status == PlanDraft {
			mode = ModePlanning
		}
		for _, m := range msgs {
			if m.PlanMode {
				mode = ModePlanning
			}
		}
		return s.startTurn(mode, msgs)
	}
	return nil
}

// startTurn stores a turn's user messages and starts it.
func (s *State) startTurn(mode InteractionMode, msgs []UserMessage) []Event {
	s.TurnCount++
	turn := &Turn{
		ID: fmt.Sprintf("turn-%d", s.TurnCount), Number: s.TurnCount, Mode: mode,
		FirstSequence: s.NextSequence, Settings: s.Settings,
	}
	s.Turn = turn
	s.Status = StatusRunningModel
	s.Mode = turn.Mode
	first := s.NextSequence
	for _, m := range msgs {
		s.store(Message{Role: RoleUser, Text: m.Text, Images: m.Images})
	}
	return []Event{NewEvent(EventTurnStarted, turn.ID, map[string]any{"sequence": first})}
}

// TurnContext is the committed state a RunModel attempt of the turn works
// from. It fails when the session is no longer in that turn's RunModel, so a
// stale attempt never runs on another turn's state.
func (s *State) TurnContext(turnID string) (TurnContext, error) {
	if s.Turn == nil || s.Turn.ID != turnID || (s.Status != StatusRunningModel && s.Status != StatusCompactingContext) {
		return TurnContext{}, fmt.Errorf("session %s is not running a model call for %s", s.SessionID, turnID)
	}
	tc := TurnContext{
		SessionID: s.SessionID, TurnID: turnID, Mode: s.Turn.Mode,
		Messages: s.messagesAfterSummary(), ModelCalls: s.Turn.ModelCalls, RunState: s.Turn.RunState,
		Settings: s.Turn.Settings, Plan: s.Plan, Summary: s.Summary, CompactThrough: s.Turn.CompactThrough,
		SessionUsage: s.Usage, TraceContext: s.TraceContext, NextSequence: s.NextSequence,
	}
	for _, r := range s.Turn.ToolCalls {
		tc.ToolCalls = append(tc.ToolCalls, *r)
	}
	return tc, nil
}

// ApplyModelOutcome is RunModel's commit. It returns the records of the tool
// calls to start, in model order.
func (s *State) ApplyModelOutcome(out ModelOutcome, now time.Time) ([]*ToolCallRecord, []Event) {
	turn := s.Turn
	if turn == nil {
		return nil, nil
	}
	turn.Options = out.Options
	var events []Event
	if out.Usage != (Usage{}) {
		turn.ModelCalls += int(out.Usage.ModelCalls)
		turn.Usage = turn.Usage.Add(out.Usage)
		s.Usage = s.Usage.Add(out.Usage)
		events = append(events, usageRecorded(turn.ID, out.Usage, s.Usage, out.Metadata))
	}
	switch out.Kind {
	case OutcomeToolCallsRequested:
		if err := checkToolCallIDs(turn, out.ToolCalls); err != nil {
			// The answer is not stored: its calls could never be paired
			// with results a provider accepts.
			return nil, append(events, s.FailTurn(err.Error())...)
		}
		for _, m := range out.NewMessages {
			s.store(m)
		}
		turn.RunState = out.RunState
		s.Status = StatusRunningTools
		records := make([]*ToolCallRecord, 0, len(out.ToolCalls))
		todoCalls := 0
		for _, call := range out.ToolCalls {
			if call.Name == string(agent.BuiltInWriteTodos) {
				todoCalls++
			}
		}
		lastWrite := ""
		for _, call := range out.ToolCalls {
			r, evs := s.deferToolCall(call, todoCalls > 1, lastWrite, now)
			if r.Ordered {
				lastWrite = r.ID
			}
			records = append(records, r)
			events = append(events, evs...)
		}
		if turn.Control.Requested() {
			// Steered while the model call ran: none of its calls started.
			events = append(events, s.settleNewCalls(records)...)
		}
		return records, events
	case OutcomeTurnContinued:
		for _, m := range out.NewMessages {
			s.store(m)
		}
		turn.RunState = out.RunState
		return nil, events
	case OutcomeCompactionNeeded:
		if s.Summary != nil && out.CompactThrough <= s.Summary.LastSequence {
			// Nothing new to summarize: the runner must not ask again.
			return nil, append(events, s.FailTurn(fmt.Sprintf("the runner asked to compact through message %d, which the summary already covers", out.CompactThrough))...)
		}
		return nil, append(events, s.requestCompaction(out.CompactThrough)...)
	default:
		for _, m := range out.NewMessages {
			s.store(m)
		}
		if out.TurnError != "" {
			return nil, append(events, s.endTurn(out.TurnError)...)
		}
		return nil, append(events, s.endTurn("")...)
	}
}

func checkToolCallIDs(turn *Turn, calls []DeferredToolCall) error {
	seen := map[string]bool{}
	for _, r := range turn.ToolCalls {
		seen[r.ID] = true
	}
	for _, c := range calls {
		if c.ID == "" || strings.Contains(c.ID, "/") || seen[c.ID] {
			return fmt.Errorf("%s; the model sent %q", ToolCallIDError, c.ID)
		}
		seen[c.ID] = true
	}
	return nil
}

// usageRecorded is the event of one model call's usage, with the provider
// and model that metrics count it under.
func usageRecorded(turnID string, recorded, session Usage, meta CallMetadata) Event {
	return NewEvent(EventUsageRecorded, turnID, map[string]any{
		"recorded": recorded, "session": session,
		"provider": meta.Provider, "model": cmp.Or(meta.RequestModel, meta.ResponseModel),
	})
}

// ToolCallsFinal reports whether every record of the turn is final:
// ResumeTurn's condition.
func (s *State) ToolCallsFinal() bool {
	if s.Turn == nil {
		return true
	}
	for _, r := range s.Turn.ToolCalls {
		if !r.Status.Final() {
			return false
		}
	}
	return true
}

// ResumeTurn stores the results of the turn's final records that are not
// stored yet, in model order, and moves to the next model call.
func (s *State) ResumeTurn() {
	if s.Turn == nil {
		return
	}
	s.storeResults()
	s.Status = StatusRunningModel
}

func (s *State) storeResults() {
	for _, r := range s.Turn.ToolCalls {
		if r.Status.Final() && !r.ResultStored {
			r.ResultStored = true
			s.store(Message{Role: RoleTool, ToolCallID: r.ID, ToolName: r.Name, Text: DescribeOutcome(*r), Images: r.resultImages()})
		}
	}
}

// FailTurn is RecordTurnFailure: it stores the results of the calls that
// ran and one note listing them, records the error, and ends the turn.
func (s *State) FailTurn(errText string) []Event {
	if s.Turn == nil {
		return nil
	}
	s.storeResults()
	if note := TurnFailureNote(s.Turn.ToolCalls); note != "" {
		s.store(Message{Role: RoleUser, Text: note})
	}
	return s.endTurn(errText)
}

// endTurn clears the turn's records and run state; an error fails it.
func (s *State) endTurn(errText string) []Event {
	turn := s.Turn
	count := s.turnMessageCount(turn.ID)
	s.clearTurn(turn)
	if errText != "" {
		s.LastTurnError = errText
		return []Event{NewEvent(EventTurnFailed, turn.ID, map[string]any{"error": errText})}
	}
	s.LastTurnError = ""
	return []Event{NewEvent(EventTurnCompleted, turn.ID, map[string]any{"message_count": count})}
}

// clearTurn ends the turn: its interrupts and records go, and the session
// waits for a user message.
func (s *State) clearTurn(turn *Turn) {
	s.Interrupts = slices.DeleteFunc(s.Interrupts, func(in Interrupt) bool { return in.TurnID == turn.ID })
	s.Turn = nil
	s.Status = StatusWaitingForUserMessage
	s.Mode = ModeChat
}

func (s *State) turnMessageCount(turnID string) int {
	count := countTurn(s.Window, turnID)
	for _, c := range s.Chunks {
		count += countTurn(c.Messages, turnID)
	}
	return count
}

func countTurn(messages []Message, turnID string) int {
	n := 0
	for _, m := range messages {
		if m.TurnID == turnID {
			n++
		}
	}
	return n
}

// messagesAfterSummary are the stored messages the summary does not cover:
// the model input after it.
func (s *State) messagesAfterSummary() []Message {
	all := s.Messages()
	if s.Summary == nil {
		return all
	}
	for i, m := range all {
		if m.Sequence > s.Summary.LastSequence {
			return all[i:]
		}
	}
	return nil
}
