package engine

import (
	"fmt"
	"testing"
	"time"

	"github.com/stepwise-run/stepwise/internal/session"
	"github.com/stepwise-run/stepwise/internal/sessionrpc"
	"github.com/stepwise-run/stepwise/pkg/agent"
)

func TestSendUserMessageRefusesBlankText(t *testing.T) {
	model := script(agent.ScriptedReply{Text: "hello"})
	h := newHarness(t, agent.Definition{Name: "t", Model: model})
	h.then(func() {
		for _, text := range []string{"", "   ", "\n\t"} {
			h.refuse(sessionrpc.UpdateSendUserMessage, session.SendRequest{Text: text}, "blank")
		}
	})
	h.then(func() {})
	h.run("Hi")
	snap := h.snapshot()
	if snap.State.TurnCount != 1 || snap.QueuedMessageCount != 0 || len(model.Requests()) != 1 {
		t.Errorf("a blank message changed the session: %+v, %d queued", snap.State, snap.QueuedMessageCount)
	}
}

func TestSendUserMessageDuringATurnWaitsForTheNextTurn(t *testing.T) {
	var log callLog
	model := agent.NewScriptedModel(func(req agent.ModelRequest) (agent.ScriptedReply, error) {
		texts := agent.UserTexts(req)
		switch {
		case texts[len(texts)-1] == "and then?":
			return agent.ScriptedReply{Text: "then nothing"}, nil
		case len(agent.ToolResults(req)) > 0:
			return agent.ScriptedReply{Text: "refunded"}, nil
		}
		return agent.ScriptedReply{ToolCalls: []agent.ScriptedToolCall{order7("c1", "refund_order")}}, nil
	})
	h := newHarness(t, agent.Definition{Name: "t", Model: model,
		Tools: []agent.Tool{orderTool("refund_order", agent.EffectNonIdempotentWrite, &log, nil)}})
	h.then(func() {
		h.expect(sessionrpc.UpdateSendUserMessage, session.SendRequest{Text: "and then?"}, true)
	})
	h.then(func() {
		snap := h.snapshot()
		if snap.QueuedMessageCount != 1 || len(snap.QueuedMessages) != 1 || snap.QueuedMessages[0].Text != "and then?" || snap.QueuedMessages[0].ID == "" {
			t.Errorf("queued = %d %+v, want the message", snap.QueuedMessageCount, snap.QueuedMessages)
		}
		if snap.State.TurnCount != 1 || snap.State.ActiveTurnID != "turn-1" || len(model.Requests()) != 1 {
			t.Errorf("state = %+v, want turn 1 still waiting for its approval", snap.State)
		}
		h.expect(sessionrpc.UpdateResolveInterrupt, approve("c1"), true)
	})
	h.then(func() {})
	h.run("refund order 7")
	snap := h.snapshot()
	if snap.State.TurnCount != 2 || snap.QueuedMessageCount != 0 {
		t.Fatalf("state = %+v, %d queued, want the queued message to start turn 2", snap.State, snap.QueuedMessageCount)
	}
	var texts []string
	for _, m := range snap.Messages {
		texts = append(texts, m.TurnID+":"+m.Text)
	}
	want := fmt.Sprint([]string{"turn-1:refund order 7", "turn-1:", "turn-1:refund_order 7", "turn-1:refunded", "turn-2:and then?", "turn-2:then nothing"})
	if fmt.Sprint(texts) != want {
		t.Errorf("messages = %v, want %v", texts, want)
	}
	started := h.events.ofType(session.EventTurnStarted)
	if len(started) != 2 || started[1].TurnID != "turn-2" || payload(t, started[1])["sequence"] != 5.0 {
		t.Errorf("turn_started events = %+v", started)
	}
}

