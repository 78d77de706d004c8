package session

import (
	"slices"
	"strings"
	"testing"
)

func TestBeginTurnNumbersTurnsAndSequences(t *testing.T) {
	s := startedState(t)
	if s.CanBeginTurn() || s.BeginTurn() != nil {
		t.Fatal("a turn began with nothing queued")
	}
	for _, text := range []string{"one", "two"} {
		if _, err := s.QueueUserMessage(text); err != nil {
			t.Fatal(err)
		}
	}

	events := s.BeginTurn()
	wantEvents(t, events, EventTurnStarted)
	if s.Turn.ID != "turn-1" || s.Turn.Number != 1 || s.Turn.FirstSequence != 1 || s.Turn.Mode != ModeChat || s.TurnCount != 1 {
		t.Errorf("first turn = %+v", s.Turn)
	}
	if s.Status != StatusRunningModel || len(s.Queued) != 1 || s.Queued[0].Text != "two" {
		t.Errorf("status %q queued %+v", s.Status, s.Queued)
	}
	if s.CanBeginTurn() || s.BeginTurn() != nil {
		t.Error("a second turn began while one is active")
	}

	s.ApplyModelOutcome(completed("answer one"), testNow)
	if !s.CanBeginTurn() {
		t.Fatal("the queued message cannot begin a turn after the first turn ended")
	}
	events = s.BeginTurn()
	wantEvents(t, events, EventTurnStarted)
	if p := payloadOf(t, events[0]); p["sequence"] != float64(3) || events[0].TurnID != "turn-2" {
		t.Errorf("turn_started = %s on %q, want sequence 3 on turn-2", events[0].Payload, events[0].TurnID)
	}
	if s.Turn.ID != "turn-2" || s.Turn.Number != 2 || s.Turn.FirstSequence != 3 {
		t.Errorf("second turn = %+v", s.Turn)
	}
	var got []string
	for i, m := range s.Messages() {
		if m.Sequence != int64(i+1) {
			t.Errorf("message %d has sequence %d", i, m.Sequence)
		}
		got = append(got, m.TurnID+":"+string(m.Role)+":"+m.Text)
	}
	want := []string{"turn-1:user:one", "turn-1:assistant:answer one", "turn-2:user:two"}
	if !slices.Equal(got, want) {
		t.Errorf("messages = %v, want %v", got, want)
	}
}

func TestApplyModelOutcomeEndsTheTurn(t *testing.T) {
	cases := []struct {
		name          string
		outcome       ModelOutcome
		wantEvents    []EventType
		wantLastError string
	}{
		{"completed turn", completed("done"), []EventType{EventUsageRecorded, EventTurnCompleted}, ""},
		{"completed turn without usage", ModelOutcome{Kind: OutcomeTurnCompleted, NewMessages: []Message{{Role: RoleAssistant, Text: "done"}}},
			[]EventType{EventTurnCompleted}, ""},
		{"turn error", ModelOutcome{Kind: OutcomeTurnCompleted, NewMessages: []Message{{Role: RoleAssistant, Text: "partial"}},
			Usage: Usage{ModelCalls: 1}, TurnError: "limit reached"},
			[]EventType{EventUsageRecorded, EventTurnFailed}, "limit reached"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s := inTurn(t, "hello")
			s.LastTurnError = "an earlier turn failed"
			s.Usage = Usage{ModelCalls: 4, InputTokens: 100}
			records, events := s.ApplyModelOutcome(c.outcome, testNow)
			if records != nil {
				t.Errorf("records = %v", records)
			}
			wantEvents(t, events, c.wantEvents...)
			last := events[len(events)-1]
			switch last.Type {
			case EventTurnCompleted:
				if p := payloadOf(t, last); p["message_count"] != float64(2) {
					t.Errorf("turn_completed = %s, want message_count 2", last.Payload)
				}
			case EventTurnFailed:
				if p := payloadOf(t, last); p["error"] != c.wantLastError {
					t.Errorf("turn_failed = %s", last.Payload)
				}
			}
			if last.TurnID != "turn-1" {
				t.Errorf("end event on turn %q", last.TurnID)
			}
			if s.LastTurnError != c.wantLastError {
				t.Errorf("LastTurnError = %q, want %q", s.LastTurnError, c.wantLastError)
			}
			if s.Turn != nil || s.Status != StatusWaitingForUserMessage || s.Mode != ModeChat {
				t.Errorf("turn %+v status %q after the turn ended", s.Turn, s.Status)
			}
			if len(s.Messages()) != 2 || s.Messages()[1].Role != RoleAssistant || s.Messages()[1].Sequence != 2 || s.Messages()[1].TurnID != "turn-1" {
				t.Errorf("messages = %+v", s.Messages())
			}
			wantUsage := Usage{ModelCalls: 4, InputTokens: 100}.Add(c.outcome.Usage)
			if s.Usage != wantUsage {
				t.Errorf("session usage = %+v, want %+v", s.Usage, wantUsage)
			}
			if len(events) == 2 {
				p := payloadOf(t, events[0])
				if _, ok := p["recorded"]; !ok {
					t.Errorf("usage_recorded = %s", events[0].Payload)
				}
				if _, ok := p["session"]; !ok {
					t.Errorf("usage_recorded = %s", events[0].Payload)
				}
			}
		})
	}
}

