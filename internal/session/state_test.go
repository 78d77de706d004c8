package session

import (
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stepwise-run/stepwise/pkg/agent"
)

var testNow = time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)

var (
	readPolicy    = agent.Policy{Effect: agent.EffectRead}
	writePolicy   = agent.Policy{Effect: agent.EffectNonIdempotentWrite}
	idemPolicy    = agent.Policy{Effect: agent.EffectIdempotentWrite}
	unknownPolicy = agent.Policy{Effect: agent.EffectUnclassified}
)

// allBuiltIns enables every built-in tool, with an interrupt deadline of a
// minute and durable waits of up to an hour.
var allBuiltIns = TurnOptions{
	BuiltInTools:      []agent.BuiltInTool{agent.BuiltInAskUser, agent.BuiltInDurableWait, agent.BuiltInWriteTodos},
	InterruptDeadline: time.Minute,
	MaxDurableWait:    time.Hour,
}

func startedState(t *testing.T) *State {
	t.Helper()
	s := NewState("s1")
	if events := s.Start(StartInput{RequestID: "req-1"}); events != nil {
		t.Fatalf("Start without a message returned events %v", eventTypes(events))
	}
	return s
}

// inTurn returns a started session running the model for a turn begun with
// text.
func inTurn(t *testing.T, text string) *State {
	t.Helper()
	s := startedState(t)
	if _, err := s.QueueUserMessage(text); err != nil {
		t.Fatal(err)
	}
	if events := s.BeginTurn(); len(events) != 1 {
		t.Fatalf("BeginTurn events = %v", eventTypes(events))
	}
	return s
}

func call(id, name, args string, p agent.Policy) DeferredToolCall {
	return DeferredToolCall{ID: id, Name: name, Arguments: args, Policy: p}
}

// requested is a ToolCallsRequested outcome whose answer message asks for
// the calls.
func requested(opts TurnOptions, calls ...DeferredToolCall) ModelOutcome {
	answer := Message{Role: RoleAssistant}
	for _, c := range calls {
		answer.ToolCalls = append(answer.ToolCalls, ToolCall{ID: c.ID, Name: c.Name, Arguments: c.Arguments})
	}
	return ModelOutcome{
		Kind: OutcomeToolCallsRequested, NewMessages: []Message{answer}, ToolCalls: calls,
		RunState: `{"modelCalls":1}`, Usage: Usage{ModelCalls: 1, InputTokens: 10, OutputTokens: 2}, Options: opts,
	}
}

func completed(text string) ModelOutcome {
	return ModelOutcome{
		Kind:        OutcomeTurnCompleted,
		NewMessages: []Message{{Role: RoleAssistant, Text: text}},
		Usage:       Usage{ModelCalls: 1, InputTokens: 5, OutputTokens: 1},
	}
}

func eventTypes(events []Event) []EventType {
	out := make([]EventType, 0, len(events))
	for _, e := range events {
		out = append(out, e.Type)
	}
	return out
}

func payloadOf(t *testing.T, e Event) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(e.Payload, &m); err != nil {
		t.Fatalf("payload of %s is not an object: %s", e.Type, e.Payload)
	}
	return m
}

func wantEvents(t *testing.T, got []Event, want ...EventType) {
	t.Helper()
	if !slices.Equal(eventTypes(got), want) {
		t.Fatalf("events = %v, want %v", eventTypes(got), want)
	}
}

func isRejection(err error) bool {
	var r *Rejection
	return errors.As(err, &r) && r.Reason != ""
}

func TestStart(t *testing.T) {
	cases := []struct {
		name      string
		message   string
		wantTurn  bool
		wantState Status
	}{
		{"no initial message", "", false, StatusWaitingForUserMessage},
		{"blank initial message", " \n\t", false, StatusWaitingForUserMessage},
		{"initial message", "Refund order 7", true, StatusRunningModel},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s := NewState("s1")
			if s.Started || s.NextSequence != 1 {
				t.Fatalf("NewState = %+v", s)
			}
			events := s.Start(StartInput{RequestID: "req-1", InitialMessage: c.message})
			if !s.Started || s.StartRequestID != "req-1" || s.Status != c.wantState || s.Mode != ModeChat {
				t.Errorf("after Start: started=%v request=%q status=%q mode=%q", s.Started, s.StartRequestID, s.Status, s.Mode)
			}
			if !c.wantTurn {
				if events != nil || s.Turn != nil || len(s.Messages()) != 0 || len(s.Queued) != 0 {
					t.Errorf("a blank initial message started something: events=%v turn=%v messages=%v queued=%v", eventTypes(events), s.Turn, s.Messages(), s.Queued)
				}
				return
			}
			wantEvents(t, events, EventTurnStarted)
			if p := payloadOf(t, events[0]); p["sequence"] != float64(1) || events[0].TurnID != "turn-1" {
				t.Errorf("turn_started = %s on %q", events[0].Payload, events[0].TurnID)
			}
			if s.Turn == nil || s.Turn.ID != "turn-1" || len(s.Queued) != 0 {
				t.Fatalf("turn = %+v queued = %v", s.Turn, s.Queued)
			}
			want := Message{Sequence: 1, TurnID: "turn-1", Role: RoleUser, Text: c.message}
			if len(s.Messages()) != 1 || s.Messages()[0].Sequence != want.Sequence || s.Messages()[0].TurnID != want.TurnID || s.Messages()[0].Role != want.Role || s.Messages()[0].Text != want.Text {
				t.Errorf("messages = %+v, want [%+v]", s.Messages(), want)
			}
		})
	}
}