func TestStartSession(t *testing.T) {
	for _, initial := range []string{"", "  \n"} {
		t.Run(fmt.Sprintf("blank initial message %q starts no turn", initial), func(t *testing.T) {
			model := script(agent.ScriptedReply{Text: "hello"})
			h := newHarness(t, agent.Definition{Name: "t", Model: model})
			h.then(func() {
				snap := h.snapshot()
				if snap.State == nil || snap.State.Status != session.StatusWaitingForUserMessage || snap.State.TurnCount != 0 || snap.State.ActiveTurnID != "" {
					t.Errorf("state = %+v, want waiting with no turn", snap.State)
				}
				if len(snap.Messages) != 0 || snap.QueuedMessageCount != 0 || len(model.Requests()) != 0 {
					t.Errorf("snapshot = %+v, want nothing stored or queued", snap)
				}
				if len(h.events.ofType(session.EventTurnStarted)) != 0 {
					t.Errorf("a turn started")
				}
				// The call that started the session is told so; another is not.
				h.expect(sessionrpc.UpdateStartSession, session.StartInput{RequestID: "start-1"}, true)
				h.expect(sessionrpc.UpdateStartSession, session.StartInput{RequestID: "start-2", InitialMessage: "Hi"}, false)
				h.expect(sessionrpc.UpdateSendUserMessage, session.SendRequest{Text: "Hi"}, true)
			})
			h.then(func() {})
			h.run(initial)
			snap := h.snapshot()
			if snap.State.TurnCount != 1 || len(snap.Messages) != 2 || snap.Messages[0].Text != "Hi" {
				t.Errorf("after a message: %+v %+v, want one turn", snap.State, snap.Messages)
			}
		})
	}
}

// pendingApprovalAndQuestion is a session whose turn waits on approval a1
// and question q1, which offers choices S and M and no free text.
func pendingApprovalAndQuestion(t *testing.T, deadline time.Duration) (*harness, *callLog) {
	var log callLog
	model := callsThenAnswer(
		order7("a1", "refund_order"),
		toolCall("q1", "ask_user", map[string]any{"question": "Which size?", "choices": []string{"S", "M"}}),
	)
	h := newHarness(t, agent.Definition{Name: "t", Model: model, InterruptDeadline: deadline,
		BuiltInTools: []agent.BuiltInTool{agent.BuiltInAskUser},
		Tools:        []agent.Tool{orderTool("refund_order", agent.EffectNonIdempotentWrite, &log, nil)}})
	return h, &log
}

func TestResolveInterruptRefuses(t *testing.T) {
	h, log := pendingApprovalAndQuestion(t, 0)
	h.then(func() {
		if n := len(h.snapshot().PendingInterrupts); n != 2 {
			t.Fatalf("pending interrupts = %d, want 2", n)
		}
		for _, tc := range []struct {
			req    session.ResolveRequest
			reason string
		}{
			{session.ResolveRequest{InterruptID: "nope", Approved: true}, "not pending"},
			{session.ResolveRequest{InterruptID: "nope"}, "not pending"},
			{session.ResolveRequest{InterruptID: "", Approved: true}, "not pending"},
			{session.ResolveRequest{InterruptID: "q1", Approved: true}, "is a question"},
		} {
			h.refuse(sessionrpc.UpdateResolveInterrupt, tc.req, tc.reason)
		}
	})
	h.then(func() {
		// The refusals changed nothing.
		if n := len(h.snapshot().PendingInterrupts); n != 2 {
			t.Fatalf("pending interrupts = %d, want 2", n)
		}
		h.expect(sessionrpc.UpdateResolveInterrupt, approve("a1"), true)
		h.expect(sessionrpc.UpdateResolveInterrupt, session.ResolveRequest{InterruptID: "q1"}, true)
	})
	h.then(func() {
		for _, req := range []session.ResolveRequest{approve("a1"), {InterruptID: "a1"}, {InterruptID: "q1"}} {
			h.refuse(sessionrpc.UpdateResolveInterrupt, req, "not pending")
		}
	})
	h.run("go")
	if log.count() != 1 {
		t.Errorf("the approved call ran %d times, want 1", log.count())
	}
	if h.finishedStatus("q1") != session.ToolCallRejected {
		t.Errorf("the declined question is not rejected")
	}
}

