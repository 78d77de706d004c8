package engine

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/stepwise-run/stepwise/internal/session"
	"github.com/stepwise-run/stepwise/internal/sessionrpc"
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
		h.expect(sessionrpc.UpdateResolveInterrupt, session.ResolveRequest{InterruptID: "c1", Approved: true}, true)
	})
	h.then(func() {
		snap := h.snapshot()
		last := snap.Messages[len(snap.Messages)-1]
		if last.Text != "Refund done" {
			t.Fatalf("last message = %+v", last)
		}
		h.expect(sessionrpc.UpdateResolveInterrupt, session.ResolveRequest{InterruptID: "c1", Approved: true}, false)
	})
	h.run("refund order 7")
	if log.count() != 1 {
		t.Fatalf("refund ran %d times, want 1", log.count())
	}
	if got := log.calls[0].IdempotencyKey; !strings.HasSuffix(got, "/turn-1/c1") {
		t.Errorf("idempotency key = %q", got)
	}
}

// --- RunModel ---

func TestRunModelFailureThatPersistsRoutesToRecordTurnFailure(t *testing.T) {
	for _, tc := range []struct {
		name string
		// callFirst makes the turn's first model call request a tool, so
		// only the second call fails.
		callFirst bool
		wantCalls int
		wantNote  string
	}{
		{name: "first call fails: no note", wantCalls: 3 + 1},
		{name: "second call fails: the note lists the call that ran", callFirst: true, wantCalls: 1 + 3 + 1,
			wantNote: session.TurnFailureNoteHeader + "\n" +
				`- lookup_order {"order_id":"7"} -> succeeded: lookup_order 7` + "\n" +
				session.TurnFailureNoteFooter},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var log callLog
			model := agent.NewScriptedModel(func(req agent.ModelRequest) (agent.ScriptedReply, error) {
				texts := agent.UserTexts(req)
				switch {
				case texts[len(texts)-1] == "are you back?":
					return agent.ScriptedReply{Text: "yes"}, nil
				case tc.callFirst && len(agent.ToolResults(req)) == 0:
					return agent.ScriptedReply{ToolCalls: []agent.ScriptedToolCall{order7("c1", "lookup_order")}}, nil
				}
				return agent.ScriptedReply{}, errors.New("model unavailable")
			})
			h := newHarness(t, agent.Definition{Name: "t", Model: model,
				Tools: []agent.Tool{orderTool("lookup_order", agent.EffectRead, &log, nil)}})
			h.then(func() {
				snap := h.snapshot()
				if snap.State.Status != session.StatusWaitingForUserMessage || snap.State.LastTurnError != "model unavailable" {
					t.Errorf("state = %+v, want waiting with last_turn_error %q", snap.State, "model unavailable")
				}
				if len(snap.ToolCalls) != 0 {
					t.Errorf("tool call records = %+v, want none after the turn", snap.ToolCalls)
				}
				last := snap.Messages[len(snap.Messages)-1]
				if tc.wantNote == "" {
					if len(snap.Messages) != 1 || last.Text != "go" {
						t.Errorf("messages = %+v, want only the user's", snap.Messages)
					}
				} else if last.Role != session.RoleUser || last.Text != tc.wantNote || last.TurnID != "turn-1" {
					t.Errorf("last message = %+v, want the turn-failure note %q", last, tc.wantNote)
				}
				failed := h.events.ofType(session.EventTurnFailed)
				if len(failed) != 1 || payload(t, failed[0])["error"] != "model unavailable" || failed[0].TurnID != "turn-1" {
					t.Errorf("turn_failed events = %+v", failed)
				}
				h.expect(sessionrpc.UpdateSendUserMessage, session.SendRequest{Text: "are you back?"}, true)
			})
			h.then(func() {
				snap := h.snapshot()
				if snap.State.LastTurnError != "" || snap.State.TurnCount != 2 {
					t.Errorf("state = %+v, want turn 2 completed and last_turn_error cleared", snap.State)
				}
				if n := len(h.events.ofType(session.EventTurnCompleted)); n != 1 {
					t.Errorf("turn_completed events = %d, want 1", n)
				}
				if tc.wantNote != "" && !slices.Contains(agent.UserTexts(model.Requests()[len(model.Requests())-1]), tc.wantNote) {
					t.Errorf("the next turn's model input lacks the note")
				}
			})
			h.run("go")
			if got := len(model.Requests()); got != tc.wantCalls {
				t.Errorf("model calls = %d, want %d (three attempts of the failing call)", got, tc.wantCalls)
			}
		})
	}
}