func TestUserMessages(t *testing.T) {
	notStarted := NewState("s1")
	if err := notStarted.CheckSend(SendRequest{Text: "hello"}); !isRejection(err) {
		t.Errorf("CheckSend before start = %v, want a Rejection", err)
	}
	if _, err := notStarted.QueueUserMessage("hello"); !isRejection(err) || len(notStarted.Queued) != 0 {
		t.Errorf("QueueUserMessage before start = %v, queued %v", err, notStarted.Queued)
	}

	s := startedState(t)
	cases := []struct {
		text   string
		wantOK bool
		wantID string
	}{
		{"", false, ""},
		{"   ", false, ""},
		{"\n\t", false, ""},
		{"first", true, "msg-1"},
		{" second ", true, "msg-2"},
	}
	for _, c := range cases {
		err := s.CheckSend(SendRequest{Text: c.text})
		if (err == nil) != c.wantOK {
			t.Errorf("CheckSend(%q) = %v, want ok=%v", c.text, err, c.wantOK)
		}
		if err != nil && !isRejection(err) {
			t.Errorf("CheckSend(%q) error %T is not a *Rejection", c.text, err)
		}
		m, err := s.QueueUserMessage(c.text)
		if !c.wantOK {
			if !isRejection(err) || m.ID != "" {
				t.Errorf("QueueUserMessage(%q) = %+v, %v; want a Rejection", c.text, m, err)
			}
			continue
		}
		if err != nil || m.ID != c.wantID || m.Text != c.text {
			t.Errorf("QueueUserMessage(%q) = %+v, %v; want ID %s with the text as sent", c.text, m, err, c.wantID)
		}
	}
	if len(s.Queued) != 2 || s.Queued[0].Text != "first" || s.Queued[1].Text != " second " {
		t.Errorf("queued = %+v", s.Queued)
	}
}

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

func TestApplyModelOutcomeRecordsRequestedToolCalls(t *testing.T) {
	no := false
	s := inTurn(t, "refund order 7")
	out := requested(TurnOptions{InterruptDeadline: time.Minute},
		call("c1", "lookup", `{"id":"7"}`, readPolicy),
		call("c2", "refund", `{"id":"7"}`, writePolicy),
		call("c3", "notify", `{}`, agent.Policy{Effect: agent.EffectUnclassified, RequiresApproval: &no}),
		call("c4", "save", `{}`, idemPolicy),
	)
	out.ToolCalls[3].SourceReference = "ref-4"
	records, events := s.ApplyModelOutcome(out, testNow)

	wantEvents(t, events, EventUsageRecorded,
		EventToolCallDeferred,
		EventToolCallDeferred, EventInterruptRaised,
		EventToolCallDeferred,
		EventToolCallDeferred)
	want := []struct {
		id       string
		effect   agent.Effect
		approval bool
		status   ToolCallStatus
	}{
		{"c1", agent.EffectRead, false, ToolCallApproved},
		{"c2", agent.EffectNonIdempotentWrite, true, ToolCallAwaitingApproval},
		{"c3", agent.EffectUnclassified, false, ToolCallApproved},
		{"c4", agent.EffectIdempotentWrite, false, ToolCallApproved},
	}
	if len(records) != len(want) {
		t.Fatalf("records = %d, want %d", len(records), len(want))
	}
	for i, w := range want {
		r := records[i]
		if r.ID != w.id || r.Order != i || r.Effect != w.effect || r.RequiresApproval != w.approval || r.Status != w.status || r.BuiltIn != "" {
			t.Errorf("record %d = %+v, want %+v at order %d", i, *r, w, i)
		}
		if s.Turn.ToolCall(w.id) != r {
			t.Errorf("record %s is not the turn's record", w.id)
		}
	}
	if records[3].SourceReference != "ref-4" {
		t.Errorf("source reference = %q", records[3].SourceReference)
	}

	deferred := payloadOf(t, events[2])
	if deferred["tool_call_id"] != "c2" || deferred["tool_name"] != "refund" || deferred["effect"] != "non_idempotent_write" || deferred["requires_approval"] != true {
		t.Errorf("tool_call_deferred = %s", events[2].Payload)
	}
	raised := payloadOf(t, events[3])
	if raised["interrupt_id"] != "c2" || raised["tool_call_id"] != "c2" || raised["kind"] != "approval" || raised["deadline"] != testNow.Add(time.Minute).Format(time.RFC3339) {
		t.Errorf("interrupt_raised = %s", events[3].Payload)
	}
	if len(s.Interrupts) != 1 {
		t.Fatalf("interrupts = %+v", s.Interrupts)
	}
	in := s.Interrupts[0]
	if in.ID != "c2" || in.Kind != InterruptApproval || in.TurnID != "turn-1" || in.ToolName != "refund" || in.Arguments != `{"id":"7"}` || in.Deadline == nil || !in.Deadline.Equal(testNow.Add(time.Minute)) {
		t.Errorf("interrupt = %+v", in)
	}

	if s.Status != StatusRunningTools || s.Turn.RunState != `{"modelCalls":1}` || s.Turn.ModelCalls != 1 || s.Turn.Usage.InputTokens != 10 {
		t.Errorf("status %q turn %+v", s.Status, s.Turn)
	}
	if len(s.Messages()) != 2 || len(s.Messages()[1].ToolCalls) != 4 || s.Messages()[1].TurnID != "turn-1" {
		t.Errorf("the answer asking for tools was not stored: %+v", s.Messages())
	}
	if s.ToolCallsFinal() {
		t.Error("ToolCallsFinal with calls still to run")
	}
	if _, err := s.TurnContext("turn-1"); err == nil {
		t.Error("TurnContext served a model call while tools run")
	}
}

