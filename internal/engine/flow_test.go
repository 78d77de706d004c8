package engine

import (
	"context"
	"strings"
	"testing"

	"github.com/stepwise-run/stepwise/internal/session"
	"github.com/stepwise-run/stepwise/pkg/agent"
)

func TestAChatTurnStoresTheAnswer(t *testing.T) {
	model := script(agent.ScriptedReply{Text: "Hello there"})
	h := newHarness(t, agent.Definition{Name: "t", Model: model})
	h.then(func() {
		snap := h.snapshot()
		if snap.State == nil || snap.State.Status != session.StatusWaitingForUserMessage {
			t.Fatalf("state = %+v, want waiting for a user message", snap.State)
		}
		if len(snap.Messages) != 2 || snap.Messages[0].Text != "Hi" || snap.Messages[1].Text != "Hello there" {
			t.Fatalf("messages = %+v", snap.Messages)
		}
		if snap.Usage.ModelCalls != 1 {
			t.Errorf("usage = %+v, want one model call", snap.Usage)
		}
	})
	h.run("Hi")
	if n := len(h.events.ofType(session.EventTurnCompleted)); n != 1 {
		t.Errorf("turn_completed events = %d, want 1", n)
	}
	if n := len(h.events.ofType(session.EventTextDelta)); n != 1 {
		t.Errorf("text_delta events = %d, want 1", n)
	}
}

func TestApprovedWriteRunsOnceWithItsIdempotencyKey(t *testing.T) {
	var log callLog
	refund := agent.MustTool("refund_order", "Refund an order.", agent.EffectNonIdempotentWrite,
		func(_ context.Context, call agent.ToolContext, a orderArgs) (string, error) {
			log.add(call)
			return "refunded " + a.OrderID, nil
		})
	model := script(
		agent.ScriptedReply{ToolCalls: []agent.ScriptedToolCall{toolCall("c1", "refund_order", orderArgs{OrderID: "7"})}},
		agent.ScriptedReply{Text: "Refund done"},
	)
	h := newHarness(t, agent.Definition{Name: "t", Model: model, Tools: []agent.Tool{refund}})
	h.then(func() {
		snap := h.snapshot()
		if len(snap.PendingInterrupts) != 1 || snap.PendingInterrupts[0].Kind != session.InterruptApproval {
			t.Fatalf("interrupts = %+v, want one approval", snap.PendingInterrupts)
		}
		if log.count() != 0 {
			t.Fatalf("the write ran before approval")
		}
		h.expect(UpdateResolveInterrupt, session.ResolveRequest{InterruptID: "c1", Approved: true}, true)
	})
	h.then(func() {
		snap := h.snapshot()
		last := snap.Messages[len(snap.Messages)-1]
		if last.Text != "Refund done" {
			t.Fatalf("last message = %+v", last)
		}
		h.expect(UpdateResolveInterrupt, session.ResolveRequest{InterruptID: "c1", Approved: true}, false)
	})
	h.run("refund order 7")
	if log.count() != 1 {
		t.Fatalf("refund ran %d times, want 1", log.count())
	}
	if got := log.calls[0].IdempotencyKey; !strings.HasSuffix(got, "/turn-1/c1") {
		t.Errorf("idempotency key = %q", got)
	}
}
