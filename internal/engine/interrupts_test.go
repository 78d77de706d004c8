package engine

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stepwise-run/stepwise/internal/session"
	"github.com/stepwise-run/stepwise/internal/sessionrpc"
	"github.com/stepwise-run/stepwise/pkg/agent"
)

// --- AwaitToolApproval ---

func TestAwaitToolApprovalOutcomes(t *testing.T) {
	for _, tc := range []struct {
		name       string
		resolve    *session.ResolveRequest // nil lets the deadline pass
		wantRuns   int
		wantStatus session.ToolCallStatus
		wantResult string
	}{
		{name: "approved", resolve: &session.ResolveRequest{InterruptID: "c1", Approved: true},
			wantRuns: 1, wantStatus: session.ToolCallSucceeded, wantResult: "refund_order 7"},
		{name: "rejected with a message", resolve: &session.ResolveRequest{InterruptID: "c1", RejectionMessage: "too expensive"},
			wantStatus: session.ToolCallRejected, wantResult: "The user rejected the tool call: too expensive"},
		{name: "rejected without a message", resolve: &session.ResolveRequest{InterruptID: "c1"},
			wantStatus: session.ToolCallRejected, wantResult: "The user rejected the tool call."},
		{name: "deadline passed", wantStatus: session.ToolCallRejected,
			wantResult: "The user rejected the tool call: " + session.ApprovalDeadlineText},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var log callLog
			model := callsThenAnswer(order7("c1", "refund_order"))
			h := newHarness(t, agent.Definition{Name: "t", Model: model, InterruptDeadline: 10 * time.Minute,
				Tools: []agent.Tool{orderTool("refund_order", agent.EffectNonIdempotentWrite, &log, nil)}})
			h.gap = 6 * time.Minute
			h.then(func() {
				snap := h.snapshot()
				if len(snap.PendingInterrupts) != 1 || toolRecord(t, snap, "c1").Status != session.ToolCallAwaitingApproval {
					t.Fatalf("snapshot = %+v, want c1 awaiting approval", snap)
				}
				if tc.resolve != nil {
					h.expect(sessionrpc.UpdateResolveInterrupt, *tc.resolve, true)
				}
			})
			h.then(func() {
				// 12 minutes in: any deadline has passed.
				snap := h.snapshot()
				if len(snap.PendingInterrupts) != 0 || snap.State.Status != session.StatusWaitingForUserMessage {
					t.Errorf("snapshot = %+v, want the turn over and no interrupt", snap)
				}
				h.refuse(sessionrpc.UpdateResolveInterrupt, approve("c1"), "not pending")
			})
			h.then(func() {})
			h.run("go")
			if log.count() != tc.wantRuns {
				t.Errorf("tool ran %d times, want %d", log.count(), tc.wantRuns)
			}
			if got := h.finishedStatus("c1"); got != tc.wantStatus {
				t.Errorf("status = %s, want %s", got, tc.wantStatus)
			}
			if got := seenResults(t, model)["c1"]; got != tc.wantResult {
				t.Errorf("the model saw %q, want %q", got, tc.wantResult)
			}
			resolved := h.events.ofType(session.EventInterruptResolved)
			if len(resolved) != 1 {
				t.Fatalf("interrupt_resolved events = %d, want 1", len(resolved))
			}
			p := payload(t, resolved[0])
			if p["interrupt_id"] != "c1" || p["kind"] != string(session.InterruptApproval) || p["approved"] != (tc.wantRuns == 1) || p["answered"] != false {
				t.Errorf("interrupt_resolved = %v", p)
			}
			if tc.resolve != nil && tc.resolve.RejectionMessage != "" && p["rejection_message"] != tc.resolve.RejectionMessage {
				t.Errorf("interrupt_resolved rejection_message = %v", p["rejection_message"])
			}
			if !strings.HasPrefix(resolved[0].StepExecutionID, string(session.StepAwaitToolApproval)+"/turn-1/c1") {
				t.Errorf("interrupt_resolved step execution = %q, want AwaitToolApproval's", resolved[0].StepExecutionID)
			}
		})
	}
}