func TestApplyModelOutcomeWithoutDeadlineRaisesOpenInterrupts(t *testing.T) {
	s := inTurn(t, "x")
	s.ApplyModelOutcome(requested(TurnOptions{}, call("c1", "refund", `{}`, writePolicy)), testNow)
	if len(s.Interrupts) != 1 || s.Interrupts[0].Deadline != nil {
		t.Errorf("interrupts = %+v, want one without a deadline", s.Interrupts)
	}
}

func TestBuiltInToolCallsAreRouted(t *testing.T) {
	disabled := TurnOptions{InterruptDeadline: time.Minute, MaxDurableWait: time.Hour}
	cases := []struct {
		name         string
		opts         TurnOptions
		call         DeferredToolCall
		wantStatus   ToolCallStatus
		wantBuiltIn  agent.BuiltInTool
		wantEffect   agent.Effect
		wantApproval bool
		wantError    string
		wantEvents   []EventType
		wantKind     InterruptKind
	}{
		{name: "ask_user enabled",
			opts: allBuiltIns, call: call("q1", "ask_user", `{"question":"Ship?","choices":["yes","no"]}`, unknownPolicy),
			wantStatus: ToolCallAwaitingAnswer, wantBuiltIn: agent.BuiltInAskUser, wantEffect: agent.EffectRead,
			wantEvents: []EventType{EventToolCallDeferred, EventInterruptRaised}, wantKind: InterruptQuestion},
		{name: "ask_user enabled with invalid arguments fails at once",
			opts: allBuiltIns, call: call("q1", "ask_user", `{"question":""}`, unknownPolicy),
			wantStatus: ToolCallFailed, wantBuiltIn: agent.BuiltInAskUser, wantEffect: agent.EffectRead,
			wantError:  "invalid ask_user arguments: question must be a non-blank string",
			wantEvents: []EventType{EventToolCallDeferred, EventToolCallFinished}},
		{name: "ask_user disabled is an ordinary tool",
			opts: disabled, call: call("q1", "ask_user", `{"question":"Ship?"}`, unknownPolicy),
			wantStatus: ToolCallAwaitingApproval, wantEffect: agent.EffectUnclassified, wantApproval: true,
			wantEvents: []EventType{EventToolCallDeferred, EventInterruptRaised}, wantKind: InterruptApproval},
		{name: "durable_wait enabled",
			opts: allBuiltIns, call: call("w1", "durable_wait", `{"duration_seconds":30,"reason":"build"}`, writePolicy),
			wantStatus: ToolCallWaitingForTimer, wantBuiltIn: agent.BuiltInDurableWait, wantEffect: agent.EffectRead,
			wantEvents: []EventType{EventToolCallDeferred, EventTimerStarted}},
		{name: "durable_wait enabled over the maximum fails at once",
			opts: allBuiltIns, call: call("w1", "durable_wait", `{"duration_seconds":3601,"reason":"build"}`, writePolicy),
			wantStatus: ToolCallFailed, wantBuiltIn: agent.BuiltInDurableWait, wantEffect: agent.EffectRead,
			wantError:  "invalid durable_wait arguments: duration_seconds must be a whole number of seconds from 1 to 3600",
			wantEvents: []EventType{EventToolCallDeferred, EventToolCallFinished}},
		{name: "durable_wait disabled is an ordinary tool",
			opts: disabled, call: call("w1", "durable_wait", `{"duration_seconds":30,"reason":"build"}`, readPolicy),
			wantStatus: ToolCallApproved, wantEffect: agent.EffectRead,
			wantEvents: []EventType{EventToolCallDeferred}},
		{name: "write_todos enabled settles in the commit",
			opts: allBuiltIns, call: call("p1", "write_todos", `{"todos":[]}`, unknownPolicy),
			wantStatus: ToolCallSucceeded, wantBuiltIn: agent.BuiltInWriteTodos, wantEffect: agent.EffectRead,
			wantEvents: []EventType{EventToolCallDeferred, EventToolCallFinished, EventPlanUpdated}},
		{name: "write_todos disabled is an ordinary tool",
			opts: disabled, call: call("p1", "write_todos", `{}`, idemPolicy),
			wantStatus: ToolCallApproved, wantEffect: agent.EffectIdempotentWrite,
			wantEvents: []EventType{EventToolCallDeferred}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s := inTurn(t, "x")
			records, events := s.ApplyModelOutcome(requested(c.opts, c.call), testNow)
			wantEvents(t, events, append([]EventType{EventUsageRecorded}, c.wantEvents...)...)
			r := records[0]
			if r.Status != c.wantStatus || r.BuiltIn != c.wantBuiltIn || r.Effect != c.wantEffect || r.RequiresApproval != c.wantApproval || r.Error != c.wantError {
				t.Errorf("record = %+v", *r)
			}
			deferred := payloadOf(t, events[1])
			if deferred["effect"] != string(c.wantEffect) || deferred["requires_approval"] != c.wantApproval {
				t.Errorf("tool_call_deferred = %s, want the routed effect and approval", events[1].Payload)
			}
			if c.wantStatus == ToolCallFailed {
				if p := payloadOf(t, events[2]); p["status"] != "failed" || p["tool_call_id"] != c.call.ID {
					t.Errorf("tool_call_finished = %s", events[2].Payload)
				}
			}
			if c.wantKind == "" {
				if len(s.Interrupts) != 0 {
					t.Errorf("interrupts = %+v", s.Interrupts)
				}
				return
			}
			if len(s.Interrupts) != 1 || s.Interrupts[0].ID != c.call.ID || s.Interrupts[0].Kind != c.wantKind {
				t.Fatalf("interrupts = %+v, want one %s interrupt named by the tool call ID", s.Interrupts, c.wantKind)
			}
		})
	}
}

