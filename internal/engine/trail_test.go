package engine

import (
	"strings"
	"testing"

	"github.com/stepwise-run/stepwise/internal/session"
	"github.com/stepwise-run/stepwise/internal/sessionrpc"
	"github.com/stepwise-run/stepwise/pkg/agent"
)

// --- Events ---

func TestEventsOfATurnWithAnApprovalAndARejection(t *testing.T) {
	var log callLog
	model := callsThenAnswer(order7("c1", "refund_order"), order7("c2", "refund_order"))
	h := newHarness(t, agent.Definition{Name: "t", Model: model,
		Tools: []agent.Tool{orderTool("refund_order", agent.EffectNonIdempotentWrite, &log, nil)}})
	h.then(func() {
		h.expect(sessionrpc.UpdateResolveInterrupt, approve("c1"), true)
		h.expect(sessionrpc.UpdateResolveInterrupt, session.ResolveRequest{InterruptID: "c2", RejectionMessage: "once is enough"}, true)
	})
	h.then(func() {})
	h.run("refund order 7")

	for _, e := range h.events.events {
		if e.TurnID != "turn-1" {
			t.Errorf("%s event has turn ID %q", e.Type, e.TurnID)
		}
	}
	count := func(typ session.EventType, want int) []session.Event {
		t.Helper()
		evs := h.events.ofType(typ)
		if len(evs) != want {
			t.Errorf("%s events = %d, want %d", typ, len(evs), want)
		}
		return evs
	}
	if evs := count(session.EventTurnStarted, 1); len(evs) == 1 && payload(t, evs[0])["sequence"] != 1.0 {
		t.Errorf("turn_started = %s", evs[0].Payload)
	}
	// user, answer with calls, two results, final answer.
	if evs := count(session.EventTurnCompleted, 1); len(evs) == 1 && payload(t, evs[0])["message_count"] != 5.0 {
		t.Errorf("turn_completed = %s", evs[0].Payload)
	}
	count(session.EventTurnFailed, 0)
	for _, e := range count(session.EventToolCallDeferred, 2) {
		p := payload(t, e)
		if p["tool_name"] != "refund_order" || p["effect"] != "non_idempotent_write" || p["requires_approval"] != true {
			t.Errorf("tool_call_deferred = %v", p)
		}
	}
	for _, e := range count(session.EventInterruptRaised, 2) {
		p := payload(t, e)
		if p["interrupt_id"] != p["tool_call_id"] || p["tool_name"] != "refund_order" || p["kind"] != "approval" {
			t.Errorf("interrupt_raised = %v", p)
		}
	}
	for _, e := range count(session.EventInterruptResolved, 2) {
		p := payload(t, e)
		if approved := p["interrupt_id"] == "c1"; p["approved"] != approved || p["answered"] != false || p["kind"] != "approval" {
			t.Errorf("interrupt_resolved = %v", p)
		}
	}
	if evs := count(session.EventToolCallStarted, 1); len(evs) == 1 {
		if p := payload(t, evs[0]); p["tool_call_id"] != "c1" || p["tool_name"] != "refund_order" || evs[0].Attempt != 1 {
			t.Errorf("tool_call_started = %+v", evs[0])
		}
	}
	// Once per call, the rejection included.
	count(session.EventToolCallFinished, 2)
	if h.finishedStatus("c1") != session.ToolCallSucceeded || h.finishedStatus("c2") != session.ToolCallRejected {
		t.Errorf("finished statuses are wrong")
	}
	count(session.EventUsageRecorded, 2)
	if evs := count(session.EventTextDelta, 1); len(evs) == 1 {
		e := evs[0]
		if payload(t, e)["text"] != "done" || e.Attempt != 1 || !strings.HasPrefix(e.StepExecutionID, "RunModel/turn-1/") {
			t.Errorf("text_delta = %+v", e)
		}
	}
	count(session.EventTimerStarted, 0)
	// The turn's events come in Flow order.
	order := map[session.EventType]int{}
	for i, e := range h.events.events {
		if _, ok := order[e.Type]; !ok {
			order[e.Type] = i
		}
	}
	for _, pair := range [][2]session.EventType{
		{session.EventTurnStarted, session.EventUsageRecorded},
		{session.EventUsageRecorded, session.EventToolCallDeferred},
		{session.EventToolCallDeferred, session.EventInterruptRaised},
		{session.EventInterruptRaised, session.EventInterruptResolved},
		{session.EventInterruptResolved, session.EventToolCallStarted},
		{session.EventToolCallStarted, session.EventTextDelta},
		{session.EventTextDelta, session.EventTurnCompleted},
	} {
		if order[pair[0]] > order[pair[1]] {
			t.Errorf("%s came after %s", pair[0], pair[1])
		}
	}
}