func TestApplyModelOutcomeWithoutATurnDoesNothing(t *testing.T) {
	s := startedState(t)
	records, events := s.ApplyModelOutcome(completed("x"), testNow)
	if records != nil || events != nil || len(s.Messages()) != 0 || s.Usage != (Usage{}) {
		t.Errorf("records=%v events=%v messages=%v usage=%+v", records, eventTypes(events), s.Messages(), s.Usage)
	}
}

func TestBadToolCallIDsFailTheTurn(t *testing.T) {
	cases := []struct {
		name  string
		calls []DeferredToolCall
	}{
		{"empty ID", []DeferredToolCall{call("", "lookup", `{}`, readPolicy)}},
		{"ID with a slash", []DeferredToolCall{call("a/b", "lookup", `{}`, readPolicy)}},
		{"duplicate in one response", []DeferredToolCall{call("c1", "lookup", `{}`, readPolicy), call("c1", "lookup", `{}`, readPolicy)}},
		{"bad ID after a good one", []DeferredToolCall{call("c1", "lookup", `{}`, readPolicy), call("", "lookup", `{}`, readPolicy)}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s := inTurn(t, "x")
			records, events := s.ApplyModelOutcome(requested(allBuiltIns, c.calls...), testNow)
			if records != nil {
				t.Errorf("records = %v", records)
			}
			wantEvents(t, events, EventUsageRecorded, EventTurnFailed)
			if !strings.HasPrefix(s.LastTurnError, ToolCallIDError) {
				t.Errorf("LastTurnError = %q, want it to start with %q", s.LastTurnError, ToolCallIDError)
			}
			if p := payloadOf(t, events[1]); p["error"] != s.LastTurnError {
				t.Errorf("turn_failed = %s", events[1].Payload)
			}
			if s.Turn != nil || s.Status != StatusWaitingForUserMessage || len(s.Interrupts) != 0 {
				t.Errorf("the turn did not end: %+v", s.Turn)
			}
			if len(s.Messages()) != 1 {
				t.Errorf("messages = %+v, want only the user's: the answer is not stored", s.Messages())
			}
			if s.Usage.ModelCalls != 1 {
				t.Errorf("the model call's usage was not recorded: %+v", s.Usage)
			}
		})
	}
}

func TestToolCallIDRepeatedFromAnEarlierModelCallFailsTheTurn(t *testing.T) {
	s := inTurn(t, "x")
	s.ApplyModelOutcome(requested(allBuiltIns, call("c1", "lookup", `{"id":"7"}`, readPolicy)), testNow)
	s.RecordToolOutcome("c1", ToolOutcome{Kind: ToolResultSucceeded, Output: "order 7"})
	s.ResumeTurn()
	before := len(s.Messages())

	_, events := s.ApplyModelOutcome(requested(allBuiltIns, call("c1", "lookup", `{"id":"8"}`, readPolicy)), testNow)
	wantEvents(t, events, EventUsageRecorded, EventTurnFailed)
	if !strings.HasPrefix(s.LastTurnError, ToolCallIDError) || !strings.Contains(s.LastTurnError, `"c1"`) {
		t.Errorf("LastTurnError = %q", s.LastTurnError)
	}
	// The earlier call's result is already stored; the failure adds the note.
	if len(s.Messages()) != before+1 {
		t.Fatalf("messages = %+v", s.Messages())
	}
	note := s.Messages()[len(s.Messages())-1]
	wantNote := TurnFailureNoteHeader + "\n- lookup {\"id\":\"7\"} -> succeeded: order 7\n" + TurnFailureNoteFooter
	if note.Role != RoleUser || note.Text != wantNote {
		t.Errorf("note = %+v, want %q", note, wantNote)
	}

	// IDs may repeat in a later turn.
	if _, err := s.QueueUserMessage("again"); err != nil {
		t.Fatal(err)
	}
	s.BeginTurn()
	records, _ := s.ApplyModelOutcome(requested(allBuiltIns, call("c1", "lookup", `{}`, readPolicy)), testNow)
	if len(records) != 1 || s.Turn == nil {
		t.Errorf("a tool call ID of an earlier turn was refused")
	}
}

