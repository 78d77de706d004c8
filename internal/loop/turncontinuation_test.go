package loop

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/stepwise-run/stepwise/internal/contract"
	"github.com/stepwise-run/stepwise/internal/session"
	"github.com/stepwise-run/stepwise/pkg/agent"
)

// continuationTurn is a turn after one model call whose lookup call c1
// succeeded.
func continuationTurn() session.TurnContext {
	turn := userTurn("check order 7")
	turn.ModelCalls = 1
	turn.RunState = `{"modelCalls":1,"afterTools":true}`
	turn.Messages = append(turn.Messages,
		session.Message{Sequence: 2, TurnID: "turn-1", Role: session.RoleAssistant, ToolCalls: []session.ToolCall{{ID: "c1", Name: "lookup", Arguments: `{"order_id":"7"}`}}},
		session.Message{Sequence: 3, TurnID: "turn-1", Role: session.RoleTool, ToolCallID: "c1", ToolName: "lookup", Text: "order 7"},
	)
	turn.ToolCalls = []session.ToolCallRecord{{ID: "c1", Name: "lookup", Status: session.ToolCallSucceeded, Output: "order 7", ResultStored: true}}
	return turn
}

func TestTurnContinuationAfterToolCalls(t *testing.T) {
	cases := []struct {
		name         string
		decision     agent.TurnContinuation
		wantKind     session.OutcomeKind
		wantCalls    int
		wantMessages []string
	}{
		{"end completes the turn without a model call", agent.EndTurn, session.OutcomeTurnCompleted, 0, nil},
		{"default calls the model with the results", agent.DefaultTurnContinuation, session.OutcomeTurnCompleted, 1, []string{"assistant:answer"}},
		{"continue adds the message after the results", agent.ContinueTurn("Now summarize."), session.OutcomeTurnCompleted, 1,
			[]string{"user:Now summarize.", "assistant:answer"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var requests []agent.ModelRequest
			var seen []agent.TurnContinuationContext
			r := newRunner(t, agent.Definition{
				Model: agent.NewScriptedModel(func(req agent.ModelRequest) (agent.ScriptedReply, error) {
					requests = append(requests, req)
					return agent.ScriptedReply{Text: "answer"}, nil
				}),
				Tools: []agent.Tool{lookupTool(t, nil)},
				DecideTurnContinuation: func(ctx agent.TurnContinuationContext) (agent.TurnContinuation, error) {
					seen = append(seen, ctx)
					if len(ctx.ToolResults) > 0 {
						return c.decision, nil
					}
					return agent.DefaultTurnContinuation, nil
				},
			})
			out, err := r.RunModelStep(context.Background(), continuationTurn())
			if err != nil {
				t.Fatal(err)
			}
			if out.Kind != c.wantKind || len(requests) != c.wantCalls || int(out.Usage.ModelCalls) != c.wantCalls {
				t.Errorf("kind %q after %d calls (usage %d), want %q after %d", out.Kind, len(requests), out.Usage.ModelCalls, c.wantKind, c.wantCalls)
			}
			var got []string
			for _, m := range out.NewMessages {
				got = append(got, string(m.Role)+":"+m.Text)
			}
			if !slices.Equal(got, c.wantMessages) {
				t.Errorf("new messages = %v, want %v", got, c.wantMessages)
			}
			first := seen[0]
			if first.TurnID != "turn-1" || len(first.ToolResults) != 1 || first.ToolResults[0] != (agent.ToolResult{ToolCallID: "c1", ToolName: "lookup", Status: "succeeded", Output: "order 7"}) ||
				len(first.ModelOutput.ToolCalls) != 1 {
				t.Errorf("the decision saw %+v", first)
			}
			if msg, ok := c.decision.Continues(); ok {
				last := requests[0].Input[len(requests[0].Input)-1]
				if last.Role != agent.RoleUser || last.Text != msg {
					t.Errorf("the request ends with %+v, want the continuation message", last)
				}
			}
		})
	}
}

func TestTurnContinuationAfterAnswers(t *testing.T) {
	var decisions []agent.TurnContinuationContext
	r := newRunner(t, agent.Definition{
		Model: agent.NewScriptedModel(replying(agent.ScriptedReply{Text: "thinking"})),
		DecideTurnContinuation: func(ctx agent.TurnContinuationContext) (agent.TurnContinuation, error) {
			decisions = append(decisions, ctx)
			return agent.ContinueTurn("Finish with DECISION:."), nil
		},
	})
	turn := userTurn("decide")
	for i := range contract.MaxConsecutiveTurnContinuations {
		out, err := r.RunModelStep(context.Background(), turn)
		if err != nil {
			t.Fatal(err)
		}
		if out.Kind != session.OutcomeTurnContinued {
			t.Fatalf("continuation %d: kind %q", i+1, out.Kind)
		}
		if len(out.NewMessages) != 2 || out.NewMessages[0].Text != "thinking" || out.NewMessages[1].Role != session.RoleUser ||
			out.NewMessages[1].Text != "Finish with DECISION:." {
			t.Fatalf("continuation %d: new messages %+v", i+1, out.NewMessages)
		}
		for _, m := range out.NewMessages {
			m.Sequence, m.TurnID = int64(len(turn.Messages)+1), turn.TurnID
			turn.Messages = append(turn.Messages, m)
		}
		turn.RunState, turn.ModelCalls = out.RunState, turn.ModelCalls+1
	}
	out, err := r.RunModelStep(context.Background(), turn)
	if err != nil {
		t.Fatal(err)
	}
	if out.Kind != session.OutcomeTurnCompleted || out.TurnError != contract.TurnContinuationLimitError ||
		len(out.NewMessages) != 1 || out.NewMessages[0].Text != "thinking" {
		t.Errorf("the ninth continuation = %+v, want the turn ended with its answer and the limit error", out)
	}
	if last := decisions[len(decisions)-1]; last.ModelOutput.Text != "thinking" || len(last.ToolResults) != 0 {
		t.Errorf("the decision after an answer saw %+v", last)
	}

	// A tool call resets the count: after tools, continuations start again.
	turn = continuationTurn()
	turn.RunState = `{"modelCalls":1,"afterTools":true}`
	out, err = r.RunModelStep(context.Background(), turn)
	if err != nil || out.Kind != session.OutcomeTurnContinued || out.RunState != `{"modelCalls":2,"continuations":1}` {
		t.Errorf("after tools = %+v, %v; want a first continuation", out, err)
	}
}

func TestTurnContinuationErrorsFailTheAttempt(t *testing.T) {
	cases := []struct {
		name     string
		decide   func(agent.TurnContinuationContext) (agent.TurnContinuation, error)
		wantErrs string
	}{
		{"an error", func(agent.TurnContinuationContext) (agent.TurnContinuation, error) {
			return agent.TurnContinuation{}, errors.New("rules unavailable")
		}, "deciding whether the turn continues: rules unavailable"},
		{"a blank message", func(agent.TurnContinuationContext) (agent.TurnContinuation, error) {
			return agent.ContinueTurn("  "), nil
		}, "a continuation needs a message that is not blank"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := newRunner(t, agent.Definition{
				Model:                  agent.NewScriptedModel(replying(agent.ScriptedReply{Text: "x"})),
				DecideTurnContinuation: c.decide,
			})
			if _, err := r.RunModelStep(context.Background(), userTurn("hi")); err == nil || !strings.Contains(err.Error(), c.wantErrs) {
				t.Errorf("RunModelStep = %v, want %q", err, c.wantErrs)
			}
		})
	}
}
