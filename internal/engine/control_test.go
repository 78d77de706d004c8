package engine

import (
	"context"
	"slices"
	"testing"

	"github.com/stepwise-run/stepwise/internal/session"
	"github.com/stepwise-run/stepwise/internal/sessionrpc"
	"github.com/stepwise-run/stepwise/pkg/agent"
)

// steerableModel asks for calls on the first user message and answers
// anything after a steer or a tool result.
func steerableModel(calls ...agent.ScriptedToolCall) *agent.ScriptedModel {
	return agent.NewScriptedModel(func(req agent.ModelRequest) (agent.ScriptedReply, error) {
		texts := agent.UserTexts(req)
		last := req.Input[len(req.Input)-1]
		switch {
		case last.Role == agent.RoleUser && len(texts) == 1:
			return agent.ScriptedReply{ToolCalls: calls}, nil
		case last.Role == agent.RoleUser:
			return agent.ScriptedReply{Text: "now: " + texts[len(texts)-1]}, nil
		}
		return agent.ScriptedReply{Text: "done"}, nil
	})
}

func recordsByID(snap session.Snapshot) map[string]session.ToolCallRecord {
	out := map[string]session.ToolCallRecord{}
	for _, r := range snap.ToolCalls {
		out[r.ID] = r
	}
	return out
}

func TestASteerEndsTheTurnAfterItsRunningCallsAndStartsTheNext(t *testing.T) {
	var refunds, lookups callLog
	refund := agent.MustTool("refund_order", "Refund.", agent.EffectNonIdempotentWrite,
		func(_ context.Context, c agent.ToolContext, _ orderArgs) (string, error) {
			refunds.add(c)
			return "refunded", nil
		})
	lookup := agent.MustTool("lookup_order", "Look up.", agent.EffectRead,
		func(_ context.Context, c agent.ToolContext, _ orderArgs) (string, error) {
			lookups.add(c)
			return "order 7", nil
		})
	model := steerableModel(toolCall("w1", "refund_order", orderArgs{OrderID: "7"}), toolCall("r1", "lookup_order", orderArgs{OrderID: "7"}))
	h := newHarness(t, agent.Definition{Name: "t", Model: model, Tools: []agent.Tool{refund, lookup}})
	h.then(func() {
		// The lookup ran; the refund waits for approval. A queued message
		// steers the turn by its ID.
		h.expect(sessionrpc.UpdateSendUserMessage, session.SendRequest{Text: "also order 8"}, true)
		h.expect(sessionrpc.UpdateSteerUserMessage, session.SteerRequest{MessageID: "msg-2"}, true)
		h.expect(sessionrpc.UpdateSteerUserMessage, session.SteerRequest{MessageID: "msg-2"}, false)
	})
	h.then(func() {
		snap := h.snapshot()
		if snap.State.TurnCount != 2 || snap.State.ActiveTurnID != "" || len(snap.PendingInterrupts) != 0 {
			t.Fatalf("state = %+v, interrupts %v; want turn 2 finished", snap.State, snap.PendingInterrupts)
		}
		want := []string{
			"turn-1 user: refund 7", "turn-1 assistant: ",
			"turn-1 tool: " + session.SteeredResultText, "turn-1 tool: order 7",
			"turn-2 user: also order 8", "turn-2 assistant: now: also order 8",
		}
		if got := transcript(snap); !slices.Equal(got, want) {
			t.Errorf("messages =\n%q\nwant\n%q", got, want)
		}
		h.expect(sessionrpc.UpdateResolveInterrupt, session.ResolveRequest{InterruptID: "w1", Approved: true}, false)
	})
	h.run("refund 7")
	if refunds.count() != 0 || lookups.count() != 1 {
		t.Errorf("refund ran %d times, lookup %d; want 0 and 1", refunds.count(), lookups.count())
	}
	steered := h.events.ofType(session.EventTurnSteered)
	if len(steered) != 1 || steered[0].TurnID != "turn-1" {
		t.Errorf("turn_steered events = %+v", steered)
	}
}