func TestResumeTurnStoresResultsInModelOrderOnce(t *testing.T) {
	s := inTurn(t, "x")
	s.ApplyModelOutcome(requested(allBuiltIns,
		call("a", "first", `{}`, readPolicy),
		call("b", "second", `{}`, readPolicy),
		call("c", "third", `{}`, readPolicy),
	), testNow)
	// Results arrive out of model order.
	s.RecordToolOutcome("c", ToolOutcome{Kind: ToolResultSucceeded, Output: "C"})
	if s.ToolCallsFinal() {
		t.Fatal("ToolCallsFinal with two calls running")
	}
	s.RecordToolOutcome("a", ToolOutcome{Kind: ToolResultFailed, Error: "boom"})
	s.RecordToolOutcome("b", ToolOutcome{Kind: ToolResultOutcomeUnknown})
	if !s.ToolCallsFinal() {
		t.Fatal("ToolCallsFinal is false with every call final")
	}
	before := len(s.Messages())
	s.ResumeTurn()
	if s.Status != StatusRunningModel {
		t.Errorf("status = %q", s.Status)
	}
	got := s.Messages()[before:]
	want := []Message{
		{Sequence: 3, TurnID: "turn-1", Role: RoleTool, ToolCallID: "a", ToolName: "first", Text: "The tool call failed: boom"},
		{Sequence: 4, TurnID: "turn-1", Role: RoleTool, ToolCallID: "b", ToolName: "second", Text: OutcomeUnknownText},
		{Sequence: 5, TurnID: "turn-1", Role: RoleTool, ToolCallID: "c", ToolName: "third", Text: "C"},
	}
	if len(got) != len(want) {
		t.Fatalf("stored %+v", got)
	}
	for i := range want {
		g := got[i]
		if g.Sequence != want[i].Sequence || g.TurnID != want[i].TurnID || g.Role != want[i].Role || g.ToolCallID != want[i].ToolCallID || g.ToolName != want[i].ToolName || g.Text != want[i].Text {
			t.Errorf("result %d = %+v, want %+v", i, g, want[i])
		}
	}
	for _, r := range s.Turn.ToolCalls {
		if !r.ResultStored {
			t.Errorf("record %s not marked stored", r.ID)
		}
	}
	s.ResumeTurn()
	if len(s.Messages()) != before+3 {
		t.Errorf("a second ResumeTurn stored %d more messages", len(s.Messages())-before-3)
	}

	tc, err := s.TurnContext("turn-1")
	if err != nil {
		t.Fatalf("TurnContext after ResumeTurn: %v", err)
	}
	if tc.RunState != `{"modelCalls":1}` {
		t.Errorf("TurnContext.RunState = %q, want the run state of the turn's last tool call request", tc.RunState)
	}
	if tc.ModelCalls != 1 || len(tc.ToolCalls) != 3 || len(tc.Messages) != before+3 || tc.SessionID != "s1" || tc.Mode != ModeChat {
		t.Errorf("TurnContext = %+v", tc)
	}
	tc.ToolCalls[0].Status = ToolCallSucceeded
	if s.Turn.ToolCalls[0].Status != ToolCallFailed {
		t.Error("TurnContext shares the turn's records")
	}
}

func TestResumeTurnWithoutATurnDoesNothing(t *testing.T) {
	s := startedState(t)
	s.ResumeTurn()
	if s.Status != StatusWaitingForUserMessage || !s.ToolCallsFinal() {
		t.Errorf("status = %q", s.Status)
	}
}

func TestTurnContextRefusesAnotherTurn(t *testing.T) {
	s := startedState(t)
	if _, err := s.TurnContext("turn-1"); err == nil {
		t.Error("TurnContext without a turn")
	}
	s = inTurn(t, "x")
	if _, err := s.TurnContext("turn-2"); err == nil {
		t.Error("TurnContext for another turn")
	}
	tc, err := s.TurnContext("turn-1")
	if err != nil || tc.TurnID != "turn-1" || tc.RunState != "" || tc.ModelCalls != 0 || len(tc.Messages) != 1 {
		t.Errorf("TurnContext = %+v, %v", tc, err)
	}
}

