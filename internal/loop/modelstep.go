package loop

import (
	"context"
	"fmt"

	"github.com/stepwise-run/stepwise/internal/contract"
	"github.com/stepwise-run/stepwise/internal/session"
	"github.com/stepwise-run/stepwise/pkg/agent"
)

// RunModelStep makes one model call.
func (r *Runner) RunModelStep(ctx context.Context, turn session.TurnContext) (session.ModelOutcome, error) {
	settings, err := contract.DecodeSessionSettings(turn.Settings)
	if err != nil {
		return session.ModelOutcome{}, err
	}
	model, err := r.def.ChooseModel(settings)
	if err != nil {
		// The turn's settings cannot change, so a retry would fail the same
		// way.
		return session.ModelOutcome{
			Kind: session.OutcomeTurnCompleted, Options: r.options(),
			TurnError: "choosing the model: " + err.Error(),
		}, nil
	}
	state, err := parseRunState(turn.RunState)
	if err != nil {
		return session.ModelOutcome{}, err
	}
	listed, err := r.listSources(ctx, turn)
	if err != nil {
		return session.ModelOutcome{}, err
	}
	req := r.Request(turn, definitions(listed))
	req.Settings = model.Settings
	if cut := r.compactionCutoff(turn, model, req); cut > 0 {
		return session.ModelOutcome{Kind: session.OutcomeCompactionNeeded, CompactThrough: cut, Options: r.options()}, nil
	}
	// The messages of this iteration that precede the model's answer: a
	// continuation message after tool results.
	var lead []agent.Message
	if state.AfterTools {
		decision, err := r.decide(turn, settings, lastAnswer(turn.Messages), iterationResults(turn))
		if err != nil {
			return session.ModelOutcome{}, err
		}
		if decision.Ends() {
			// The turn ends with the tool results as its last messages,
			// with no model call.
			return session.ModelOutcome{Kind: session.OutcomeTurnCompleted, Options: r.options()}, nil
		}
		if text, ok := decision.Continues(); ok {
			lead = append(lead, agent.Message{Role: agent.RoleUser, Text: text})
		}
		state.TurnContinuations = 0
	}
	req.Input = append(req.Input, lead...)
	if f, ok := model.Client.(agent.ForcedToolChoice); ok && req.ToolChoice == agent.ToolChoiceRequired && !f.SupportsForcedToolChoice(req.Settings) {
		return session.ModelOutcome{
			Kind: session.OutcomeTurnCompleted, Options: r.options(),
			TurnError: "the model cannot be forced to call write_todos with these settings; set planningToolChoice to auto",
		}, nil
	}
	if r.def.InstructionsFunc != nil {
		instructions, err := r.def.InstructionsFunc(agent.InstructionContext{
			SessionID: turn.SessionID, TurnID: turn.TurnID, ModelCalls: turn.ModelCalls, Attempt: turn.Attempt,
			Settings: settings,
		})
		if err != nil {
			return session.ModelOutcome{}, fmt.Errorf("computing the instructions: %w", err)
		}
		req.Instructions = instructions
	}
	req.TurnID, req.ModelCall = turn.TurnID, turn.ModelCalls+1
	if req, err = r.withImageBytes(ctx, req); err != nil {
		return session.ModelOutcome{}, err
	}
	resp, err := model.Client.CallModel(ctx, req, deltaWriter{turn.Events})
	if err != nil {
		return session.ModelOutcome{}, err
	}
	answer := agent.Message{Role: agent.RoleAssistant, Text: resp.Text(), ToolCalls: resp.ToolCalls(), Output: resp.Output}
	out := session.ModelOutcome{Usage: storedUsage(resp.Usage), Options: r.options(), Metadata: storedMetadata(resp.Metadata)}
	if out.Usage.ModelCalls == 0 {
		out.Usage.ModelCalls = 1
	}
	out.NewMessages = storedMessages(append(append([]agent.Message(nil), lead...), answer))
	calls := resp.ToolCalls()
	switch {
	case len(calls) == 0:
		decision, err := r.decide(turn, settings, answer, nil)
		if err != nil {
			return session.ModelOutcome{}, err
		}
		text, continues := decision.Continues()
		switch {
		case !continues:
			out.Kind = session.OutcomeTurnCompleted
		case state.TurnContinuations >= contract.MaxConsecutiveTurnContinuations:
			out.Kind = session.OutcomeTurnCompleted
			out.TurnError = contract.TurnContinuationLimitError
		default:
			out.Kind = session.OutcomeTurnContinued
			out.NewMessages = append(out.NewMessages, session.Message{Role: session.RoleUser, Text: text})
			out.RunState = runState{ModelCalls: turn.ModelCalls + 1, TurnContinuations: state.TurnContinuations + 1}.encode()
		}
	case turn.ModelCalls >= r.def.MaxModelCallsPerTurn:
		// The call offered no tools; calls the model makes anyway are not
		// run, and the turn ends.
		out.Kind = session.OutcomeTurnCompleted
		for _, c := range calls {
			out.NewMessages = append(out.NewMessages, session.Message{
				Role: session.RoleTool, ToolCallID: c.ID, ToolName: c.Name,
				Text: session.ModelCallLimitResult(r.def.MaxModelCallsPerTurn),
			})
		}
	default:
		out.Kind = session.OutcomeToolCallsRequested
		out.RunState = runState{ModelCalls: turn.ModelCalls + 1, AfterTools: true}.encode()
		for _, c := range calls {
			out.ToolCalls = append(out.ToolCalls, r.deferCall(c, listed))
		}
	}
	return out, nil
}

// deltaWriter streams a model call's deltas to session events.
type deltaWriter struct{ w session.EventWriter }

func (d deltaWriter) TextDelta(text string) {
	if d.w != nil && text != "" {
		d.w.Write(session.NewEvent(session.EventTextDelta, "", map[string]string{"text": text}))
	}
}

func (d deltaWriter) ReasoningDelta(text string) {
	if d.w != nil && text != "" {
		d.w.Write(session.NewEvent(session.EventReasoningDelta, "", map[string]string{"text": text}))
	}
}