func TestAskUserRaisesAQuestion(t *testing.T) {
	s := inTurn(t, "x")
	records, events := s.ApplyModelOutcome(requested(allBuiltIns, call("q1", "ask_user", `{"question":"Ship?","choices":["yes","no"],"allows_free_text":null}`, unknownPolicy)), testNow)
	want := &Question{Text: "Ship?", Choices: []string{"yes", "no"}, AllowsFreeText: false}
	q := records[0].Question
	if q == nil || q.Text != want.Text || !slices.Equal(q.Choices, want.Choices) || q.AllowsFreeText {
		t.Errorf("question = %+v, want %+v", q, want)
	}
	raised := payloadOf(t, events[2])
	if raised["kind"] != "question" || raised["question"] != "Ship?" || raised["allows_free_text"] != false || raised["interrupt_id"] != "q1" {
		t.Errorf("interrupt_raised = %s", events[2].Payload)
	}
	if choices, _ := raised["choices"].([]any); len(choices) != 2 || choices[0] != "yes" {
		t.Errorf("interrupt_raised choices = %v", raised["choices"])
	}
	in := s.Interrupts[0]
	if in.Question == nil || in.Question.Text != "Ship?" || in.Deadline == nil || !in.Deadline.Equal(testNow.Add(time.Minute)) {
		t.Errorf("interrupt = %+v", in)
	}
}

