package loop

import (
	"errors"
	"fmt"
	"strings"

	"github.com/stepwise-run/stepwise/internal/session"
	"github.com/stepwise-run/stepwise/pkg/agent"
)

// decide asks the definition's continuation decision about one iteration;
// without one, the loop's default holds. A continuation with a blank
// message is an error, so the attempt fails as the decision's own errors do.
func (r *Runner) decide(turn session.TurnContext, settings agent.SessionSettings, output agent.Message, results []agent.ToolResult) (agent.TurnContinuation, error) {
	if r.def.DecideTurnContinuation == nil {
		return agent.DefaultTurnContinuation, nil
	}
	decision, err := r.def.DecideTurnContinuation(agent.TurnContinuationContext{
		SessionID: turn.SessionID, TurnID: turn.TurnID, Settings: settings, ModelOutput: output, ToolResults: results,
	})
	if err != nil {
		return agent.TurnContinuation{}, fmt.Errorf("deciding whether the turn continues: %w", err)
	}
	if text, ok := decision.Continues(); ok && strings.TrimSpace(text) == "" {
		return agent.TurnContinuation{}, errors.New("deciding whether the turn continues: a continuation needs a message that is not blank")
	}
	return decision, nil
}

// lastAnswer is the turn's last model answer: the one whose tool calls just
// finished.
func lastAnswer(messages []session.Message) agent.Message {
	for i := len(messages) - 1; i >= 0; i-- {
		if messages[i].Role == session.RoleAssistant {
			return modelMessage(messages[i])
		}
	}
	return agent.Message{}
}

// iterationResults are the final records of the last answer's tool calls,
// in model order.
func iterationResults(turn session.TurnContext) []agent.ToolResult {
	var out []agent.ToolResult
	for _, c := range lastAnswer(turn.Messages).ToolCalls {
		for _, rec := range turn.ToolCalls {
			if rec.ID == c.ID {
				out = append(out, agent.ToolResult{
					ToolCallID: rec.ID, ToolName: rec.Name, Status: string(rec.Status), Output: session.DescribeOutcome(rec),
				})
			}
		}
	}
	return out
}
