// Package loop is the built-in agent loop: a runner that makes each model
// call through an agent.ModelClient and runs function tools, so agents
// defined without a framework run on the session Flow.
package loop

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/stepwise-run/stepwise/internal/session"
	"github.com/stepwise-run/stepwise/pkg/agent"
)

// Runner runs an agent definition.
type Runner struct {
	def agent.Definition
}

var _ session.Runner = (*Runner)(nil)

// New returns a runner for a definition, refusing one the session cannot
// run.
func New(def agent.Definition) (*Runner, error) {
	def = def.WithDefaults()
	if err := def.Validate(); err != nil {
		return nil, fmt.Errorf("agent %s: %w", def.Name, err)
	}
	return &Runner{def: def}, nil
}

// runState continues a turn after its tool calls.
type runState struct {
	ModelCalls int `json:"modelCalls"`
}

// offeredBuiltIns are the enabled built-in tools this worker runs.
func (r *Runner) offeredBuiltIns() []agent.BuiltInTool {
	var out []agent.BuiltInTool
	for _, b := range r.def.BuiltInTools {
		if _, ok := session.BuiltInToolDefinitions[b]; ok {
			out = append(out, b)
		}
	}
	return out
}

// options are the session options recorded with each RunModel outcome.
func (r *Runner) options() session.TurnOptions {
	return session.TurnOptions{
		BuiltInTools:      append([]agent.BuiltInTool(nil), r.def.BuiltInTools...),
		InterruptDeadline: r.def.InterruptDeadline,
		MaxDurableWait:    r.def.MaxDurableWait,
	}
}

// Request builds the model request of a turn from committed state. After
// the turn's model call limit, no tools are offered.
func (r *Runner) Request(turn session.TurnContext) agent.ModelRequest {
	req := agent.ModelRequest{
		Instructions: r.def.Instructions,
		Input:        session.PairToolResults(turn.Messages),
		Settings:     r.def.ModelSettings,
	}
	if turn.ModelCalls >= r.def.MaxModelCallsPerTurn {
		return req
	}
	for _, t := range r.def.Tools {
		req.Tools = append(req.Tools, t.Definition())
	}
	for _, b := range r.offeredBuiltIns() {
		req.Tools = append(req.Tools, session.BuiltInToolDefinitions[b])
	}
	if len(req.Tools) > 0 {
		req.ToolChoice = agent.ToolChoiceAuto
	}
	return req
}

// RunModelStep makes one model call.
func (r *Runner) RunModelStep(ctx context.Context, turn session.TurnContext) (session.ModelOutcome, error) {
	settings, err := agent.DecodeSessionSettings(turn.Settings)
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
	req := r.Request(turn)
	req.Settings = model.Settings
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
	resp, err := model.Client.CallModel(ctx, req, deltaWriter{turn.Events})
	if err != nil {
		return session.ModelOutcome{}, err
	}
	answer := agent.Message{Role: agent.RoleAssistant, Text: resp.Text(), ToolCalls: resp.ToolCalls(), Output: resp.Output}
	out := session.ModelOutcome{Usage: resp.Usage, Options: r.options(), Metadata: resp.Metadata}
	if out.Usage.ModelCalls == 0 {
		out.Usage.ModelCalls = 1
	}
	calls := resp.ToolCalls()
	switch {
	case len(calls) == 0:
		out.Kind = session.OutcomeTurnCompleted
		out.NewMessages = []agent.Message{answer}
	case turn.ModelCalls >= r.def.MaxModelCallsPerTurn:
		// The call offered no tools; calls the model makes anyway are not
		// run, and the turn ends.
		out.Kind = session.OutcomeTurnCompleted
		out.NewMessages = []agent.Message{answer}
		for _, c := range calls {
			out.NewMessages = append(out.NewMessages, agent.Message{
				Role: agent.RoleTool, ToolCallID: c.ID, ToolName: c.Name,
				Text: session.ModelCallLimitResult(r.def.MaxModelCallsPerTurn),
			})
		}
	default:
		state, _ := json.Marshal(runState{ModelCalls: turn.ModelCalls + 1})
		out.Kind = session.OutcomeToolCallsRequested
		out.NewMessages = []agent.Message{answer}
		out.RunState = string(state)
		for _, c := range calls {
			out.ToolCalls = append(out.ToolCalls, session.DeferredToolCall{
				ID: c.ID, Name: c.Name, Arguments: c.Arguments, Policy: r.policy(c.Name), StepLimit: r.stepLimit(c.Name),
			})
		}
	}
	return out, nil
}

// policy resolves a called tool's policy. A name no tool answers to runs
// without approval and fails as an unknown tool: it never reaches anything.
func (r *Runner) policy(name string) agent.Policy {
	if _, ok := r.def.Tool(name); !ok {
		noApproval := false
		return agent.Policy{Effect: agent.EffectUnclassified, RequiresApproval: &noApproval}
	}
	return r.def.ResolvePolicy(name, "")
}

// stepLimit is a function tool's own Step limit, if it has one.
func (r *Runner) stepLimit(name string) *agent.StepLimit {
	if t, ok := r.def.Tool(name); ok {
		return t.StepLimit
	}
	return nil
}

// ExecuteToolCall runs one function tool call once.
func (r *Runner) ExecuteToolCall(ctx context.Context, call session.ToolExecution) (session.ToolOutcome, error) {
	tool, ok := r.def.Tool(call.Call.Name)
	if !ok {
		return session.ToolOutcome{Kind: session.ToolResultFailed, Error: "unknown tool " + call.Call.Name}, nil
	}
	heartbeat := call.Heartbeat
	if heartbeat == nil {
		heartbeat = func() {}
	}
	tc := agent.ToolContext{
		SessionID: call.SessionID, TurnID: call.TurnID, ToolCallID: call.Call.ID,
		IdempotencyKey: call.IdempotencyKey, Attempt: call.Attempt, Effect: call.Call.Effect,
		Heartbeat: heartbeat, Events: toolEvents{w: call.Events, turnID: call.TurnID},
		Answers: call.Call.InputAnswers, Continuation: call.Call.InputContinuation,
	}
	output, err := tool.Call(ctx, tc, call.Call.Arguments)
	if err == nil {
		return session.ToolOutcome{Kind: session.ToolResultSucceeded, Output: output}, nil
	}
	var input *agent.InputRequest
	if errors.As(err, &input) {
		return session.ToolOutcome{
			Kind:         session.ToolResultInputRequested,
			Question:     &session.Question{Text: input.Question, Choices: input.Choices, AllowsFreeText: input.AllowsFreeText},
			Continuation: input.Continuation,
		}, nil
	}
	if e, ok := agent.IsExecutionError(err); ok {
		return session.ToolOutcome{Kind: session.ToolResultFailed, Error: e.Message}, nil
	}
	if e, ok := agent.IsOutcomeUnknown(err); ok {
		return session.ToolOutcome{Kind: session.ToolResultOutcomeUnknown, Error: e.Message}, nil
	}
	return session.ToolOutcome{}, err
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

// toolEvents lets a function tool write its own events.
type toolEvents struct {
	w      session.EventWriter
	turnID string
}

func (t toolEvents) WriteEvent(eventType string, payload any) {
	if t.w != nil {
		t.w.Write(session.NewEvent(session.EventType(eventType), t.turnID, payload))
	}
}