func TestAnApprovalThatCommitsBeforeASteerNeverStartsTheTool(t *testing.T) {
	var refunds callLog
	refund := agent.MustTool("refund_order", "Refund.", agent.EffectNonIdempotentWrite,
		func(_ context.Context, c agent.ToolContext, _ orderArgs) (string, error) {
			refunds.add(c)
			return "refunded", nil
		})
	model := steerableModel(toolCall("w1", "refund_order", orderArgs{OrderID: "7"}))
	h := newHarness(t, agent.Definition{Name: "t", Model: model, Tools: []agent.Tool{refund}})
	h.then(func() {
		h.expect(sessionrpc.UpdateResolveInterrupt, session.ResolveRequest{InterruptID: "w1", Approved: true}, true)
		h.expect(sessionrpc.UpdateSteerUserMessage, session.SteerRequest{Text: "wait, no"}, true)
	})
	h.then(func() {
		snap := h.snapshot()
		if snap.State.TurnCount != 2 || snap.Messages[2].Text != session.SteeredResultText {
			t.Errorf("state %+v, messages %q; want the approved call settled as steered", snap.State, transcript(snap))
		}
	})
	h.run("refund 7")
	if refunds.count() != 0 {
		t.Errorf("the approved refund ran %d times after the steer", refunds.count())
	}
}

func TestCancelTurnEndsWaitsAndStartsNoTurn(t *testing.T) {
	model := steerableModel(
		toolCall("d1", "durable_wait", map[string]any{"duration_seconds": 3600, "reason": "build"}),
		toolCall("d2", "durable_wait", map[string]any{"duration_seconds": 30, "reason": "short"}),
	)
	h := newHarness(t, agent.Definition{Name: "t", Model: model, BuiltInTools: []agent.BuiltInTool{agent.BuiltInDurableWait}})
	h.then(func() {
		// The short wait fired before the cancel; the long one still waits.
		records := recordsByID(h.snapshot())
		if records["d2"].Status != session.ToolCallSucceeded || records["d1"].Status != session.ToolCallWaitingForTimer {
			t.Fatalf("records = %+v", records)
		}
		h.expect(sessionrpc.UpdateCancelTurn, session.CancelRequest{TurnID: "turn-1"}, true)
	})
	h.then(func() {
		snap := h.snapshot()
		if snap.State.ActiveTurnID != "" || snap.State.TurnCount != 1 || snap.State.Status != session.StatusWaitingForUserMessage {
			t.Fatalf("state = %+v, want the turn cancelled and no new turn", snap.State)
		}
		texts := transcript(snap)
		if !slices.Contains(texts, "turn-1 tool: "+session.CancelledResultText) ||
			!slices.Contains(texts, `turn-1 tool: {"status":"completed","waited_seconds":30,"reason":"short"}`) {
			t.Errorf("messages = %q", texts)
		}
		h.expect(sessionrpc.UpdateCancelTurn, session.CancelRequest{TurnID: "turn-1"}, false)
		h.expect(sessionrpc.UpdateCancelTurn, session.CancelRequest{TurnID: "turn-9"}, false)
	})
	h.run("wait")
	if n := len(h.events.ofType(session.EventTurnCancelled)); n != 1 {
		t.Errorf("turn_cancelled events = %d, want 1", n)
	}
	resolved := 0
	for _, e := range h.events.ofType(session.EventToolCallFinished) {
		if string(e.Payload) != "" {
			resolved++
		}
	}
	if resolved != 2 {
		t.Errorf("tool_call_finished events = %d, want one per call", resolved)
	}
}

func TestDeleteQueuedMessage(t *testing.T) {
	model := steerableModel(toolCall("w1", "ask_user", map[string]any{"question": "Which?", "allows_free_text": true}))
	h := newHarness(t, agent.Definition{Name: "t", Model: model, BuiltInTools: []agent.BuiltInTool{agent.BuiltInAskUser}})
	h.then(func() {
		h.expect(sessionrpc.UpdateSendUserMessage, session.SendRequest{Text: "never mind"}, true)
		h.expect(sessionrpc.UpdateDeleteQueuedMessage, session.DeleteRequest{MessageID: "msg-2"}, true)
		h.expect(sessionrpc.UpdateDeleteQueuedMessage, session.DeleteRequest{MessageID: "msg-2"}, false)
		h.expect(sessionrpc.UpdateAnswerQuestion, session.AnswerRequest{InterruptID: "w1", Answer: "blue"}, true)
	})
	h.then(func() {
		snap := h.snapshot()
		if snap.State.TurnCount != 1 || snap.QueuedMessageCount != 0 || snap.State.ActiveTurnID != "" {
			t.Errorf("state %+v, %d queued; want the deleted message never to start a turn", snap.State, snap.QueuedMessageCount)
		}
	})
	h.run("ask me")
}
