package engine

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stepwise-run/stepwise/internal/session"
	"github.com/stepwise-run/stepwise/internal/sessionrpc"
	"github.com/stepwise-run/stepwise/pkg/agent"
)

// The rarer routes between Steps: turn control while a model call or a
// summary call runs, Steps whose attempts run out, and tasks abandoned
// while they ask. With the other workflow tests they take every transition
// of the published Flow graph (see TestMain).

func TestCancelTurnDuringAModelCallDropsItsAnswer(t *testing.T) {
	h := newHarness(t, agent.Definition{Name: "t", Model: script(agent.ScriptedReply{Text: "too late"})})
	h.slowFirstCall(session.StepRunModel, 5*time.Minute)
	h.then(func() {
		if snap := h.snapshot(); snap.State.Status != session.StatusRunningModel {
			t.Fatalf("state = %+v, want the model call running", snap.State)
		}
		h.expect(sessionrpc.UpdateCancelTurn, session.CancelRequest{TurnID: "turn-1"}, true)
	})
	h.then(func() {
		snap := h.snapshot()
		if snap.State.ActiveTurnID != "" || snap.State.TurnCount != 1 {
			t.Fatalf("state = %+v, want the turn cancelled", snap.State)
		}
		if got := transcript(snap); !slices.Equal(got, []string{"turn-1 user: hello"}) {
			t.Errorf("messages = %q, want the answer dropped", got)
		}
	})
	h.run("hello")
	if n := len(h.events.ofType(session.EventTurnCancelled)); n != 1 {
		t.Errorf("turn_cancelled events = %d, want 1", n)
	}
}

func TestASteerDuringAModelCallWhoseAnswerContinuesTheTurn(t *testing.T) {
	continued := 0
	def := agent.Definition{Name: "t", Model: steerableModel(),
		DecideTurnContinuation: func(c agent.TurnContinuationContext) (agent.TurnContinuation, error) {
			if c.TurnID == "turn-1" && len(c.ToolResults) == 0 && continued == 0 {
				continued++
				return agent.ContinueTurn("and check the stock"), nil
			}
			return agent.DefaultTurnContinuation, nil
		}}
	h := newHarness(t, def)
	h.slowFirstCall(session.StepRunModel, 5*time.Minute)
	h.gap = 3 * time.Minute
	h.then(func() {
		h.expect(sessionrpc.UpdateSteerUserMessage, session.SteerRequest{Text: "use the other warehouse"}, true)
	})
	h.then(func() {
		snap := h.snapshot()
		if snap.State.ActiveTurnID != "" || snap.State.TurnCount != 2 {
			t.Fatalf("state = %+v, want the steered turn ended and the next one done", snap.State)
		}
		want := []string{
			"turn-1 user: hello", "turn-1 assistant: ", "turn-1 user: and check the stock",
			"turn-2 user: use the other warehouse", "turn-2 assistant: now: use the other warehouse",
		}
		if got := transcript(snap); !slices.Equal(got, want) {
			t.Errorf("messages =\n%q\nwant\n%q", got, want)
		}
	})
	h.run("hello")
	if n := len(h.events.ofType(session.EventTurnSteered)); n != 1 {
		t.Errorf("turn_steered events = %d, want 1", n)
	}
}

// compactingDefinition compacts before the second turn's model call; its
// summary calls answer with summary.
func compactingDefinition(summary func() (agent.ScriptedReply, error)) agent.Definition {
	model := agent.NewScriptedModel(func(req agent.ModelRequest) (agent.ScriptedReply, error) {
		if req.Instructions == session.ContextSummaryInstructions {
			return summary()
		}
		texts := agent.UserTexts(req)
		return agent.ScriptedReply{Text: "answer to " + texts[len(texts)-1] + strings.Repeat(".", 200)}, nil
	})
	return agent.Definition{Name: "t", Model: model, Compaction: &agent.CompactionPolicy{ContextWindowTokens: 120, RetainedMessages: 10}}
}

func TestTurnControlDuringASummaryCall(t *testing.T) {
	for _, tc := range []struct {
		name    string
		control func(h *harness)
		turns   int
		event   session.EventType
	}{
		{"steered", func(h *harness) {
			h.expect(sessionrpc.UpdateSteerUserMessage, session.SteerRequest{Text: "never mind"}, true)
		}, 3, session.EventTurnSteered},
		{"cancelled", func(h *harness) {
			h.expect(sessionrpc.UpdateCancelTurn, session.CancelRequest{TurnID: "turn-2"}, true)
		}, 2, session.EventTurnCancelled},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, compactingDefinition(func() (agent.ScriptedReply, error) {
				return agent.ScriptedReply{Text: "SUMMARY"}, nil
			}))
			h.slowFirstCall(session.StepCompactContext, 3*time.Minute)
			h.gap = 2 * time.Minute
			h.then(func() {
				h.expect(sessionrpc.UpdateSendUserMessage, session.SendRequest{Text: "second question " + strings.Repeat("?", 200)}, true)
			})
			h.then(func() {
				if snap := h.snapshot(); snap.State.Status != session.StatusCompactingContext {
					t.Fatalf("state = %+v, want the summary call running", snap.State)
				}
				tc.control(h)
			})
			h.then(func() {
				snap := h.snapshot()
				if snap.State.ActiveTurnID != "" || snap.State.TurnCount != tc.turns {
					t.Errorf("state = %+v, want %d turns and none active", snap.State, tc.turns)
				}
			})
			h.run("first question")
			if n := len(h.events.ofType(tc.event)); n != 1 {
				t.Errorf("%s events = %d, want 1", tc.event, n)
			}
		})
	}
}

