package engine

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"go.temporal.io/sdk/testsuite"

	"github.com/stepwise-run/stepwise/internal/session"
	"github.com/stepwise-run/stepwise/pkg/agent"
)

// numbered returns a scripted model whose script also gets the number of
// the call, counted from 1 over the whole session, retried calls included.
func numbered(fn func(n int, req agent.ModelRequest) (agent.ScriptedReply, error)) *agent.ScriptedModel {
	var mu sync.Mutex
	n := 0
	return agent.NewScriptedModel(func(req agent.ModelRequest) (agent.ScriptedReply, error) {
		mu.Lock()
		n++
		k := n
		mu.Unlock()
		return fn(k, req)
	})
}

// callsThenAnswer returns a model that makes the calls at the start of
// every turn and answers "done" once it has their results.
func callsThenAnswer(calls ...agent.ScriptedToolCall) *agent.ScriptedModel {
	return agent.NewScriptedModel(func(req agent.ModelRequest) (agent.ScriptedReply, error) {
		if len(agent.ToolResults(req)) > 0 {
			return agent.ScriptedReply{Text: "done"}, nil
		}
		return agent.ScriptedReply{ToolCalls: calls}, nil
	})
}

// editedModel changes each response of a scripted model before the runner
// sees it, for responses a script cannot produce.
type editedModel struct {
	*agent.ScriptedModel
	edit func(resp *agent.ModelResponse)
}

func (m editedModel) CallModel(ctx context.Context, req agent.ModelRequest, out agent.OutputWriter) (agent.ModelResponse, error) {
	resp, err := m.ScriptedModel.CallModel(ctx, req, out)
	if err == nil {
		m.edit(&resp)
	}
	return resp, err
}

// orderTool is a function tool on orderArgs that logs every call and then
// behaves as told; a nil behaviour succeeds with "<name> <order_id>".
func orderTool(name string, effect agent.Effect, log *callLog, behave func(agent.ToolContext) (string, error), opts ...agent.ToolOption) agent.Tool {
	return agent.MustTool(name, "A test tool.", effect,
		func(_ context.Context, call agent.ToolContext, a orderArgs) (string, error) {
			log.add(call)
			if behave == nil {
				return name + " " + a.OrderID, nil
			}
			return behave(call)
		}, opts...)
}

func order7(id, name string) agent.ScriptedToolCall {
	return toolCall(id, name, orderArgs{OrderID: "7"})
}

// toolMessage returns the stored result of a tool call.
func toolMessage(t *testing.T, snap session.Snapshot, id string) session.Message {
	t.Helper()
	for _, m := range snap.Messages {
		if m.Role == session.RoleTool && m.ToolCallID == id {
			return m
		}
	}
	t.Fatalf("no stored result for tool call %s in %+v", id, snap.Messages)
	return session.Message{}
}

// toolRecord returns the active turn's record of a tool call.
func toolRecord(t *testing.T, snap session.Snapshot, id string) session.ToolCallRecord {
	t.Helper()
	for _, r := range snap.ToolCalls {
		if r.ID == id {
			return r
		}
	}
	t.Fatalf("no record of tool call %s in %+v", id, snap.ToolCalls)
	return session.ToolCallRecord{}
}

// seenResults returns the tool results the model was last given, by tool
// call ID.
func seenResults(t *testing.T, m *agent.ScriptedModel) map[string]string {
	t.Helper()
	reqs := m.Requests()
	if len(reqs) == 0 {
		t.Fatal("the model was never called")
	}
	out := map[string]string{}
	for _, r := range agent.ToolResults(reqs[len(reqs)-1]) {
		out[r.ToolCallID] = r.Output
	}
	return out
}

func payload(t *testing.T, e session.Event) map[string]any {
	t.Helper()
	var p map[string]any
	if err := json.Unmarshal(e.Payload, &p); err != nil {
		t.Fatalf("payload of %s: %v", e.Type, err)
	}
	return p
}

// eventsFor lists the events of a type whose payload names the tool call.
func (h *harness) eventsFor(typ session.EventType, toolCallID string) []session.Event {
	var out []session.Event
	for _, e := range h.events.ofType(typ) {
		if payload(h.t, e)["tool_call_id"] == toolCallID {
			out = append(out, e)
		}
	}
	return out
}

