package engine

import (
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/stepwise-run/stepwise/internal/session"
	"github.com/stepwise-run/stepwise/internal/sessionrpc"
	"github.com/stepwise-run/stepwise/pkg/agent"
)

func TestASessionCompactsAndTheModelSeesTheSummary(t *testing.T) {
	var mu sync.Mutex
	var requests []agent.ModelRequest
	model := agent.NewScriptedModel(func(req agent.ModelRequest) (agent.ScriptedReply, error) {
		mu.Lock()
		defer mu.Unlock()
		requests = append(requests, req)
		if req.Instructions == session.ContextSummaryInstructions {
			return agent.ScriptedReply{Text: fmt.Sprintf("SUMMARY of %d messages", len(req.Input))}, nil
		}
		texts := agent.UserTexts(req)
		return agent.ScriptedReply{Text: "answer to " + texts[len(texts)-1] + strings.Repeat(".", 60)}, nil
	})
	h := newHarness(t, agent.Definition{Name: "t", Model: model,
		Compaction: &agent.CompactionPolicy{ContextWindowTokens: 300, RetainedMessages: 10}})
	spans := h.traced()
	const turns = 60
	for i := 2; i <= turns; i++ {
		h.then(func() {
			h.expect(sessionrpc.UpdateSendUserMessage, session.SendRequest{Text: fmt.Sprintf("question %d %s", i, strings.Repeat("?", 60))}, true)
		})
	}
	h.then(func() {
		snap := h.snapshot()
		if snap.State.TurnCount != turns || snap.State.ActiveTurnID != "" || snap.State.LastTurnError != "" {
			t.Fatalf("state = %+v", snap.State)
		}
	})
	h.run("question 1")
	started, finished := h.events.ofType(session.EventCompactionStarted), h.events.ofType(session.EventCompactionFinished)
	if len(started) == 0 || len(started) != len(finished) {
		t.Fatalf("compactions: %d started, %d finished", len(started), len(finished))
	}
	var summaries, sawSummary int
	for _, req := range requests {
		if req.Instructions == session.ContextSummaryInstructions {
			summaries++
			if len(req.Tools) != 0 {
				t.Errorf("a summary call offered tools")
			}
			continue
		}
		if strings.HasPrefix(req.Input[0].Text, session.ContextSummaryNoteHeader) {
			sawSummary++
		}
		if tokens := agent.EstimateTokens(req); tokens >= 300 {
			t.Errorf("a model call sent %d tokens, past the window of 300", tokens)
		}
	}
	if summaries != len(started) || sawSummary == 0 {
		t.Errorf("%d summary calls for %d compactions; %d model calls saw a summary", summaries, len(started), sawSummary)
	}
	// Each summary call is a chat span of its turn's activation, naming the
	// last message it summarized and carrying the summary.
	var roots, summarySpans int
	for _, sp := range spans.GetSpans() {
		attrs := map[string]string{}
		for _, kv := range sp.Attributes {
			attrs[string(kv.Key)] = kv.Value.String()
		}
		switch {
		case sp.Name == "invoke_agent t":
			roots++
		case attrs["stepwise.step.type"] == string(session.StepCompactContext):
			through := fmt.Sprint(payload(t, started[summarySpans])["through_sequence"])
			if sp.Name != "chat" || attrs["stepwise.agent.input_messages.last_key"] != through ||
				!strings.Contains(attrs["gen_ai.output.messages"], "SUMMARY of") || !sp.Parent.IsValid() {
				t.Errorf("summary span %d: %s %v, want one through %s", summarySpans, sp.Name, attrs, through)
			}
			summarySpans++
		}
	}
	if roots != turns || summarySpans != len(started) {
		t.Errorf("%d activation roots for %d turns, %d summary spans for %d compactions", roots, turns, summarySpans, len(started))
	}
	page := h.messages(session.ListMessagesRequest{Limit: 200})
	if page.DeletedBeforeSequence == 0 || len(page.Messages) < 10 || page.FirstSequence != page.DeletedBeforeSequence {
		t.Errorf("after retention: %d messages from %d, deleted before %d", len(page.Messages), page.FirstSequence, page.DeletedBeforeSequence)
	}
}

func TestASessionThatStoresTooMuchFailsTurnsBeforeTheirModelCall(t *testing.T) {
	// Each answer is stored about three times over: its text, and its
	// provider-exact output item with the text read from it.
	calls := 0
	model := agent.NewScriptedModel(func(agent.ModelRequest) (agent.ScriptedReply, error) {
		calls++
		return agent.ScriptedReply{Text: strings.Repeat("x", 200<<10)}, nil
	})
	h := newHarness(t, agent.Definition{Name: "t", Model: model})
	for range 3 {
		h.then(func() { h.expect(sessionrpc.UpdateSendUserMessage, session.SendRequest{Text: "more"}, true) })
	}
	h.then(func() {
		snap := h.snapshot()
		if snap.State.TurnCount != 4 || !strings.Contains(snap.State.LastTurnError, "enable compaction with a retention limit") {
			t.Errorf("state = %+v", snap.State)
		}
	})
	h.run("start")
	if calls != 3 {
		t.Errorf("the model was called %d times, want 3: the fourth turn fails before its call", calls)
	}
}