func TestDurableWaitStartsATimer(t *testing.T) {
	s := inTurn(t, "x")
	records, events := s.ApplyModelOutcome(requested(allBuiltIns, call("w1", "durable_wait", `{"duration_seconds":30,"reason":"build"}`, unknownPolicy)), testNow)
	r := records[0]
	if r.WaitUntil == nil || !r.WaitUntil.Equal(testNow.Add(30*time.Second)) || r.WaitReason != "build" {
		t.Errorf("record = %+v", *r)
	}
	started := payloadOf(t, events[2])
	if started["tool_call_id"] != "w1" || started["reason"] != "build" || started["wait_until"] != testNow.Add(30*time.Second).Format(time.RFC3339) {
		t.Errorf("timer_started = %s", events[2].Payload)
	}
	if WaitStep(*r) != StepAwaitTimer {
		t.Errorf("WaitStep = %q", WaitStep(*r))
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

// approvalsTurn is a turn waiting on an approval (w1), a question with
// choices (q1), a free-text question (q2), a durable wait (t1) and a read
// (r1), with interrupts that expire a minute after testNow.
func approvalsTurn(t *testing.T) *State {
	t.Helper()
	s := inTurn(t, "x")
	s.ApplyModelOutcome(requested(allBuiltIns,
		call("w1", "refund", `{"id":"7"}`, writePolicy),
		call("q1", "ask_user", `{"question":"Ship?","choices":["yes","no"]}`, unknownPolicy),
		call("q2", "ask_user", `{"question":"Why?"}`, unknownPolicy),
		call("t1", "durable_wait", `{"duration_seconds":30,"reason":"build"}`, unknownPolicy),
		call("r1", "lookup", `{}`, readPolicy),
	), testNow)
	if len(s.Interrupts) != 3 {
		t.Fatalf("interrupts = %+v", s.Interrupts)
	}
	return s
}

func TestResolveAndAnswerRefusals(t *testing.T) {
	deadline := testNow.Add(time.Minute)
	resolves := []struct {
		name string
		req  ResolveRequest
		at   time.Time
	}{
		{"unknown interrupt", ResolveRequest{InterruptID: "nope", Approved: true}, testNow},
		{"a call without an interrupt", ResolveRequest{InterruptID: "r1", Approved: true}, testNow},
		{"a durable wait", ResolveRequest{InterruptID: "t1", Approved: false}, testNow},
		{"approval at its deadline", ResolveRequest{InterruptID: "w1", Approved: true}, deadline},
		{"approval past its deadline", ResolveRequest{InterruptID: "w1", Approved: false}, deadline.Add(time.Second)},
		{"approving a question", ResolveRequest{InterruptID: "q1", Approved: true}, testNow},
		{"declining a question past its deadline", ResolveRequest{InterruptID: "q1", Approved: false}, deadline},
	}
	for _, c := range resolves {
		t.Run("resolve "+c.name, func(t *testing.T) {
			s := approvalsTurn(t)
			if err := s.CheckResolve(c.req, c.at); !isRejection(err) {
				t.Errorf("CheckResolve = %v, want a Rejection", err)
			}
			events, err := s.Resolve(c.req, c.at)
			if !isRejection(err) || events != nil {
				t.Errorf("Resolve = %v, %v; want a Rejection and no events", eventTypes(events), err)
			}
			assertUnchangedWaits(t, s)
		})
	}
	answers := []struct {
		name string
		req  AnswerRequest
		at   time.Time
	}{
		{"unknown interrupt", AnswerRequest{InterruptID: "nope", Answer: "yes"}, testNow},
		{"an approval", AnswerRequest{InterruptID: "w1", Answer: "yes"}, testNow},
		{"a durable wait", AnswerRequest{InterruptID: "t1", Answer: "yes"}, testNow},
		{"blank answer", AnswerRequest{InterruptID: "q2", Answer: "  "}, testNow},
		{"empty answer to choices", AnswerRequest{InterruptID: "q1", Answer: ""}, testNow},
		{"answer not in choices", AnswerRequest{InterruptID: "q1", Answer: "maybe"}, testNow},
		{"answer at the deadline", AnswerRequest{InterruptID: "q1", Answer: "yes"}, deadline},
		{"free text past the deadline", AnswerRequest{InterruptID: "q2", Answer: "because"}, deadline.Add(time.Hour)},
	}
	for _, c := range answers {
		t.Run("answer "+c.name, func(t *testing.T) {
			s := approvalsTurn(t)
			if err := s.CheckAnswer(c.req, c.at); !isRejection(err) {
				t.Errorf("CheckAnswer = %v, want a Rejection", err)
			}
			events, err := s.Answer(c.req, c.at)
			if !isRejection(err) || events != nil {
				t.Errorf("Answer = %v, %v; want a Rejection and no events", eventTypes(events), err)
			}
			assertUnchangedWaits(t, s)
		})
	}
}

func assertUnchangedWaits(t *testing.T, s *State) {
	t.Helper()
	if len(s.Interrupts) != 3 {
		t.Errorf("interrupts = %+v, want all three still pending", s.Interrupts)
	}
	want := map[string]ToolCallStatus{"w1": ToolCallAwaitingApproval, "q1": ToolCallAwaitingAnswer, "q2": ToolCallAwaitingAnswer, "t1": ToolCallWaitingForTimer, "r1": ToolCallApproved}
	for id, status := range want {
		if got := s.Turn.ToolCall(id).Status; got != status {
			t.Errorf("record %s = %q, want %q", id, got, status)
		}
	}
}

func TestResolveApproval(t *testing.T) {
	s := approvalsTurn(t)
	req := ResolveRequest{InterruptID: "w1", Approved: true}
	if err := s.CheckResolve(req, testNow); err != nil {
		t.Fatalf("CheckResolve = %v", err)
	}
	events, err := s.Resolve(req, testNow)
	if err != nil {
		t.Fatal(err)
	}
	wantEvents(t, events, EventInterruptResolved)
	if p := payloadOf(t, events[0]); p["interrupt_id"] != "w1" || p["approved"] != true || p["kind"] != "approval" || p["answered"] != false {
		t.Errorf("interrupt_resolved = %s", events[0].Payload)
	}
	if r := s.Turn.ToolCall("w1"); r.Status != ToolCallApproved {
		t.Errorf("record = %+v", *r)
	}
	if _, ok := s.Interrupt("w1"); ok || len(s.Interrupts) != 2 {
		t.Errorf("the interrupt was not removed: %+v", s.Interrupts)
	}
	if _, err := s.Resolve(req, testNow); !isRejection(err) {
		t.Errorf("a second resolution = %v, want a Rejection", err)
	}
	if ToolStep(s.Turn.ToolCall("w1").Effect) != StepCallSingleAttemptTool {
		t.Error("an approved non-idempotent write does not go to CallSingleAttemptTool")
	}
}

func TestResolveRejectionAndDecline(t *testing.T) {
	cases := []struct {
		name          string
		req           ResolveRequest
		wantKind      string
		wantOutput    string
		wantRejection string
		wantDescribe  string
	}{
		{"rejected approval", ResolveRequest{InterruptID: "w1", RejectionMessage: "too much"}, "approval", "", "too much",
			"The user rejected the tool call: too much"},
		{"declined question", ResolveRequest{InterruptID: "q1", RejectionMessage: "ignored"}, "question", DeclinedAnswerText, "",
			"The user declined to answer."},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s := approvalsTurn(t)
			events, err := s.Resolve(c.req, testNow)
			if err != nil {
				t.Fatal(err)
			}
			wantEvents(t, events, EventInterruptResolved, EventToolCallFinished)
			resolved := payloadOf(t, events[0])
			if resolved["approved"] != false || resolved["kind"] != c.wantKind || resolved["answered"] != false {
				t.Errorf("interrupt_resolved = %s", events[0].Payload)
			}
			if p := payloadOf(t, events[1]); p["status"] != "rejected" || p["tool_call_id"] != c.req.InterruptID {
				t.Errorf("tool_call_finished = %s", events[1].Payload)
			}
			r := s.Turn.ToolCall(c.req.InterruptID)
			if r.Status != ToolCallRejected || r.Output != c.wantOutput || r.RejectionMessage != c.wantRejection {
				t.Errorf("record = %+v", *r)
			}
			if got := DescribeOutcome(*r); got != c.wantDescribe {
				t.Errorf("DescribeOutcome = %q, want %q", got, c.wantDescribe)
			}
			if _, ok := s.Interrupt(c.req.InterruptID); ok {
				t.Error("the interrupt is still pending")
			}
		})
	}
}

