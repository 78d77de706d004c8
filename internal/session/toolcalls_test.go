package session

import (
	"slices"
	"testing"
	"time"

	"github.com/stepwise-run/stepwise/pkg/agent"
)

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