func TestApprovalDeadlineFiresOnTheEngineTimer(t *testing.T) {
	var log callLog
	model := callsThenAnswer(order7("c1", "refund_order"))
	h := newHarness(t, agent.Definition{Name: "t", Model: model, InterruptDeadline: 10 * time.Minute,
		Tools: []agent.Tool{orderTool("refund_order", agent.EffectNonIdempotentWrite, &log, nil)}})
	h.gap = 11 * time.Minute
	var start time.Time
	h.at(time.Minute, func() {
		start = h.env.Now().Add(-time.Minute)
		snap := h.snapshot()
		if len(snap.PendingInterrupts) != 1 || snap.PendingInterrupts[0].Deadline == nil ||
			!snap.PendingInterrupts[0].Deadline.Equal(start.Add(10*time.Minute)) {
			t.Fatalf("interrupts = %+v, want one with a deadline 10 minutes after it was raised", snap.PendingInterrupts)
		}
	})
	h.at(10*time.Minute-time.Second, func() {
		if len(h.snapshot().PendingInterrupts) != 1 {
			t.Errorf("the approval expired before its deadline")
		}
	})
	h.then(func() {
		snap := h.snapshot()
		if len(snap.PendingInterrupts) != 0 || len(snap.ToolCalls) != 0 || snap.State.Status != session.StatusWaitingForUserMessage {
			t.Errorf("snapshot = %+v, want the approval expired and the turn over", snap)
		}
	})
	h.run("go")
	if log.count() != 0 || h.finishedStatus("c1") != session.ToolCallRejected {
		t.Errorf("want the call rejected without running")
	}
	resolved := h.events.ofType(session.EventInterruptResolved)
	if len(resolved) != 1 || payload(t, resolved[0])["approved"] != false {
		t.Errorf("interrupt_resolved events = %+v", resolved)
	}
}

// --- ask_user ---

func askUser(id string, args any) agent.ScriptedToolCall {
	return toolCall(id, string(agent.BuiltInAskUser), args)
}

func TestAskUserOutcomes(t *testing.T) {
	question := map[string]any{"question": "Which size?", "choices": []string{"S", "M"}}
	for _, tc := range []struct {
		name       string
		rpc        string
		arg        any // nil lets the deadline pass
		wantStatus session.ToolCallStatus
		wantResult string
	}{
		{name: "answered", rpc: sessionrpc.UpdateAnswerQuestion, arg: session.AnswerRequest{InterruptID: "q1", Answer: "M"},
			wantStatus: session.ToolCallSucceeded, wantResult: `{"status":"answered","answer":"M"}`},
		{name: "declined", rpc: sessionrpc.UpdateResolveInterrupt, arg: session.ResolveRequest{InterruptID: "q1"},
			wantStatus: session.ToolCallRejected, wantResult: session.DeclinedAnswerText},
		{name: "deadline passed", wantStatus: session.ToolCallRejected, wantResult: session.QuestionDeadlineText},
	} {
		t.Run(tc.name, func(t *testing.T) {
			model := callsThenAnswer(askUser("q1", question))
			h := newHarness(t, agent.Definition{Name: "t", Model: model, InterruptDeadline: 10 * time.Minute,
				BuiltInTools: []agent.BuiltInTool{agent.BuiltInAskUser}})
			h.gap = 6 * time.Minute
			h.then(func() {
				snap := h.snapshot()
				if len(snap.PendingInterrupts) != 1 {
					t.Fatalf("interrupts = %+v, want the question", snap.PendingInterrupts)
				}
				in := snap.PendingInterrupts[0]
				if in.ID != "q1" || in.Kind != session.InterruptQuestion || in.Question == nil ||
					in.Question.Text != "Which size?" || !slices.Equal(in.Question.Choices, []string{"S", "M"}) || in.Question.AllowsFreeText {
					t.Errorf("interrupt = %+v", in)
				}
				if r := toolRecord(t, snap, "q1"); r.Status != session.ToolCallAwaitingAnswer || r.Effect != agent.EffectRead {
					t.Errorf("record = %+v", r)
				}
				if tc.arg != nil {
					h.expect(tc.rpc, tc.arg, true)
				}
			})
			h.then(func() {})
			h.run("go")
			if got := h.finishedStatus("q1"); got != tc.wantStatus {
				t.Errorf("status = %s, want %s", got, tc.wantStatus)
			}
			reqs := model.Requests()
			if got := seenResults(t, model)["q1"]; got != tc.wantResult || len(reqs) != 2 {
				t.Errorf("the model's second call saw %q, want %q", got, tc.wantResult)
			}
			snap := h.snapshot()
			if snap.State.TurnCount != 1 || snap.Messages[len(snap.Messages)-1].Text != "done" {
				t.Errorf("want the same turn to continue to its answer: %+v", snap.State)
			}
			raised := h.events.ofType(session.EventInterruptRaised)
			if len(raised) != 1 {
				t.Fatalf("interrupt_raised events = %d", len(raised))
			}
			p := payload(t, raised[0])
			if p["kind"] != "question" || p["question"] != "Which size?" || p["allows_free_text"] != false || p["deadline"] == nil {
				t.Errorf("interrupt_raised = %v", p)
			}
			if len(h.eventsFor(session.EventToolCallStarted, "q1")) != 0 {
				t.Errorf("ask_user ran a tool Step")
			}
			// The answer, decline or deadline is the AwaitQuestionAnswer Step's.
			for _, e := range append(h.events.ofType(session.EventInterruptResolved), h.eventsFor(session.EventToolCallFinished, "q1")...) {
				if !strings.HasPrefix(e.StepExecutionID, string(session.StepAwaitQuestionAnswer)+"/turn-1/q1") {
					t.Errorf("%s step execution = %q, want AwaitQuestionAnswer's", e.Type, e.StepExecutionID)
				}
			}
		})
	}
}