func TestRunModelRetriesAFailedCall(t *testing.T) {
	model := numbered(func(n int, _ agent.ModelRequest) (agent.ScriptedReply, error) {
		if n == 1 {
			return agent.ScriptedReply{}, errors.New("rate limited")
		}
		return agent.ScriptedReply{Text: "recovered"}, nil
	})
	h := newHarness(t, agent.Definition{Name: "t", Model: model})
	h.then(func() {})
	h.run("Hi")
	snap := h.snapshot()
	if got := len(model.Requests()); got != 2 {
		t.Errorf("model calls = %d, want 2", got)
	}
	if len(snap.Messages) != 2 || snap.Messages[1].Text != "recovered" || snap.State.LastTurnError != "" {
		t.Errorf("messages = %+v, state = %+v", snap.Messages, snap.State)
	}
	if len(h.events.ofType(session.EventTurnCompleted)) != 1 || len(h.events.ofType(session.EventTurnFailed)) != 0 {
		t.Errorf("want one turn_completed and no turn_failed")
	}
	deltas := h.events.ofType(session.EventTextDelta)
	if len(deltas) != 1 || deltas[0].Attempt != 2 {
		t.Errorf("text_delta events = %+v, want one from attempt 2", deltas)
	}
	if snap.Usage.ModelCalls != 1 {
		t.Errorf("usage = %+v, want the one call that answered", snap.Usage)
	}
}

