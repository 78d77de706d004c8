package engine

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stepwise-run/stepwise/internal/session"
	"github.com/stepwise-run/stepwise/internal/sessionrpc"
	"github.com/stepwise-run/stepwise/pkg/agent"
)

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
						h.expect(sessionrpc.UpdateResolveInterrupt, approve("c1"), true)
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
					h.expect(sessionrpc.UpdateResolveInterrupt, approve("c1"), true)
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
		h.expect(sessionrpc.UpdateResolveInterrupt, approve("c1"), true)
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