// finishedStatus is the status of the one tool_call_finished event of a
// call.
func (h *harness) finishedStatus(toolCallID string) session.ToolCallStatus {
	h.t.Helper()
	evs := h.eventsFor(session.EventToolCallFinished, toolCallID)
	if len(evs) != 1 {
		h.t.Fatalf("tool_call_finished events of %s = %d, want 1", toolCallID, len(evs))
	}
	return session.ToolCallStatus(payload(h.t, evs[0])["status"].(string))
}

// refuse calls an update and checks that the session refuses it for the
// reason given.
func (h *harness) refuse(name string, arg any, reason string) {
	h.t.Helper()
	t := h.t
	check := func(err error) {
		if err == nil || !strings.Contains(err.Error(), reason) {
			t.Errorf("%s(%+v) refused with %v, want a refusal for %q", name, arg, err, reason)
		}
	}
	h.env.UpdateWorkflow(name, "", &testsuite.TestUpdateCallback{
		OnReject: check,
		OnAccept: func() {},
		OnComplete: func(v any, err error) {
			if err == nil {
				t.Errorf("%s(%+v) = %v, want a refusal for %q", name, arg, v, reason)
				return
			}
			check(err)
		},
	}, arg)
}

// at schedules a callback at a time after the start, besides the steps.
func (h *harness) at(d time.Duration, f func()) {
	h.env.RegisterDelayedCallback(f, d)
}