func TestAnswerQuestion(t *testing.T) {
	cases := []struct {
		id, answer string
		wantOutput string
	}{
		{"q1", "yes", `{"status":"answered","answer":"yes"}`},
		{"q2", `ship "today" <asap> & thanks`, `{"status":"answered","answer":"ship \"today\" <asap> & thanks"}`},
	}
	for _, c := range cases {
		t.Run(c.id, func(t *testing.T) {
			s := approvalsTurn(t)
			req := AnswerRequest{InterruptID: c.id, Answer: c.answer}
			if err := s.CheckAnswer(req, testNow); err != nil {
				t.Fatalf("CheckAnswer = %v", err)
			}
			events, err := s.Answer(req, testNow)
			if err != nil {
				t.Fatal(err)
			}
			wantEvents(t, events, EventInterruptResolved, EventToolCallFinished)
			if p := payloadOf(t, events[0]); p["approved"] != true || p["answered"] != true || p["kind"] != "question" {
				t.Errorf("interrupt_resolved = %s", events[0].Payload)
			}
			r := s.Turn.ToolCall(c.id)
			if r.Status != ToolCallSucceeded || r.Output != c.wantOutput {
				t.Errorf("record status %q output %q, want %q", r.Status, r.Output, c.wantOutput)
			}
			if _, err := s.Answer(req, testNow); !isRejection(err) {
				t.Errorf("a second answer = %v, want a Rejection", err)
			}
		})
	}
}

func TestExpireInterrupt(t *testing.T) {
	deadline := testNow.Add(time.Minute)
	cases := []struct {
		name          string
		id            string
		at            time.Time
		wantExpired   bool
		wantOutput    string
		wantRejection string
	}{
		{"approval before its deadline", "w1", deadline.Add(-time.Second), false, "", ""},
		{"question before its deadline", "q1", testNow, false, "", ""},
		{"unknown interrupt", "nope", deadline, false, "", ""},
		{"approval at its deadline", "w1", deadline, true, "", ApprovalDeadlineText},
		{"approval after its deadline", "w1", deadline.Add(time.Hour), true, "", ApprovalDeadlineText},
		{"question at its deadline", "q1", deadline, true, QuestionDeadlineText, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s := approvalsTurn(t)
			events := s.ExpireInterrupt(c.id, c.at)
			if !c.wantExpired {
				if events != nil {
					t.Errorf("events = %v", eventTypes(events))
				}
				assertUnchangedWaits(t, s)
				return
			}
			wantEvents(t, events, EventInterruptResolved, EventToolCallFinished)
			if p := payloadOf(t, events[0]); p["approved"] != false || p["answered"] != false {
				t.Errorf("interrupt_resolved = %s", events[0].Payload)
			}
			r := s.Turn.ToolCall(c.id)
			if r.Status != ToolCallRejected || r.Output != c.wantOutput || r.RejectionMessage != c.wantRejection {
				t.Errorf("record = %+v", *r)
			}
			if _, ok := s.Interrupt(c.id); ok {
				t.Error("the expired interrupt is still pending")
			}
			if again := s.ExpireInterrupt(c.id, c.at); again != nil {
				t.Errorf("expiring twice wrote %v", eventTypes(again))
			}
		})
	}
}

