package loop

import (
	"github.com/stepwise-run/stepwise/internal/session"
	"github.com/stepwise-run/stepwise/pkg/agent"
)

// Request builds the model request of a turn from committed state and the
// tools its sources listed for this call. After the turn's model call
// limit, no tools are offered.
func (r *Runner) Request(turn session.TurnContext, listed []agent.ToolDefinition) agent.ModelRequest {
	req := agent.ModelRequest{
		Instructions: r.def.Instructions,
		Input:        withSummaryNote(withPlanNote(modelMessages(session.PairToolResults(turn.Messages)), turn), turn.Summary),
		Settings:     r.def.ModelSettings,
	}
	if turn.ModelCalls >= r.def.MaxModelCallsPerTurn {
		return req
	}
	if turn.Mode == session.ModePlanning {
		// A planning turn offers only write_todos.
		req.Tools = []agent.ToolDefinition{session.BuiltInToolDefinitions[agent.BuiltInWriteTodos]}
		req.ToolChoice = agent.ToolChoiceAuto
		draft := turn.Plan != nil && turn.Plan.Status == session.PlanDraft
		if r.def.PlanningToolChoice == agent.ToolChoiceRequired && turn.ModelCalls == 0 && !draft {
			req.ToolChoice = agent.ToolChoiceRequired
		}
		return req
	}
	for _, t := range r.def.Tools {
		req.Tools = append(req.Tools, t.Definition())
	}
	req.Tools = append(req.Tools, listed...)
	for _, b := range r.offeredBuiltIns() {
		req.Tools = append(req.Tools, session.BuiltInToolDefinitions[b])
	}
	if len(req.Tools) > 0 {
		req.ToolChoice = agent.ToolChoiceAuto
	}
	return req
}

// withPlanNote shows the model the plan, as user text before the turn's
// items, in every model call of a turn that plans or has a plan.
func withPlanNote(input []agent.Message, turn session.TurnContext) []agent.Message {
	note := session.PlanNote(turn.Plan, turn.Mode)
	if note == "" {
		return input
	}
	at := len(input)
	for i, m := range input {
		if m.TurnID == turn.TurnID {
			at = i
			break
		}
	}
	out := make([]agent.Message, 0, len(input)+1)
	out = append(out, input[:at]...)
	out = append(out, agent.Message{TurnID: turn.TurnID, Role: agent.RoleUser, Text: note})
	return append(out, input[at:]...)
}

// withSummaryNote starts the input with the summary of the messages before
// it, once the session compacted.
func withSummaryNote(input []agent.Message, summary *session.ContextSummary) []agent.Message {
	if summary == nil {
		return input
	}
	note := agent.Message{Role: agent.RoleUser, Text: session.SummaryNote(summary)}
	return append([]agent.Message{note}, input...)
}