func TestASummaryCallThatFailsFailsTheTurn(t *testing.T) {
	h := newHarness(t, compactingDefinition(func() (agent.ScriptedReply, error) {
		return agent.ScriptedReply{}, &agent.ModelError{Provider: "scripted", StatusCode: 400, Message: "no summaries today"}
	}))
	h.then(func() {
		h.expect(sessionrpc.UpdateSendUserMessage, session.SendRequest{Text: "second question " + strings.Repeat("?", 200)}, true)
	})
	h.then(func() {
		snap := h.snapshot()
		if snap.State.ActiveTurnID != "" || !strings.Contains(snap.State.LastTurnError, "no summaries today") {
			t.Errorf("state = %+v, want the turn failed with the summary call's error", snap.State)
		}
	})
	h.run("first question")
}

func TestAPollWhoseAttemptsRunOutIsRecordedByTheCallsEffect(t *testing.T) {
	for _, tc := range []struct {
		effect agent.Effect
		want   string
	}{
		{agent.EffectRead, "The tool call failed: "},
		{agent.EffectNonIdempotentWrite, session.OutcomeUnknownText},
	} {
		t.Run(string(tc.effect), func(t *testing.T) {
			j := &jobs{failPolls: true}
			h := newHarness(t, agent.Definition{Name: "t", Model: reportModel(), Tools: []agent.Tool{j.tool(tc.effect)}})
			h.gap = 10 * time.Minute
			h.then(func() {
				snap := h.snapshot()
				if got := snap.Messages[2].Text; !strings.HasPrefix(got, tc.want) || !strings.Contains(got, "the job system is down") {
					t.Errorf("result = %q, want %q and the poll's error", got, tc.want)
				}
			})
			h.run("report")
			if len(j.polls) != 3 {
				t.Errorf("polled %d times, want 3 attempts", len(j.polls))
			}
		})
	}
}

func TestAnAbandonedTaskIsOutcomeUnknownWhenItsCancellationFails(t *testing.T) {
	j := &jobs{doneAfter: 100, failCancels: true}
	h := newHarness(t, agent.Definition{Name: "t", Model: reportModel(), Tools: []agent.Tool{j.tool(agent.EffectIdempotentWrite)}})
	h.gap = 5 * time.Minute
	h.then(func() { h.expect(sessionrpc.UpdateCancelTurn, session.CancelRequest{TurnID: "turn-1"}, true) })
	h.then(func() {
		snap := h.snapshot()
		if snap.State.ActiveTurnID != "" {
			t.Fatalf("state = %+v", snap.State)
		}
		if got := snap.Messages[2].Text; got != session.OutcomeUnknownText+" ("+session.TaskAbandonedText+")" {
			t.Errorf("the abandoned call's result = %q", got)
		}
	})
	h.run("report")
	if len(j.cancelled) != 3 {
		t.Errorf("cancellation attempts = %d, want 3", len(j.cancelled))
	}
}

func TestCancelTurnWhileATaskAsksAbandonsTheTask(t *testing.T) {
	j := &jobs{question: true, doneAfter: 1}
	h := newHarness(t, agent.Definition{Name: "t", Model: reportModel(), Tools: []agent.Tool{j.tool(agent.EffectNonIdempotentWrite)}})
	h.then(func() {
		if snap := h.snapshot(); len(snap.PendingInterrupts) != 1 {
			t.Fatalf("interrupts = %+v, want the task's question", snap.PendingInterrupts)
		}
		h.expect(sessionrpc.UpdateCancelTurn, session.CancelRequest{TurnID: "turn-1"}, true)
	})
	h.then(func() {
		snap := h.snapshot()
		if snap.State.ActiveTurnID != "" || len(snap.PendingInterrupts) != 0 {
			t.Fatalf("state = %+v, interrupts %+v", snap.State, snap.PendingInterrupts)
		}
		if got := snap.Messages[2].Text; got != session.OutcomeUnknownText+" ("+session.TaskAbandonedText+")" {
			t.Errorf("the abandoned call's result = %q", got)
		}
	})
	h.run("report")
	if !slices.Equal(j.cancelled, []string{"job-1"}) {
		t.Errorf("cancelled tasks = %v, want job-1 once", j.cancelled)
	}
}

func TestAReadToolThatAsksRunsInCallToolAgain(t *testing.T) {
	var log callLog
	lookup := agent.MustTool("lookup_order", "Look up an order.", agent.EffectRead,
		func(_ context.Context, call agent.ToolContext, _ struct{}) (string, error) {
			log.add(call)
			if len(call.Answers) == 0 {
				return "", agent.AskUser("Which order?")
			}
			return "order " + call.Answers[0].Answer, nil
		})
	model := script(
		agent.ScriptedReply{ToolCalls: []agent.ScriptedToolCall{toolCall("c1", "lookup_order", map[string]any{})}},
		agent.ScriptedReply{Text: "done"},
	)
	h := newHarness(t, agent.Definition{Name: "t", Model: model, Tools: []agent.Tool{lookup}})
	h.then(func() {
		h.expect(sessionrpc.UpdateAnswerQuestion, session.AnswerRequest{InterruptID: "c1-input-1", Answer: "7"}, true)
	})
	h.then(func() {
		if got := h.snapshot().Messages[2].Text; got != "order 7" {
			t.Errorf("result = %q", got)
		}
	})
	h.run("look it up")
	if log.count() != 2 {
		t.Errorf("the tool ran %d times, want twice", log.count())
	}
}
