package session

import (
	"encoding/json"
	"errors"
	"slices"
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