func approve(id string) session.ResolveRequest {
	return session.ResolveRequest{InterruptID: id, Approved: true}
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
				h.expect(UpdateSendUserMessage, SendRequest{Text: "are you back?"}, true)
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
				h.expect(UpdateSendUserMessage, SendRequest{Text: "hello"}, true)
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
	h.then(func() { h.expect(UpdateSendUserMessage, SendRequest{Text: "again"}, true) })
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
		h.expect(UpdateSendUserMessage, SendRequest{Text: "next"}, true)
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
		h.expect(UpdateSendUserMessage, SendRequest{Text: "again"}, true)
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

// --- CallTool and CallSingleAttemptTool ---

// toolBehaviours are the ways a tool call can end: each test pairs them, by
// index, with the status and model-visible result it expects.
var toolBehaviours = []struct {
	name   string
	behave func(agent.ToolContext) (string, error)
}{
	{"succeeds", func(agent.ToolContext) (string, error) { return "order 7 shipped", nil }},
	{"fails for the model", func(agent.ToolContext) (string, error) { return "", agent.Failed("order 7 does not exist") }},
	{"outcome unknown", func(agent.ToolContext) (string, error) {
		return "", agent.OutcomeUnknown("the connection dropped after sending")
	}},
	{"plain error", func(agent.ToolContext) (string, error) { return "", errors.New("connection reset") }},
}

func TestCallToolOutcomes(t *testing.T) {
	type want struct {
		status session.ToolCallStatus
		result string
		runs   int
	}
	succeeded := want{session.ToolCallSucceeded, "order 7 shipped", 1}
	failed := want{session.ToolCallFailed, "The tool call failed: order 7 does not exist", 1}
	unknown := want{session.ToolCallOutcomeUnknown, session.OutcomeUnknownText + " (the connection dropped after sending)", 1}
	for _, tc := range []struct {
		effect agent.Effect
		wants  []want // by toolBehaviours
	}{
		{agent.EffectRead, []want{succeeded, failed, unknown,
			{session.ToolCallFailed, "The tool call failed: connection reset", 3}}},
		{agent.EffectIdempotentWrite, []want{succeeded, failed, unknown,
			{session.ToolCallOutcomeUnknown, session.OutcomeUnknownText + " (connection reset)", 3}}},
	} {
		for i, b := range toolBehaviours {
			w := tc.wants[i]
			t.Run(string(tc.effect)+"/"+b.name, func(t *testing.T) {
				var log callLog
				model := callsThenAnswer(order7("c1", "save_order"))
				h := newHarness(t, agent.Definition{Name: "t", Model: model,
					Tools: []agent.Tool{orderTool("save_order", tc.effect, &log, b.behave)}})
				h.then(func() {})
				h.run("go")
				if got := h.finishedStatus("c1"); got != w.status {
					t.Errorf("status = %s, want %s", got, w.status)
				}
				if got := toolMessage(t, h.snapshot(), "c1").Text; got != w.result {
					t.Errorf("stored result = %q, want %q", got, w.result)
				}
				if got := seenResults(t, model)["c1"]; got != w.result {
					t.Errorf("the model saw %q, want %q", got, w.result)
				}
				if log.count() != w.runs {
					t.Fatalf("tool ran %d times, want %d", log.count(), w.runs)
				}
				started := h.eventsFor(session.EventToolCallStarted, "c1")
				if len(started) != w.runs {
					t.Fatalf("tool_call_started events = %d, want one per attempt", len(started))
				}
				for j, call := range log.calls {
					if call.Attempt != j+1 || call.IdempotencyKey != log.calls[0].IdempotencyKey || call.Effect != tc.effect {
						t.Errorf("attempt %d context = %+v", j+1, call)
					}
					if e := started[j]; e.Attempt != j+1 || e.StepExecutionID != started[0].StepExecutionID ||
						!strings.HasPrefix(e.StepExecutionID, string(session.StepCallTool)+"/c1/") {
						t.Errorf("tool_call_started %d = %+v, want attempt %d of one CallTool execution", j, e, j+1)
					}
				}
				if key := log.calls[0].IdempotencyKey; !strings.HasSuffix(key, "/turn-1/c1") {
					t.Errorf("idempotency key = %q", key)
				}
			})
		}
	}
}

func TestCallSingleAttemptToolOutcomes(t *testing.T) {
	results := []struct {
		status session.ToolCallStatus
		result string
	}{
		{session.ToolCallSucceeded, "order 7 shipped"},
		{session.ToolCallFailed, "The tool call failed: order 7 does not exist"},
		{session.ToolCallOutcomeUnknown, session.OutcomeUnknownText + " (the connection dropped after sending)"},
		// A plain error is not retried: the write may have taken effect.
		{session.ToolCallOutcomeUnknown, session.OutcomeUnknownText + " (connection reset)"},
	}
	for _, tc := range []struct {
		name   string
		effect agent.Effect
		opts   []agent.ToolOption
		// approval says whether the call waits for approval first.
		approval bool
	}{
		{"non_idempotent_write without approval", agent.EffectNonIdempotentWrite, []agent.ToolOption{agent.WithApproval(false)}, false},
		{"unclassified, approved", agent.EffectUnclassified, nil, true},
	} {
		for i, b := range toolBehaviours {
			w := results[i]
			t.Run(tc.name+"/"+b.name, func(t *testing.T) {
				var log callLog
				model := callsThenAnswer(order7("c1", "send_order"))
				h := newHarness(t, agent.Definition{Name: "t", Model: model,
					Tools: []agent.Tool{orderTool("send_order", tc.effect, &log, b.behave, tc.opts...)}})
				h.then(func() {
					snap := h.snapshot()
					if pending := len(snap.PendingInterrupts) == 1; pending != tc.approval {
						t.Fatalf("interrupts = %+v, want an approval: %v", snap.PendingInterrupts, tc.approval)
					}
					if tc.approval {
						h.expect(UpdateResolveInterrupt, approve("c1"), true)
					}
				})
				h.then(func() {})
				h.run("go")
				if log.count() != 1 || log.calls[0].Attempt != 1 || log.calls[0].Effect != tc.effect {
					t.Fatalf("calls = %+v, want exactly one attempt", log.calls)
				}
				if got := h.finishedStatus("c1"); got != w.status {
					t.Errorf("status = %s, want %s", got, w.status)
				}
				if got := seenResults(t, model)["c1"]; got != w.result {
					t.Errorf("the model saw %q, want %q", got, w.result)
				}
				started := h.eventsFor(session.EventToolCallStarted, "c1")
				if len(started) != 1 || !strings.HasPrefix(started[0].StepExecutionID, string(session.StepCallSingleAttemptTool)+"/c1/") {
					t.Errorf("tool_call_started = %+v, want one CallSingleAttemptTool attempt", started)
				}
			})
		}
	}
}

func TestUnknownToolFailsWithoutApproval(t *testing.T) {
	model := callsThenAnswer(order7("c1", "no_such_tool"))
	var log callLog
	h := newHarness(t, agent.Definition{Name: "t", Model: model,
		Tools: []agent.Tool{orderTool("lookup_order", agent.EffectRead, &log, nil)}})
	h.then(func() {})
	h.run("go")
	if got, want := seenResults(t, model)["c1"], "The tool call failed: unknown tool no_such_tool"; got != want {
		t.Errorf("the model saw %q, want %q", got, want)
	}
	if n := len(h.events.ofType(session.EventInterruptRaised)); n != 0 {
		t.Errorf("interrupt_raised events = %d, want none", n)
	}
	if h.finishedStatus("c1") != session.ToolCallFailed || log.count() != 0 {
		t.Errorf("want failed without running any tool")
	}
}

func TestInvalidToolArgumentsFailForTheModel(t *testing.T) {
	for _, tc := range []struct {
		name      string
		arguments string
		want      string
		// exact says want is the whole result rather than its start.
		exact bool
	}{
		{"not JSON", `{"order_id":`, "The tool call failed: invalid arguments for lookup_order: arguments are not valid JSON", true},
		{"wrong type", `{"order_id":7}`, "The tool call failed: invalid arguments for lookup_order: ", false},
		{"missing required", `{}`, "The tool call failed: invalid arguments for lookup_order: ", false},
		{"not an object", `[1]`, "The tool call failed: invalid arguments for lookup_order: ", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var log callLog
			model := callsThenAnswer(toolCall("c1", "lookup_order", tc.arguments))
			h := newHarness(t, agent.Definition{Name: "t", Model: model,
				Tools: []agent.Tool{orderTool("lookup_order", agent.EffectRead, &log, nil)}})
			h.then(func() {})
			h.run("go")
			got := seenResults(t, model)["c1"]
			if !strings.HasPrefix(got, tc.want) || (tc.exact && got != tc.want) || (!tc.exact && got == tc.want) {
				t.Errorf("the model saw %q, want %q", got, tc.want)
			}
			if log.count() != 0 || len(h.eventsFor(session.EventToolCallStarted, "c1")) != 1 {
				t.Errorf("want one attempt that never reached the function")
			}
			// The stored call keeps the model's arguments.
			for _, m := range h.snapshot().Messages {
				if len(m.ToolCalls) > 0 && m.ToolCalls[0].Arguments != tc.arguments {
					t.Errorf("stored arguments = %q", m.ToolCalls[0].Arguments)
				}
			}
		})
	}
}