func TestExpireInterruptAfterTheAnswerChangesNothing(t *testing.T) {
	s := approvalsTurn(t)
	if _, err := s.Answer(AnswerRequest{InterruptID: "q1", Answer: "no"}, testNow); err != nil {
		t.Fatal(err)
	}
	if events := s.ExpireInterrupt("q1", testNow.Add(time.Hour)); events != nil {
		t.Errorf("events = %v", eventTypes(events))
	}
	if r := s.Turn.ToolCall("q1"); r.Status != ToolCallSucceeded {
		t.Errorf("record = %+v", *r)
	}
}

func TestExpireInterruptWithoutDeadlineChangesNothing(t *testing.T) {
	s := inTurn(t, "x")
	s.ApplyModelOutcome(requested(TurnOptions{}, call("w1", "refund", `{}`, writePolicy)), testNow)
	if events := s.ExpireInterrupt("w1", testNow.Add(1000*time.Hour)); events != nil {
		t.Errorf("events = %v", eventTypes(events))
	}
	if s.Turn.ToolCall("w1").Status != ToolCallAwaitingApproval {
		t.Error("a call without a deadline expired")
	}
}

func TestCompleteTimer(t *testing.T) {
	s := approvalsTurn(t)
	if events := s.CompleteTimer("w1"); events != nil {
		t.Errorf("completing the timer of an approval wrote %v", eventTypes(events))
	}
	if events := s.CompleteTimer("nope"); events != nil {
		t.Errorf("completing an unknown timer wrote %v", eventTypes(events))
	}
	events := s.CompleteTimer("t1")
	wantEvents(t, events, EventToolCallFinished)
	if p := payloadOf(t, events[0]); p["status"] != "succeeded" || p["tool_call_id"] != "t1" || p["tool_name"] != "durable_wait" {
		t.Errorf("tool_call_finished = %s", events[0].Payload)
	}
	r := s.Turn.ToolCall("t1")
	if want := `{"status":"completed","waited_seconds":30,"reason":"build"}`; r.Status != ToolCallSucceeded || r.Output != want {
		t.Errorf("record status %q output %q, want %q", r.Status, r.Output, want)
	}
	if again := s.CompleteTimer("t1"); again != nil {
		t.Errorf("a second firing wrote %v", eventTypes(again))
	}
}

func TestRecordToolOutcome(t *testing.T) {
	cases := []struct {
		name       string
		outcome    ToolOutcome
		wantStatus ToolCallStatus
		wantOutput string
		wantError  string
	}{
		{"succeeded", ToolOutcome{Kind: ToolResultSucceeded, Output: "order 7"}, ToolCallSucceeded, "order 7", ""},
		{"failed", ToolOutcome{Kind: ToolResultFailed, Error: "not found"}, ToolCallFailed, "", "not found"},
		{"outcome unknown", ToolOutcome{Kind: ToolResultOutcomeUnknown, Error: "timed out"}, ToolCallOutcomeUnknown, "", "timed out"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s := approvalsTurn(t)
			events := s.RecordToolOutcome("r1", c.outcome)
			wantEvents(t, events, EventToolCallFinished)
			if p := payloadOf(t, events[0]); p["status"] != string(c.wantStatus) || p["tool_name"] != "lookup" {
				t.Errorf("tool_call_finished = %s", events[0].Payload)
			}
			r := s.Turn.ToolCall("r1")
			if r.Status != c.wantStatus || r.Output != c.wantOutput || r.Error != c.wantError {
				t.Errorf("record = %+v", *r)
			}
			// A final record keeps its outcome.
			if again := s.RecordToolOutcome("r1", ToolOutcome{Kind: ToolResultSucceeded, Output: "later"}); again != nil {
				t.Errorf("recording over a final record wrote %v", eventTypes(again))
			}
			if r.Status != c.wantStatus || r.Output != c.wantOutput {
				t.Errorf("the final record changed: %+v", *r)
			}
		})
	}
	s := approvalsTurn(t)
	if events := s.RecordToolOutcome("nope", ToolOutcome{Kind: ToolResultSucceeded}); events != nil {
		t.Errorf("recording an unknown call wrote %v", eventTypes(events))
	}
	if _, err := s.Resolve(ResolveRequest{InterruptID: "w1"}, testNow); err != nil {
		t.Fatal(err)
	}
	if events := s.RecordToolOutcome("w1", ToolOutcome{Kind: ToolResultSucceeded, Output: "ran"}); events != nil {
		t.Errorf("a rejected call was recorded as run: %v", eventTypes(events))
	}
	if r := s.Turn.ToolCall("w1"); r.Status != ToolCallRejected || r.Output != "" {
		t.Errorf("rejected record changed: %+v", *r)
	}
}