func TestAnswerQuestionRefuses(t *testing.T) {
	h, _ := pendingApprovalAndQuestion(t, 0)
	h.then(func() {
		for _, tc := range []struct {
			req    session.AnswerRequest
			reason string
		}{
			{session.AnswerRequest{InterruptID: "nope", Answer: "S"}, "not pending"},
			{session.AnswerRequest{InterruptID: "a1", Answer: "S"}, "not a question"},
			{session.AnswerRequest{InterruptID: "q1", Answer: ""}, "blank"},
			{session.AnswerRequest{InterruptID: "q1", Answer: "  "}, "blank"},
			{session.AnswerRequest{InterruptID: "q1", Answer: "XL"}, "not one of the choices"},
			{session.AnswerRequest{InterruptID: "q1", Answer: "s"}, "not one of the choices"},
			{session.AnswerRequest{InterruptID: "q1", Answer: " S"}, "not one of the choices"},
		} {
			h.refuse(sessionrpc.UpdateAnswerQuestion, tc.req, tc.reason)
		}
	})
	h.then(func() {
		if n := len(h.snapshot().PendingInterrupts); n != 2 {
			t.Fatalf("pending interrupts = %d, want 2: a refusal changed something", n)
		}
		h.expect(sessionrpc.UpdateAnswerQuestion, session.AnswerRequest{InterruptID: "q1", Answer: "S"}, true)
	})
	h.then(func() {
		snap := h.snapshot()
		if r := toolRecord(t, snap, "q1"); r.Status != session.ToolCallSucceeded || r.Output != `{"status":"answered","answer":"S"}` {
			t.Errorf("record = %+v", r)
		}
		h.refuse(sessionrpc.UpdateAnswerQuestion, session.AnswerRequest{InterruptID: "q1", Answer: "M"}, "not pending")
		h.refuse(sessionrpc.UpdateResolveInterrupt, session.ResolveRequest{InterruptID: "q1"}, "not pending")
	})
	h.run("go")
	resolved := h.events.ofType(session.EventInterruptResolved)
	if len(resolved) != 1 {
		t.Fatalf("interrupt_resolved events = %d, want 1", len(resolved))
	}
	if p := payload(t, resolved[0]); p["interrupt_id"] != "q1" || p["answered"] != true || p["kind"] != "question" {
		t.Errorf("interrupt_resolved = %v", p)
	}
}

func TestAnswerQuestionAllowsFreeTextWhenAsked(t *testing.T) {
	model := callsThenAnswer(toolCall("q1", "ask_user", map[string]any{
		"question": "Which size?", "choices": []string{"S", "M"}, "allows_free_text": true,
	}))
	h := newHarness(t, agent.Definition{Name: "t", Model: model, BuiltInTools: []agent.BuiltInTool{agent.BuiltInAskUser}})
	h.then(func() {
		h.refuse(sessionrpc.UpdateAnswerQuestion, session.AnswerRequest{InterruptID: "q1", Answer: " "}, "blank")
		h.expect(sessionrpc.UpdateAnswerQuestion, session.AnswerRequest{InterruptID: "q1", Answer: "XL please"}, true)
	})
	h.then(func() {})
	h.run("go")
	if got := seenResults(t, model)["q1"]; got != `{"status":"answered","answer":"XL please"}` {
		t.Errorf("the model saw %q", got)
	}
}

// TestRPCsPastTheDeadline resolves and answers within the second after the
// deadline, before the engine's timer, which waits whole seconds, expires
// the interrupts.
func TestRPCsPastTheDeadline(t *testing.T) {
	deadline := 10*time.Minute + 300*time.Millisecond
	h, log := pendingApprovalAndQuestion(t, deadline)
	h.gap = 6 * time.Minute
	h.at(deadline-100*time.Millisecond, func() {
		if n := len(h.snapshot().PendingInterrupts); n != 2 {
			t.Errorf("pending interrupts = %d just before the deadline, want 2", n)
		}
	})
	h.at(deadline+200*time.Millisecond, func() {
		snap := h.snapshot()
		if len(snap.PendingInterrupts) != 2 {
			t.Fatalf("pending interrupts = %+v, want both still raised until the timer fires", snap.PendingInterrupts)
		}
		h.refuse(sessionrpc.UpdateResolveInterrupt, approve("a1"), "past its deadline")
		h.refuse(sessionrpc.UpdateResolveInterrupt, session.ResolveRequest{InterruptID: "q1"}, "past its deadline")
		h.refuse(sessionrpc.UpdateAnswerQuestion, session.AnswerRequest{InterruptID: "q1", Answer: "S"}, "past its deadline")
	})
	h.then(func() {}) // 6 minutes
	h.then(func() {   // 12 minutes: the timers have fired
		snap := h.snapshot()
		if len(snap.PendingInterrupts) != 0 || snap.State.Status != session.StatusWaitingForUserMessage {
			t.Errorf("snapshot = %+v, want the interrupts expired and the turn over", snap)
		}
		h.refuse(sessionrpc.UpdateResolveInterrupt, approve("a1"), "not pending")
		h.refuse(sessionrpc.UpdateAnswerQuestion, session.AnswerRequest{InterruptID: "q1", Answer: "S"}, "not pending")
	})
	h.run("go")
	if log.count() != 0 {
		t.Errorf("the expired call ran")
	}
	snap := h.snapshot()
	if got := toolMessage(t, snap, "a1").Text; got != "The user rejected the tool call: "+session.ApprovalDeadlineText {
		t.Errorf("a1 result = %q", got)
	}
	if got := toolMessage(t, snap, "q1").Text; got != session.QuestionDeadlineText {
		t.Errorf("q1 result = %q", got)
	}
}