func TestFailTurn(t *testing.T) {
	s := inTurn(t, "x")
	s.LastTurnError = ""
	s.ApplyModelOutcome(requested(allBuiltIns,
		call("a", "lookup", `{"id":"7"}`, readPolicy),
		call("b", "refund", `{"id":"7","cents":100}`, writePolicy),
		call("c", "save", `{}`, idemPolicy),
		call("d", "ask_user", `{"question":"Ship?"}`, unknownPolicy),
	), testNow)
	s.RecordToolOutcome("c", ToolOutcome{Kind: ToolResultOutcomeUnknown, Error: "timeout"})
	s.RecordToolOutcome("a", ToolOutcome{Kind: ToolResultSucceeded, Output: "order 7"})
	before := len(s.Messages())

	events := s.FailTurn("model unavailable")
	wantEvents(t, events, EventTurnFailed)
	if p := payloadOf(t, events[0]); p["error"] != "model unavailable" || events[0].TurnID != "turn-1" {
		t.Errorf("turn_failed = %s", events[0].Payload)
	}
	if s.LastTurnError != "model unavailable" || s.Turn != nil || s.Status != StatusWaitingForUserMessage || len(s.Interrupts) != 0 {
		t.Errorf("after FailTurn: error %q turn %v status %q interrupts %v", s.LastTurnError, s.Turn, s.Status, s.Interrupts)
	}
	stored := s.Messages()[before:]
	if len(stored) != 3 {
		t.Fatalf("stored %+v, want two results and a note", stored)
	}
	if stored[0].ToolCallID != "a" || stored[0].Text != "order 7" || stored[1].ToolCallID != "c" || stored[1].Text != OutcomeUnknownText+" (timeout)" {
		t.Errorf("results = %+v", stored[:2])
	}
	wantNote := TurnFailureNoteHeader + "\n" +
		"- lookup {\"id\":\"7\"} -> succeeded: order 7\n" +
		"- save {} -> outcome_unknown: " + OutcomeUnknownText + " (timeout)\n" +
		TurnFailureNoteFooter
	if stored[2].Role != RoleUser || stored[2].Text != wantNote || stored[2].TurnID != "turn-1" {
		t.Errorf("note = %+v\nwant %q", stored[2], wantNote)
	}

	// The next turn that completes clears the error.
	if _, err := s.QueueUserMessage("again"); err != nil {
		t.Fatal(err)
	}
	s.BeginTurn()
	s.ApplyModelOutcome(completed("fine"), testNow)
	if s.LastTurnError != "" {
		t.Errorf("LastTurnError = %q after a completed turn", s.LastTurnError)
	}
}

func TestFailTurnWithoutFinalRecordsStoresNoNote(t *testing.T) {
	s := inTurn(t, "x")
	s.ApplyModelOutcome(requested(allBuiltIns, call("b", "refund", `{}`, writePolicy)), testNow)
	before := len(s.Messages())
	events := s.FailTurn("crashed")
	wantEvents(t, events, EventTurnFailed)
	if len(s.Messages()) != before {
		t.Errorf("stored %+v", s.Messages()[before:])
	}
	if s.LastTurnError != "crashed" {
		t.Errorf("LastTurnError = %q", s.LastTurnError)
	}

	s = inTurn(t, "y")
	events = s.FailTurn("failed before any tool")
	wantEvents(t, events, EventTurnFailed)
	if len(s.Messages()) != 1 {
		t.Errorf("messages = %+v", s.Messages())
	}

	idle := startedState(t)
	if events := idle.FailTurn("nothing"); events != nil || idle.LastTurnError != "" {
		t.Errorf("FailTurn without a turn: %v %q", eventTypes(events), idle.LastTurnError)
	}
}

func TestFailTurnKeepsInterruptsOfOtherTurns(t *testing.T) {
	s := approvalsTurn(t)
	foreign := Interrupt{ID: "other", TurnID: "turn-9"}
	s.Interrupts = append(s.Interrupts, foreign)
	s.FailTurn("x")
	if len(s.Interrupts) != 1 || s.Interrupts[0].ID != "other" {
		t.Errorf("interrupts = %+v, want only the other turn's", s.Interrupts)
	}
}

func TestApplyModelOutcomeContinuesTheTurn(t *testing.T) {
	s := inTurn(t, "decide")
	records, events := s.ApplyModelOutcome(ModelOutcome{
		Kind: OutcomeTurnContinued, RunState: `{"modelCalls":1,"continuations":1}`,
		NewMessages: []Message{{Role: RoleAssistant, Text: "maybe"}, {Role: RoleUser, Text: "Be sure."}},
		Usage:       Usage{ModelCalls: 1},
	}, testNow)
	if records != nil {
		t.Errorf("records = %+v", records)
	}
	wantEvents(t, events, EventUsageRecorded)
	if s.Turn == nil || s.Status != StatusRunningModel || s.Turn.RunState != `{"modelCalls":1,"continuations":1}` || s.Turn.ModelCalls != 1 {
		t.Fatalf("after a continuation: status %q, turn %+v", s.Status, s.Turn)
	}
	last := s.Messages()[len(s.Messages())-1]
	if len(s.Messages()) != 3 || last.Role != RoleUser || last.Text != "Be sure." || last.TurnID != "turn-1" {
		t.Errorf("messages = %+v, want the continuation stored as user text of the turn", s.Messages())
	}
	if _, err := s.TurnContext("turn-1"); err != nil {
		t.Errorf("the next model call cannot load the turn: %v", err)
	}
}