func TestRunModelFailsTheTurnOnBadToolCallIDs(t *testing.T) {
	blankIDs := func(resp *agent.ModelResponse) {
		for _, item := range resp.Output {
			if item.ToolCall != nil {
				item.ToolCall.ID = ""
			}
		}
	}
	for _, tc := range []struct {
		name string
		// first are the calls of the turn's first model call; again, when
		// set, those of the call after their results.
		first, again []agent.ScriptedToolCall
		edit         func(*agent.ModelResponse)
		wantRuns     int
		wantNote     bool
	}{
		{name: "empty", first: []agent.ScriptedToolCall{order7("c1", "lookup_order")}, edit: blankIDs},
		{name: "contains a slash", first: []agent.ScriptedToolCall{order7("a/b", "lookup_order")}},
		{name: "repeated in one response", first: []agent.ScriptedToolCall{order7("c1", "lookup_order"), order7("c1", "lookup_order")}},
		{name: "repeated by a later call of the turn", first: []agent.ScriptedToolCall{order7("c1", "lookup_order")},
			again: []agent.ScriptedToolCall{order7("c1", "lookup_order")}, wantRuns: 1, wantNote: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var log callLog
			scripted := agent.NewScriptedModel(func(req agent.ModelRequest) (agent.ScriptedReply, error) {
				texts := agent.UserTexts(req)
				switch {
				case texts[len(texts)-1] == "hello":
					return agent.ScriptedReply{Text: "hi"}, nil
				case len(agent.ToolResults(req)) == 0:
					return agent.ScriptedReply{ToolCalls: tc.first}, nil
				case tc.again != nil:
					return agent.ScriptedReply{ToolCalls: tc.again}, nil
				}
				return agent.ScriptedReply{Text: "done"}, nil
			})
			var model agent.ModelClient = scripted
			if tc.edit != nil {
				model = editedModel{scripted, tc.edit}
			}
			h := newHarness(t, agent.Definition{Name: "t", Model: model,
				Tools: []agent.Tool{orderTool("lookup_order", agent.EffectRead, &log, nil)}})
			h.then(func() {
				snap := h.snapshot()
				if !strings.HasPrefix(snap.State.LastTurnError, session.ToolCallIDError) {
					t.Errorf("last_turn_error = %q, want the tool call ID error", snap.State.LastTurnError)
				}
				failed := h.events.ofType(session.EventTurnFailed)
				if len(failed) != 1 || !strings.HasPrefix(payload(t, failed[0])["error"].(string), session.ToolCallIDError) {
					t.Errorf("turn_failed events = %+v", failed)
				}
				// The response with the bad IDs is not stored.
				stored := 0
				for _, m := range snap.Messages {
					if m.Role == session.RoleAssistant && len(m.ToolCalls) > 0 {
						stored++
					}
				}
				if want := tc.wantRuns; stored != want {
					t.Errorf("stored tool-calling answers = %d, want %d: %+v", stored, want, snap.Messages)
				}
				last := snap.Messages[len(snap.Messages)-1]
				if hasNote := strings.HasPrefix(last.Text, session.TurnFailureNoteHeader); hasNote != tc.wantNote {
					t.Errorf("last message = %+v, want a turn-failure note: %v", last, tc.wantNote)
				}
				h.expect(sessionrpc.UpdateSendUserMessage, session.SendRequest{Text: "hello"}, true)
			})
			h.then(func() {
				snap := h.snapshot()
				if snap.State.LastTurnError != "" || snap.Messages[len(snap.Messages)-1].Text != "hi" {
					t.Errorf("the next turn did not complete: %+v", snap.State)
				}
			})
			h.run("go")
			if log.count() != tc.wantRuns {
				t.Errorf("tool ran %d times, want %d", log.count(), tc.wantRuns)
			}
			if len(h.events.ofType(session.EventToolCallDeferred)) != tc.wantRuns {
				t.Errorf("calls with bad IDs were deferred")
			}
		})
	}
}

func TestToolCallIDsMayRepeatInALaterTurn(t *testing.T) {
	var log callLog
	model := callsThenAnswer(order7("c1", "lookup_order"))
	h := newHarness(t, agent.Definition{Name: "t", Model: model,
		Tools: []agent.Tool{orderTool("lookup_order", agent.EffectRead, &log, nil)}})
	h.then(func() { h.expect(sessionrpc.UpdateSendUserMessage, session.SendRequest{Text: "again"}, true) })
	h.then(func() {})
	h.run("go")
	snap := h.snapshot()
	if snap.State.TurnCount != 2 || snap.State.LastTurnError != "" {
		t.Fatalf("state = %+v, want two completed turns", snap.State)
	}
	if log.count() != 2 {
		t.Fatalf("tool ran %d times, want 2", log.count())
	}
	if a, b := log.calls[0].IdempotencyKey, log.calls[1].IdempotencyKey; !strings.HasSuffix(a, "/turn-1/c1") || !strings.HasSuffix(b, "/turn-2/c1") {
		t.Errorf("idempotency keys = %q, %q", a, b)
	}
}

