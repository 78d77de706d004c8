package session

import (
	"strings"
	"testing"
	"time"

	"github.com/stepwise-run/stepwise/pkg/agent"
)

// taskTurn is a turn whose read r1 started task job-1.
func taskTurn(t *testing.T) *State {
	t.Helper()
	s := inTurn(t, "x")
	s.ApplyModelOutcome(requested(allBuiltIns, call("r1", "report", `{}`, readPolicy)), testNow)
	events := s.RecordToolOutcome("r1", ToolOutcome{Kind: ToolResultTaskStarted, TaskID: "job-1", PollInterval: 1500 * time.Millisecond})
	wantEvents(t, events, EventToolTaskStarted)
	if p := payloadOf(t, events[0]); p["task_id"] != "job-1" {
		t.Errorf("tool_task_started = %v", p)
	}
	return s
}

func TestATaskWaitsAndPollsUntilItsResult(t *testing.T) {
	s := taskTurn(t)
	r := s.Turn.ToolCall("r1")
	if r.Status != ToolCallWaitingForTask || TaskPollDue(*r) != 2*time.Second || WaitStep(*r) != StepPollToolTask {
		t.Fatalf("r1 = %+v", r)
	}
	if events := s.RecordToolOutcome("r1", ToolOutcome{Kind: ToolResultTaskPending, PollInterval: time.Minute, InputContinuation: "c"}); events != nil {
		t.Errorf("a pending poll wrote %v", eventTypes(events))
	}
	if r.TaskPollInterval != time.Minute || r.InputContinuation != "c" || r.Status.Final() {
		t.Errorf("after a pending poll: %+v", r)
	}
	wantEvents(t, s.RecordToolOutcome("r1", ToolOutcome{Kind: ToolResultSucceeded, Output: "ready"}), EventToolCallFinished)
}

func TestATaskQuestionIsNeverSteeredAway(t *testing.T) {
	s := taskTurn(t)
	s.RequestToolInput("r1", Question{Text: "Drafts?", Choices: []string{"yes", "no"}}, "q1", testNow)
	if _, err := s.Steer(SteerRequest{Text: "hurry"}, testNow); err != nil {
		t.Fatal(err)
	}
	r := s.Turn.ToolCall("r1")
	if r.Status != ToolCallAwaitingAnswer || len(s.Interrupts) != 1 {
		t.Fatalf("after a steer the task's question is %s with %d interrupts", r.Status, len(s.Interrupts))
	}
	if _, err := s.Answer(AnswerRequest{InterruptID: "r1-input-1", Answer: "no"}, testNow); err != nil {
		t.Fatal(err)
	}
	if r.Status != ToolCallWaitingForTask || r.TaskAnswer == nil || r.TaskAnswer.Answer != "no" || TaskPollDue(*r) != 0 || len(r.InputAnswers) != 0 {
		t.Errorf("after the answer: %+v", r)
	}
	s.RecordToolOutcome("r1", ToolOutcome{Kind: ToolResultTaskPending, PollInterval: time.Second})
	if r.TaskAnswer != nil {
		t.Error("the answer is handed over again after a poll took it")
	}
}

func TestCancelTurnAbandonsTasks(t *testing.T) {
	s := taskTurn(t)
	s.RequestToolInput("r1", Question{Text: "Drafts?", AllowsFreeText: true}, "", testNow)
	events, err := s.CancelTurn(CancelRequest{TurnID: "turn-1"}, testNow)
	if err != nil {
		t.Fatal(err)
	}
	wantEvents(t, events, EventInterruptResolved)
	r := s.Turn.ToolCall("r1")
	if !r.TaskAbandoned || r.Status != ToolCallWaitingForTask || len(s.Interrupts) != 0 {
		t.Fatalf("after the cancel: %+v, interrupts %v", r, s.Interrupts)
	}
	wantEvents(t, s.RecordTaskAbandoned("r1"), EventToolCallFinished)
	if r.Status != ToolCallOutcomeUnknown || r.CancellationReason != CancelledByUser || r.Error != TaskAbandonedText {
		t.Errorf("r1 = %s (%s): %s", r.Status, r.CancellationReason, r.Error)
	}
}

func TestATaskStartedAfterACancelIsAbandoned(t *testing.T) {
	s := inTurn(t, "x")
	s.ApplyModelOutcome(requested(allBuiltIns, call("w1", "report", `{}`, agent.Policy{Effect: agent.EffectIdempotentWrite})), testNow)
	if _, err := s.CancelTurn(CancelRequest{TurnID: "turn-1"}, testNow); err != nil {
		t.Fatal(err)
	}
	s.RecordToolOutcome("w1", ToolOutcome{Kind: ToolResultTaskStarted, TaskID: "job-2"})
	if r := s.Turn.ToolCall("w1"); !r.TaskAbandoned {
		t.Errorf("w1 = %+v, want its task abandoned", r)
	}
}

func TestCheckedTaskStartedKeepsOnlyAnIDTheSessionCanFollow(t *testing.T) {
	write := ToolCallRecord{Name: "publish", Effect: agent.EffectNonIdempotentWrite}
	read := ToolCallRecord{Name: "report", Effect: agent.EffectRead}
	started := func(id string) ToolOutcome {
		return ToolOutcome{Kind: ToolResultTaskStarted, TaskID: id, PollInterval: time.Second}
	}
	cases := []struct {
		name   string
		record ToolCallRecord
		out    ToolOutcome
		kind   ToolOutcomeKind
		error  string
	}{
		{"an ID of the limit", write, started(strings.Repeat("a", MaxTaskIDBytes)), ToolResultTaskStarted, ""},
		{"a write's ID over it", write, started(strings.Repeat("a", MaxTaskIDBytes+1)), ToolResultOutcomeUnknown, "tool publish started a task with a task_id of 257 bytes, over the 256 allowed"},
		{"a read's ID over it", read, started(strings.Repeat("a", 10000)), ToolResultFailed, "a task_id of 10000 bytes"},
		{"an empty ID", write, started(""), ToolResultOutcomeUnknown, "an empty task_id"},
		{"not a task", write, ToolOutcome{Kind: ToolResultSucceeded, Output: "ok"}, ToolResultSucceeded, ""},
	}
	for _, c := range cases {
		got := CheckedTaskStarted(c.record, c.out)
		if got.Kind != c.kind || !strings.Contains(got.Error, c.error) || (c.error == "" && (got.TaskID != c.out.TaskID || got.Output != c.out.Output)) {
			t.Errorf("%s: %+v, want %s %q", c.name, got, c.kind, c.error)
		}
	}
}