func TestListAgentMessages(t *testing.T) {
	// One response with 205 durable waits whose arguments are invalid: each
	// fails at once, so the turn stores 1 + 1 + 205 + 1 = 208 messages.
	const waits = 205
	calls := make([]agent.ScriptedToolCall, waits)
	for i := range calls {
		calls[i] = toolCall(fmt.Sprintf("w%d", i+1), "durable_wait", map[string]any{"duration_seconds": 0, "reason": "none"})
	}
	model := callsThenAnswer(calls...)
	h := newHarness(t, agent.Definition{Name: "t", Model: model, BuiltInTools: []agent.BuiltInTool{agent.BuiltInDurableWait}})
	h.then(func() {})
	h.run("go")
	const total = 208

	type want struct {
		first, last int64 // sequences of the page's first and last message
		next        int64
	}
	for _, tc := range []struct {
		name string
		req  session.ListMessagesRequest
		want want
	}{
		{"limit 0 is clamped to 1", session.ListMessagesRequest{Limit: 0}, want{total, total, total}},
		{"negative limit is clamped to 1", session.ListMessagesRequest{Limit: -3}, want{total, total, total}},
		{"limit 500 is clamped to 200", session.ListMessagesRequest{Limit: 500}, want{total - 199, total, total - 199}},
		{"limit 200", session.ListMessagesRequest{Limit: 200}, want{total - 199, total, total - 199}},
		{"the page before the newest 200 is the last page", session.ListMessagesRequest{Limit: 200, BeforeSequence: total - 199}, want{1, total - 200, 0}},
		{"a small page in the middle", session.ListMessagesRequest{Limit: 3, BeforeSequence: 100}, want{97, 99, 97}},
		{"the last page", session.ListMessagesRequest{Limit: 3, BeforeSequence: 3}, want{1, 2, 0}},
		{"before the first message", session.ListMessagesRequest{Limit: 3, BeforeSequence: 1}, want{0, 0, 0}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			page := h.messages(tc.req)
			if page.FirstSequence != 1 {
				t.Errorf("first sequence = %d, want 1", page.FirstSequence)
			}
			var got want
			if n := len(page.Messages); n > 0 {
				got.first, got.last = page.Messages[0].Sequence, page.Messages[n-1].Sequence
				if int64(n) != got.last-got.first+1 {
					t.Errorf("page of %d messages spans %d..%d", n, got.first, got.last)
				}
			}
			got.next = page.NextBeforeSequence
			if got != tc.want {
				t.Errorf("page = %+v, want %+v", got, tc.want)
			}
		})
	}

	// Paging with NextBeforeSequence visits every message once, oldest
	// first within each page.
	var seen []int64
	req := session.ListMessagesRequest{Limit: 50}
	for range 10 {
		page := h.messages(req)
		var seqs []int64
		for _, m := range page.Messages {
			seqs = append(seqs, m.Sequence)
		}
		seen = append(seqs, seen...)
		if page.NextBeforeSequence == 0 {
			break
		}
		req.BeforeSequence = page.NextBeforeSequence
	}
	if len(seen) != total || seen[0] != 1 || seen[total-1] != total {
		t.Errorf("paging saw %d messages, want %d in order", len(seen), total)
	}
	for i := 1; i < len(seen); i++ {
		if seen[i] != seen[i-1]+1 {
			t.Fatalf("paging skipped or repeated at %d: %v", i, seen[i-1:i+1])
		}
	}

	if snap := h.snapshot(); len(snap.Messages) != session.SnapshotMessageCount || snap.Messages[0].Sequence != total-199 {
		t.Errorf("snapshot holds %d messages from %d, want the last 200", len(snap.Messages), snap.Messages[0].Sequence)
	}
}