func TestRecordToolStepExhausted(t *testing.T) {
	notRun := ToolCallNotRunPrefix + ": worker lost"
	cases := []struct {
		name       string
		policy     agent.Policy
		started    bool
		wantStatus ToolCallStatus
		wantError  string
		wantRoute  StepName
	}{
		{"read not started", readPolicy, false, ToolCallFailed, notRun, StepRecordToolFailure},
		{"idempotent write not started", idemPolicy, false, ToolCallFailed, notRun, StepRecordToolFailure},
		{"non-idempotent write not started", writePolicy, false, ToolCallFailed, notRun, StepRecordToolOutcomeUnknown},
		{"unclassified not started", unknownPolicy, false, ToolCallFailed, notRun, StepRecordToolOutcomeUnknown},
		{"read", readPolicy, true, ToolCallFailed, "worker lost", StepRecordToolFailure},
		{"idempotent write", idemPolicy, true, ToolCallOutcomeUnknown, "worker lost", StepRecordToolFailure},
		{"non-idempotent write", writePolicy, true, ToolCallOutcomeUnknown, "worker lost", StepRecordToolOutcomeUnknown},
		{"unclassified", unknownPolicy, true, ToolCallOutcomeUnknown, "worker lost", StepRecordToolOutcomeUnknown},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s := inTurn(t, "x")
			no := false
			p := c.policy
			p.RequiresApproval = &no
			s.ApplyModelOutcome(requested(TurnOptions{}, call("c1", "tool", `{}`, p)), testNow)
			if got := FailureRoute(p.Effect); got != c.wantRoute {
				t.Errorf("FailureRoute(%s) = %s, want %s", p.Effect, got, c.wantRoute)
			}
			events := s.RecordToolStepExhausted("c1", c.started, "worker lost")
			wantEvents(t, events, EventToolCallFinished)
			r := s.Turn.ToolCall("c1")
			if r.Status != c.wantStatus || r.Error != c.wantError {
				t.Errorf("record status %q error %q, want %q %q", r.Status, r.Error, c.wantStatus, c.wantError)
			}
			if again := s.RecordToolStepExhausted("c1", true, "other"); again != nil || r.Error != c.wantError {
				t.Errorf("a final record was recorded again: %v %+v", eventTypes(again), *r)
			}
		})
	}
}

func TestStepRouting(t *testing.T) {
	cases := []struct {
		effect agent.Effect
		step   StepName
	}{
		{agent.EffectRead, StepCallTool},
		{agent.EffectIdempotentWrite, StepCallTool},
		{agent.EffectNonIdempotentWrite, StepCallSingleAttemptTool},
		{agent.EffectUnclassified, StepCallSingleAttemptTool},
	}
	for _, c := range cases {
		if got := ToolStep(c.effect); got != c.step {
			t.Errorf("ToolStep(%s) = %s, want %s", c.effect, got, c.step)
		}
	}
	waits := map[ToolCallStatus]StepName{
		ToolCallAwaitingApproval: StepAwaitToolApproval,
		ToolCallAwaitingAnswer:   StepAwaitQuestionAnswer,
		ToolCallWaitingForTimer:  StepAwaitTimer,
		ToolCallApproved:         "",
		ToolCallSucceeded:        "",
	}
	for status, step := range waits {
		if got := WaitStep(ToolCallRecord{Status: status}); got != step {
			t.Errorf("WaitStep(%s) = %q, want %q", status, got, step)
		}
	}
	for _, st := range []ToolCallStatus{ToolCallRejected, ToolCallSucceeded, ToolCallFailed, ToolCallOutcomeUnknown} {
		if !st.Final() {
			t.Errorf("%s is not final", st)
		}
	}
	for _, st := range []ToolCallStatus{ToolCallAwaitingApproval, ToolCallApproved, ToolCallAwaitingAnswer, ToolCallWaitingForTimer, ToolCallWaitingForTask} {
		if st.Final() {
			t.Errorf("%s is final", st)
		}
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

func TestIdempotencyKey(t *testing.T) {
	if got := IdempotencyKey("s1", "turn-2", "c3"); got != "s1/turn-2/c3" {
		t.Errorf("IdempotencyKey = %q", got)
	}
}

func TestTurnOptionsEnabled(t *testing.T) {
	if !allBuiltIns.Enabled(agent.BuiltInDurableWait) {
		t.Error("durable_wait not enabled")
	}
	if (TurnOptions{BuiltInTools: []agent.BuiltInTool{agent.BuiltInAskUser}}).Enabled(agent.BuiltInDurableWait) {
		t.Error("durable_wait enabled by ask_user")
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
