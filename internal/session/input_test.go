package session

import (
	"strings"
	"testing"
	"time"

	"github.com/stepwise-run/stepwise/pkg/agent"
)

// askingTurn is a turn whose calls run without approval.
func askingTurn(t *testing.T, ids ...string) *State {
	t.Helper()
	s := inTurn(t, "go")
	var calls []DeferredToolCall
	for _, id := range ids {
		calls = append(calls, call(id, "order", `{}`, idemPolicy))
	}
	s.ApplyModelOutcome(requested(TurnOptions{InterruptDeadline: time.Minute}, calls...), testNow)
	return s
}

func TestAToolQuestionWaitsUnderItsOwnInterruptID(t *testing.T) {
	s := askingTurn(t, "c1")
	events := s.RequestToolInput("c1", Question{Text: "Which size?", Choices: []string{"S", "M"}}, "size", testNow)
	wantEvents(t, events, EventInterruptRaised)
	in, ok := s.Interrupt("c1-input-1")
	if !ok || in.ToolCallID != "c1" || in.Kind != InterruptQuestion || in.Deadline == nil {
		t.Fatalf("interrupt = %+v, %v", in, ok)
	}
	r := s.Turn.ToolCall("c1")
	if r.Status != ToolCallAwaitingAnswer || r.InputContinuation != "size" || r.InputQuestions != 1 {
		t.Fatalf("record = %+v", r)
	}
	if err := s.CheckAnswer(AnswerRequest{InterruptID: "c1-input-1", Answer: "XL"}, testNow); !isRejection(err) {
		t.Errorf("an answer outside the choices = %v, want a refusal", err)
	}
	if _, err := s.Answer(AnswerRequest{InterruptID: "c1-input-1", Answer: "M"}, testNow); err != nil {
		t.Fatal(err)
	}
	if r.Status != ToolCallApproved || len(r.InputAnswers) != 1 || r.InputAnswers[0].Answer != "M" || r.InputAnswers[0].Resolution != agent.QuestionAnswered {
		t.Fatalf("after the answer the record = %+v, want it back at its tool Step with the answer", r)
	}
	// A second question gets the next ID; its deadline hands it back too.
	s.RequestToolInput("c1", Question{Text: "Colour?", AllowsFreeText: true}, "", testNow)
	if _, ok := s.Interrupt("c1-input-2"); !ok {
		t.Fatal("the second question is not c1-input-2")
	}
	s.ExpireInterrupt("c1-input-2", testNow.Add(time.Hour))
	if r.Status != ToolCallApproved || r.InputAnswers[1].Resolution != agent.QuestionDeadlinePassed {
		t.Fatalf("after the deadline the record = %+v", r)
	}
}

func TestAToolQuestionWhoseIDIsTakenFailsTheCall(t *testing.T) {
	s := askingTurn(t, "c1", "c1-input-1")
	s.RequestToolInput("c1", Question{Text: "Which?", AllowsFreeText: true}, "", testNow)
	r := s.Turn.ToolCall("c1")
	if r.Status != ToolCallFailed || !strings.Contains(r.Error, "c1-input-1 is already used") {
		t.Fatalf("record = %s %q, want failed naming the taken ID", r.Status, r.Error)
	}
}

func TestAToolQuestionThatCannotBeAnsweredFailsTheCall(t *testing.T) {
	s := askingTurn(t, "c1")
	s.RequestToolInput("c1", Question{Text: "Which?"}, "", testNow)
	if r := s.Turn.ToolCall("c1"); r.Status != ToolCallFailed {
		t.Fatalf("record = %s, want failed for a question with no choices and no free text", r.Status)
	}
}

func TestACallWhoseToolAskedIsNeverRecordedAsNotRun(t *testing.T) {
	s := askingTurn(t, "c1")
	s.RequestToolInput("c1", Question{Text: "Which?", AllowsFreeText: true}, "", testNow)
	if _, err := s.Answer(AnswerRequest{InterruptID: "c1-input-1", Answer: "this"}, testNow); err != nil {
		t.Fatal(err)
	}
	s.RecordToolStepExhausted("c1", false, "activity ScheduleToStart timeout")
	if r := s.Turn.ToolCall("c1"); r.Status != ToolCallOutcomeUnknown {
		t.Fatalf("record = %s %q, want outcome_unknown: the tool ran before it asked", r.Status, r.Error)
	}
}

func TestALateToolQuestionIsSettledOnlyInASteeredOrCancelledTurn(t *testing.T) {
	steer := func(t *testing.T, s *State) {
		if _, err := s.Steer(SteerRequest{Text: "stop"}, testNow); err != nil {
			t.Fatal(err)
		}
	}
	cancel := func(t *testing.T, s *State) {
		if _, err := s.CancelTurn(CancelRequest{TurnID: s.Turn.ID}, testNow); err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range []struct {
		name    string
		state   func(t *testing.T) *State
		id      string
		settled bool
		reason  string
	}{
		{"a turn neither steered nor cancelled asks", func(t *testing.T) *State { return askingTurn(t, "c1") }, "c1", false, ""},
		{"a steered turn rejects the call", func(t *testing.T) *State { s := askingTurn(t, "c1"); steer(t, s); return s }, "c1", true, CancelledBySteer},
		{"a cancelled turn rejects the call", func(t *testing.T) *State { s := askingTurn(t, "c1"); cancel(t, s); return s }, "c1", true, CancelledByUser},
		{"a task's question survives a steer", func(t *testing.T) *State { s := taskTurn(t); steer(t, s); return s }, "r1", false, ""},
		{"an unknown call", func(t *testing.T) *State { s := askingTurn(t, "c1"); steer(t, s); return s }, "c9", false, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := tc.state(t)
			events, settled := s.SettleLateQuestion(tc.id)
			if settled != tc.settled {
				t.Fatalf("settled = %v, want %v", settled, tc.settled)
			}
			if !settled {
				if events != nil {
					t.Errorf("an unsettled question wrote %v", eventTypes(events))
				}
				return
			}
			wantEvents(t, events, EventToolCallFinished)
			r := s.Turn.ToolCall(tc.id)
			if r.Status != ToolCallRejected || r.CancellationReason != tc.reason || len(s.Interrupts) != 0 {
				t.Errorf("record = %s (%s), %d interrupts; want rejected for %s and nobody asked", r.Status, r.CancellationReason, len(s.Interrupts), tc.reason)
			}
			// Settled once: a second look changes nothing.
			if again, ok := s.SettleLateQuestion(tc.id); ok || again != nil {
				t.Errorf("a final call was settled again: %v", eventTypes(again))
			}
		})
	}
}