func TestModelCallLimitOffersNoToolsAndEndsTheTurn(t *testing.T) {
	var log callLog
	model := numbered(func(n int, req agent.ModelRequest) (agent.ScriptedReply, error) {
		if texts := agent.UserTexts(req); texts[len(texts)-1] == "next" {
			return agent.ScriptedReply{Text: "fresh turn"}, nil
		}
		// The model keeps calling tools, offered or not.
		return agent.ScriptedReply{ToolCalls: []agent.ScriptedToolCall{order7(fmt.Sprintf("c%d", n), "lookup_order")}}, nil
	})
	h := newHarness(t, agent.Definition{Name: "t", Model: model, MaxModelCallsPerTurn: 2,
		Tools: []agent.Tool{orderTool("lookup_order", agent.EffectRead, &log, nil)}})
	h.then(func() {
		snap := h.snapshot()
		if snap.State.Status != session.StatusWaitingForUserMessage || snap.State.LastTurnError != "" {
			t.Errorf("state = %+v, want the turn ended", snap.State)
		}
		if got := toolMessage(t, snap, "c3").Text; got != session.ModelCallLimitResult(2) {
			t.Errorf("result of the call past the limit = %q", got)
		}
		if last := snap.Messages[len(snap.Messages)-1]; last.ToolCallID != "c3" {
			t.Errorf("last message = %+v, want the unrun call's result", last)
		}
		h.expect(sessionrpc.UpdateSendUserMessage, session.SendRequest{Text: "next"}, true)
	})
	h.then(func() {})
	h.run("go")
	reqs := model.Requests()
	if len(reqs) != 4 {
		t.Fatalf("model calls = %d, want 3 in the first turn and 1 in the next", len(reqs))
	}
	for i, want := range []bool{true, true, false, true} {
		if offered := len(reqs[i].Tools) > 0; offered != want {
			t.Errorf("request %d offers tools: %v, want %v", i+1, offered, want)
		}
	}
	if reqs[2].ToolChoice != "" {
		t.Errorf("request 3 tool choice = %q, want none set", reqs[2].ToolChoice)
	}
	if log.count() != 2 {
		t.Errorf("tool ran %d times, want 2: the call past the limit never runs", log.count())
	}
	if n := len(h.events.ofType(session.EventTurnCompleted)); n != 2 {
		t.Errorf("turn_completed events = %d, want 2", n)
	}
}

func TestUsageIsRecordedPerCallAndPerSession(t *testing.T) {
	scripted := callsThenAnswer(order7("c1", "lookup_order"))
	model := editedModel{scripted, func(resp *agent.ModelResponse) {
		// A client that leaves the call count out still counts one call.
		resp.Usage = agent.Usage{InputTokens: 10, OutputTokens: 3, CachedInputTokens: 2}
	}}
	var log callLog
	h := newHarness(t, agent.Definition{Name: "t", Model: model,
		Tools: []agent.Tool{orderTool("lookup_order", agent.EffectRead, &log, nil)}})
	h.then(func() {
		if u := h.snapshot().Usage; u != (session.Usage{ModelCalls: 2, InputTokens: 20, OutputTokens: 6, CachedInputTokens: 4}) {
			t.Errorf("usage after turn 1 = %+v", u)
		}
		h.expect(sessionrpc.UpdateSendUserMessage, session.SendRequest{Text: "again"}, true)
	})
	h.then(func() {})
	h.run("go")
	want := session.Usage{ModelCalls: 4, InputTokens: 40, OutputTokens: 12, CachedInputTokens: 8}
	if u := h.snapshot().Usage; u != want {
		t.Errorf("session usage = %+v, want %+v", u, want)
	}
	recorded := h.events.ofType(session.EventUsageRecorded)
	if len(recorded) != 4 {
		t.Fatalf("usage_recorded events = %d, want one per model call", len(recorded))
	}
	for i, e := range recorded {
		var p struct {
			Recorded session.Usage `json:"recorded"`
			Session  session.Usage `json:"session"`
		}
		if err := json.Unmarshal(e.Payload, &p); err != nil {
			t.Fatal(err)
		}
		if p.Recorded != (session.Usage{ModelCalls: 1, InputTokens: 10, OutputTokens: 3, CachedInputTokens: 2}) {
			t.Errorf("event %d recorded = %+v, want one call's usage", i, p.Recorded)
		}
		if p.Session.ModelCalls != int64(i+1) || p.Session.InputTokens != int64(10*(i+1)) {
			t.Errorf("event %d session = %+v, want the running total", i, p.Session)
		}
	}
}
