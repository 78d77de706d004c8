package engine

import (
	"context"
	"slices"
	"testing"

	"github.com/stepwise-run/stepwise/internal/contract"
	"github.com/stepwise-run/stepwise/internal/session"
	"github.com/stepwise-run/stepwise/pkg/agent"
)

func transcript(snap session.Snapshot) []string {
	var out []string
	for _, m := range snap.Messages {
		out = append(out, m.TurnID+" "+string(m.Role)+": "+m.Text)
	}
	return out
}

func TestAContinuedTurnStoresItsMessageAndCallsTheModelAgain(t *testing.T) {
	model := script(agent.ScriptedReply{Text: "Probably yes."}, agent.ScriptedReply{Text: "DECISION: yes"})
	h := newHarness(t, agent.Definition{Name: "t", Model: model,
		DecideTurnContinuation: func(c agent.TurnContinuationContext) (agent.TurnContinuation, error) {
			if c.ModelOutput.Text == "Probably yes." {
				return agent.ContinueTurn("Finish with DECISION:."), nil
			}
			return agent.DefaultTurnContinuation, nil
		}})
	h.then(func() {
		snap := h.snapshot()
		want := []string{
			"turn-1 user: Decide", "turn-1 assistant: Probably yes.",
			"turn-1 user: Finish with DECISION:.", "turn-1 assistant: DECISION: yes",
		}
		if got := transcript(snap); !slices.Equal(got, want) {
			t.Errorf("messages = %q, want %q", got, want)
		}
		if snap.State.TurnCount != 1 || snap.State.ActiveTurnID != "" || snap.Usage.ModelCalls != 2 {
			t.Errorf("state = %+v, usage = %+v; want one finished turn of two model calls", snap.State, snap.Usage)
		}
	})
	h.run("Decide")
	if n := len(h.events.ofType(session.EventTurnCompleted)); n != 1 {
		t.Errorf("turn_completed events = %d, want 1", n)
	}
}

func TestEndAfterToolCallsFinishesTheTurnOnTheirResults(t *testing.T) {
	submit := agent.MustTool("submit_decision", "Submit.", agent.EffectIdempotentWrite,
		func(context.Context, agent.ToolContext, struct{}) (string, error) { return "submitted", nil })
	model := script(
		agent.ScriptedReply{ToolCalls: []agent.ScriptedToolCall{toolCall("c1", "submit_decision", map[string]any{})}},
		agent.ScriptedReply{Text: "never asked"},
	)
	h := newHarness(t, agent.Definition{Name: "t", Model: model, Tools: []agent.Tool{submit},
		DecideTurnContinuation: func(c agent.TurnContinuationContext) (agent.TurnContinuation, error) {
			for _, r := range c.ToolResults {
				if r.ToolName == "submit_decision" {
					return agent.EndTurn, nil
				}
			}
			return agent.DefaultTurnContinuation, nil
		}})
	h.then(func() {
		snap := h.snapshot()
		want := []string{"turn-1 user: Review", "turn-1 assistant: ", "turn-1 tool: submitted"}
		if got := transcript(snap); !slices.Equal(got, want) {
			t.Errorf("messages = %q, want %q", got, want)
		}
		if snap.State.ActiveTurnID != "" || snap.State.LastTurnError != "" || snap.Usage.ModelCalls != 1 {
			t.Errorf("state = %+v, usage = %+v; want a completed turn of one model call", snap.State, snap.Usage)
		}
	})
	h.run("Review")
	if n := len(h.events.ofType(session.EventTurnCompleted)); n != 1 {
		t.Errorf("turn_completed events = %d, want 1", n)
	}
}

func TestTheContinuationLimitFailsTheTurnWithItsAnswerStored(t *testing.T) {
	model := script(agent.ScriptedReply{Text: "hmm"})
	h := newHarness(t, agent.Definition{Name: "t", Model: model,
		DecideTurnContinuation: func(agent.TurnContinuationContext) (agent.TurnContinuation, error) {
			return agent.ContinueTurn("Again."), nil
		}})
	h.then(func() {
		snap := h.snapshot()
		if snap.State.LastTurnError != contract.TurnContinuationLimitError || snap.State.ActiveTurnID != "" {
			t.Errorf("state = %+v, want the turn failed at the limit", snap.State)
		}
		calls := contract.MaxConsecutiveTurnContinuations + 1
		if int(snap.Usage.ModelCalls) != calls || len(snap.Messages) != 1+2*calls-1 || snap.Messages[len(snap.Messages)-1].Text != "hmm" {
			t.Errorf("%d model calls, %d messages ending %+v; want %d calls and the last answer stored",
				snap.Usage.ModelCalls, len(snap.Messages), snap.Messages[len(snap.Messages)-1], calls)
		}
	})
	h.run("Think")
	if n := len(h.events.ofType(session.EventTurnFailed)); n != 1 {
		t.Errorf("turn_failed events = %d, want 1", n)
	}
}