func TestAskUserOfferedOnlyWhenEnabled(t *testing.T) {
	for _, enabled := range []bool{true, false} {
		t.Run(fmt.Sprintf("enabled=%v", enabled), func(t *testing.T) {
			model := callsThenAnswer(askUser("q1", map[string]any{"question": "Why?"}))
			def := agent.Definition{Name: "t", Model: model}
			if enabled {
				def.BuiltInTools = []agent.BuiltInTool{agent.BuiltInAskUser}
			}
			h := newHarness(t, def)
			h.then(func() {
				snap := h.snapshot()
				if asked := len(snap.PendingInterrupts) == 1; asked != enabled {
					t.Errorf("interrupts = %+v, want a question: %v", snap.PendingInterrupts, enabled)
				}
			})
			h.run("go")
			offered := slices.ContainsFunc(model.Requests()[0].Tools, func(d agent.ToolDefinition) bool { return d.Name == "ask_user" })
			if offered != enabled {
				t.Errorf("ask_user offered: %v, want %v", offered, enabled)
			}
			if !enabled {
				// A disabled built-in name is an ordinary, unknown tool name.
				if got, want := seenResults(t, model)["q1"], "The tool call failed: unknown tool ask_user"; got != want {
					t.Errorf("the model saw %q, want %q", got, want)
				}
			}
		})
	}
}

func TestAskUserWithInvalidArgumentsFailsAtOnce(t *testing.T) {
	for _, tc := range []struct {
		name string
		args any
		want string
	}{
		{"blank question", map[string]any{"question": " "}, "invalid ask_user arguments: question must be a non-blank string"},
		{"no question", map[string]any{}, "invalid ask_user arguments: question must be a non-blank string"},
		{"not an object", `"why?"`, "invalid ask_user arguments: arguments must be a JSON object"},
		{"unknown argument", map[string]any{"question": "Why?", "urgent": true}, `invalid ask_user arguments: unknown argument "urgent"`},
		{"blank choice", map[string]any{"question": "Why?", "choices": []string{"a", ""}}, "invalid ask_user arguments: choices must not be blank"},
		{"no choices and no free text", map[string]any{"question": "Why?", "allows_free_text": false},
			"invalid ask_user arguments: a question without choices must allow free text"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			model := callsThenAnswer(askUser("q1", tc.args))
			h := newHarness(t, agent.Definition{Name: "t", Model: model, BuiltInTools: []agent.BuiltInTool{agent.BuiltInAskUser}})
			h.then(func() {})
			h.run("go")
			if got := seenResults(t, model)["q1"]; got != "The tool call failed: "+tc.want {
				t.Errorf("the model saw %q, want the failure %q", got, tc.want)
			}
			if len(h.events.ofType(session.EventInterruptRaised)) != 0 || h.finishedStatus("q1") != session.ToolCallFailed {
				t.Errorf("want failed without a question")
			}
		})
	}
}