func TestToolPoliciesChooseApprovalAndStep(t *testing.T) {
	yes, no := true, false
	for _, tc := range []struct {
		name          string
		effect        agent.Effect
		opts          []agent.ToolOption
		policies      map[string]agent.Policy
		defaultEffect agent.Effect
		clearPolicy   bool // the tool has no effect of its own
		wantEffect    agent.Effect
		wantApproval  bool
	}{
		{name: "a read needs no approval", effect: agent.EffectRead,
			wantEffect: agent.EffectRead},
		{name: "a non-idempotent write needs approval", effect: agent.EffectNonIdempotentWrite,
			wantEffect: agent.EffectNonIdempotentWrite, wantApproval: true},
		{name: "policy makes a read require approval", effect: agent.EffectRead,
			policies:   map[string]agent.Policy{"the_tool": {Effect: agent.EffectRead, RequiresApproval: &yes}},
			wantEffect: agent.EffectRead, wantApproval: true},
		{name: "policy lets a non-idempotent write run without approval", effect: agent.EffectNonIdempotentWrite,
			policies:   map[string]agent.Policy{"the_tool": {Effect: agent.EffectNonIdempotentWrite, RequiresApproval: &no}},
			wantEffect: agent.EffectNonIdempotentWrite},
		{name: "policy effect wins over the tool's, with its default approval", effect: agent.EffectRead,
			policies:   map[string]agent.Policy{"the_tool": {Effect: agent.EffectUnclassified}},
			wantEffect: agent.EffectUnclassified, wantApproval: true},
		{name: "policy wins over the tool's own approval option", effect: agent.EffectRead, opts: []agent.ToolOption{agent.WithApproval(true)},
			policies:   map[string]agent.Policy{"the_tool": {Effect: agent.EffectIdempotentWrite}},
			wantEffect: agent.EffectIdempotentWrite},
		{name: "the tool's approval option", effect: agent.EffectIdempotentWrite, opts: []agent.ToolOption{agent.WithApproval(true)},
			wantEffect: agent.EffectIdempotentWrite, wantApproval: true},
		{name: "default effect does not override a tool's own effect", effect: agent.EffectRead,
			defaultEffect: agent.EffectNonIdempotentWrite, wantEffect: agent.EffectRead},
		{name: "default effect applies to a tool without an effect of its own", effect: agent.EffectNonIdempotentWrite,
			clearPolicy: true, defaultEffect: agent.EffectRead, wantEffect: agent.EffectRead},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var log callLog
			tool := orderTool("the_tool", tc.effect, &log, nil, tc.opts...)
			if tc.clearPolicy {
				tool.Policy = agent.Policy{}
			}
			model := callsThenAnswer(order7("c1", "the_tool"))
			h := newHarness(t, agent.Definition{Name: "t", Model: model, Tools: []agent.Tool{tool},
				ToolPolicies: tc.policies, DefaultToolEffect: tc.defaultEffect})
			h.then(func() {
				snap := h.snapshot()
				if pending := len(snap.PendingInterrupts) == 1; pending != tc.wantApproval {
					t.Errorf("interrupts = %+v, want an approval: %v", snap.PendingInterrupts, tc.wantApproval)
				}
				if tc.wantApproval {
					if log.count() != 0 {
						t.Errorf("the tool ran before approval")
					}
					h.expect(UpdateResolveInterrupt, approve("c1"), true)
				}
			})
			h.then(func() {})
			h.run("go")
			deferred := h.eventsFor(session.EventToolCallDeferred, "c1")
			if len(deferred) != 1 {
				t.Fatalf("tool_call_deferred events = %d", len(deferred))
			}
			p := payload(t, deferred[0])
			if p["effect"] != string(tc.wantEffect) || p["requires_approval"] != tc.wantApproval {
				t.Errorf("tool_call_deferred = %v, want effect %s and requires_approval %v", p, tc.wantEffect, tc.wantApproval)
			}
			if log.count() != 1 || log.calls[0].Effect != tc.wantEffect {
				t.Fatalf("calls = %+v, want one with effect %s", log.calls, tc.wantEffect)
			}
			step := session.ToolStep(tc.wantEffect)
			if started := h.eventsFor(session.EventToolCallStarted, "c1"); len(started) != 1 || !strings.HasPrefix(started[0].StepExecutionID, string(step)+"/") {
				t.Errorf("tool_call_started = %+v, want it from %s", started, step)
			}
		})
	}
}

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
					h.expect(UpdateResolveInterrupt, *tc.resolve, true)
				}
			})
			h.then(func() {
				// 12 minutes in: any deadline has passed.
				snap := h.snapshot()
				if len(snap.PendingInterrupts) != 0 || snap.State.Status != session.StatusWaitingForUserMessage {
					t.Errorf("snapshot = %+v, want the turn over and no interrupt", snap)
				}
				h.refuse(UpdateResolveInterrupt, approve("c1"), "not pending")
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

func TestTwoToolCallsRunAndStoreResultsInModelOrder(t *testing.T) {
	var writes, reads callLog
	// c1 waits for approval, so c2 finishes first.
	model := callsThenAnswer(order7("c1", "refund_order"), order7("c2", "lookup_order"))
	h := newHarness(t, agent.Definition{Name: "t", Model: model, Tools: []agent.Tool{
		orderTool("refund_order", agent.EffectNonIdempotentWrite, &writes, nil),
		orderTool("lookup_order", agent.EffectRead, &reads, nil),
	}})
	h.then(func() {
		snap := h.snapshot()
		if toolRecord(t, snap, "c2").Status != session.ToolCallSucceeded || toolRecord(t, snap, "c1").Status != session.ToolCallAwaitingApproval {
			t.Fatalf("records = %+v, want c2 done and c1 waiting", snap.ToolCalls)
		}
		for _, m := range snap.Messages {
			if m.Role == session.RoleTool {
				t.Errorf("result %+v stored before every call of the response is final", m)
			}
		}
		h.expect(UpdateResolveInterrupt, approve("c1"), true)
	})
	h.then(func() {})
	h.run("go")
	snap := h.snapshot()
	var order []string
	for _, m := range snap.Messages {
		if m.Role == session.RoleTool {
			order = append(order, m.ToolCallID+"="+m.Text)
		}
	}
	if want := []string{"c1=refund_order 7", "c2=lookup_order 7"}; !slices.Equal(order, want) {
		t.Errorf("stored results = %v, want %v", order, want)
	}
	reqs := model.Requests()
	var seen []string
	for _, r := range agent.ToolResults(reqs[len(reqs)-1]) {
		seen = append(seen, r.ToolCallID)
	}
	if !slices.Equal(seen, []string{"c1", "c2"}) || len(reqs) != 2 {
		t.Errorf("the model's second call got results %v, want c1, c2", seen)
	}
	if writes.count() != 1 || reads.count() != 1 {
		t.Errorf("runs = %d writes, %d reads, want one each", writes.count(), reads.count())
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
		{name: "answered", rpc: UpdateAnswerQuestion, arg: session.AnswerRequest{InterruptID: "q1", Answer: "M"},
			wantStatus: session.ToolCallSucceeded, wantResult: `{"status":"answered","answer":"M"}`},
		{name: "declined", rpc: UpdateResolveInterrupt, arg: session.ResolveRequest{InterruptID: "q1"},
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

// --- durable_wait ---

func TestDurableWaitCompletesOnTheEngineTimer(t *testing.T) {
	model := callsThenAnswer(toolCall("w1", "durable_wait", map[string]any{"duration_seconds": 90, "reason": "the job is slow"}))
	h := newHarness(t, agent.Definition{Name: "t", Model: model, MaxDurableWait: time.Hour,
		BuiltInTools: []agent.BuiltInTool{agent.BuiltInDurableWait}})
	var started time.Time
	h.at(30*time.Second, func() {
		snap := h.snapshot()
		r := toolRecord(t, snap, "w1")
		if r.Status != session.ToolCallWaitingForTimer || r.WaitUntil == nil || r.WaitReason != "the job is slow" {
			t.Fatalf("record = %+v, want waiting for the timer", r)
		}
		started = r.WaitUntil.Add(-90 * time.Second)
		if len(model.Requests()) != 1 {
			t.Errorf("a model call ran during the wait")
		}
	})
	h.at(80*time.Second, func() {
		if toolRecord(t, h.snapshot(), "w1").Status != session.ToolCallWaitingForTimer {
			t.Errorf("the wait ended early")
		}
	})
	h.then(func() {}) // one minute
	h.then(func() {}) // two minutes: the wait is over
	h.run("go")
	if want := `{"status":"completed","waited_seconds":90,"reason":"the job is slow"}`; seenResults(t, model)["w1"] != want {
		t.Errorf("the model saw %q, want %q", seenResults(t, model)["w1"], want)
	}
	timers := h.events.ofType(session.EventTimerStarted)
	if len(timers) != 1 {
		t.Fatalf("timer_started events = %d", len(timers))
	}
	p := payload(t, timers[0])
	until, _ := time.Parse(time.RFC3339Nano, fmt.Sprint(p["wait_until"]))
	if p["tool_call_id"] != "w1" || p["reason"] != "the job is slow" || !until.Equal(started.Add(90*time.Second)) {
		t.Errorf("timer_started = %v", p)
	}
	if h.finishedStatus("w1") != session.ToolCallSucceeded || len(h.eventsFor(session.EventToolCallStarted, "w1")) != 0 {
		t.Errorf("want succeeded without a tool Step")
	}
}

func TestDurableWaitRefusesDurationsOutOfRange(t *testing.T) {
	for _, tc := range []struct {
		name     string
		maxWait  time.Duration
		duration any
		maxText  string
	}{
		{"zero", time.Hour, 0, "3600"},
		{"negative", time.Hour, -5, "3600"},
		{"above the maximum", time.Hour, 3601, "3600"},
		{"fractional", time.Hour, 1.5, "3600"},
		{"a string", time.Hour, "10", "3600"},
		{"missing", time.Hour, nil, "3600"},
		{"above the default maximum of 365 days", 0, 365*24*3600 + 1, "31536000"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			args := map[string]any{"reason": "later"}
			if tc.duration != nil {
				args["duration_seconds"] = tc.duration
			}
			model := callsThenAnswer(toolCall("w1", "durable_wait", args))
			h := newHarness(t, agent.Definition{Name: "t", Model: model, MaxDurableWait: tc.maxWait,
				BuiltInTools: []agent.BuiltInTool{agent.BuiltInDurableWait}})
			h.then(func() {})
			h.run("go")
			want := "The tool call failed: invalid durable_wait arguments: duration_seconds must be a whole number of seconds from 1 to " + tc.maxText
			if got := seenResults(t, model)["w1"]; got != want {
				t.Errorf("the model saw %q, want %q", got, want)
			}
			if len(h.events.ofType(session.EventTimerStarted)) != 0 || h.finishedStatus("w1") != session.ToolCallFailed {
				t.Errorf("want failed at once, with no timer")
			}
		})
	}
}

// --- Events ---

func TestEventsOfATurnWithAnApprovalAndARejection(t *testing.T) {
	var log callLog
	model := callsThenAnswer(order7("c1", "refund_order"), order7("c2", "refund_order"))
	h := newHarness(t, agent.Definition{Name: "t", Model: model,
		Tools: []agent.Tool{orderTool("refund_order", agent.EffectNonIdempotentWrite, &log, nil)}})
	h.then(func() {
		h.expect(UpdateResolveInterrupt, approve("c1"), true)
		h.expect(UpdateResolveInterrupt, session.ResolveRequest{InterruptID: "c2", RejectionMessage: "once is enough"}, true)
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
