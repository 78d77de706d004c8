package session

import (
	"testing"
	"time"
)

func TestApplyModelOutcomeWithoutDeadlineRaisesOpenInterrupts(t *testing.T) {
	s := inTurn(t, "x")
	s.ApplyModelOutcome(requested(TurnOptions{}, call("c1", "refund", `{}`, writePolicy)), testNow)
	if len(s.Interrupts) != 1 || s.Interrupts[0].Deadline != nil {
		t.Errorf("interrupts = %+v, want one without a deadline", s.Interrupts)
	}
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
