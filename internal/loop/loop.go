// Package loop is the built-in agent loop: a runner that makes each model
// call through an agent.ModelClient and runs function tools, so agents
// defined without a framework run on the session Flow.
package loop

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/stepwise-run/stepwise/internal/contract"
	"github.com/stepwise-run/stepwise/internal/media"
	"github.com/stepwise-run/stepwise/internal/session"
	"github.com/stepwise-run/stepwise/pkg/agent"
)

// Runner runs an agent definition.
type Runner struct {
	def agent.Definition
	// store keeps the sessions' images; nil when the agent has none.
	store media.Store
}

var (
	_ session.Runner     = (*Runner)(nil)
	_ session.TaskRunner = (*Runner)(nil)
	_ session.Compactor  = (*Runner)(nil)
)

// New returns a runner for a definition, refusing one the session cannot
// run.
func New(def agent.Definition, opts ...Option) (*Runner, error) {
	def = def.WithDefaults()
	if err := def.Validate(); err != nil {
		return nil, fmt.Errorf("agent %s: %w", def.Name, err)
	}
	r := &Runner{def: def}
	for _, opt := range opts {
		opt(r)
	}
	return r, nil
}

// runState continues a turn after its tool calls, or after a continued
// answer.
type runState struct {
	ModelCalls int `json:"modelCalls"`
	// AfterTools is true when the turn continues after tool calls, so the
	// continuation decision of that iteration is still to be made.
	AfterTools bool `json:"afterTools,omitempty"`
	// Continuations counts the continuations in a row that followed
	// answers without tools.
	Continuations int `json:"continuations,omitempty"`
}

func (s runState) encode() string {
	raw, _ := json.Marshal(s)
	return string(raw)
}

// parseRunState reads a turn's run state. A state written before
// continuations existed continues after tool calls, the only way it could
// be set.
func parseRunState(raw string) (runState, error) {
	if raw == "" {
		return runState{}, nil
	}
	var s runState
	if err := json.Unmarshal([]byte(raw), &s); err != nil {
		return runState{}, fmt.Errorf("reading the turn's run state: %w", err)
	}
	if !strings.Contains(raw, `"afterTools"`) && !strings.Contains(raw, `"continuations"`) {
		s.AfterTools = true
	}
	return s, nil
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
	opts := session.TurnOptions{
		BuiltInTools:      append([]agent.BuiltInTool(nil), r.def.BuiltInTools...),
		InterruptDeadline: r.def.InterruptDeadline,
		MaxDurableWait:    r.def.MaxDurableWait,
	}
	if c := r.def.Compaction; c != nil {
		opts.RetainedMessages = c.RetainedMessages
	}
	return opts
}

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

// compactionCutoff is the last message to summarize before this model
// call, or zero when the input is under the policy's threshold or nothing
// new can be summarized.
func (r *Runner) compactionCutoff(turn session.TurnContext, model agent.ModelChoice, req agent.ModelRequest) int64 {
	policy := r.def.Compaction
	if policy == nil {
		return 0
	}
	window := float64(policy.ContextWindowTokens)
	if float64(model.Client.EstimateInputTokens(req)) < policy.TriggerRatio*window {
		return 0
	}
	estimate := func(m session.Message) int64 {
		return model.Client.EstimateInputTokens(agent.ModelRequest{Input: []agent.Message{modelMessage(m)}})
	}
	cut := session.CompactionCutoff(turn.Messages, int64(policy.KeepRatio*window), estimate)
	if turn.Summary != nil && cut <= turn.Summary.LastSequence {
		return 0
	}
	return cut
}

// SummarizeContext makes one summary call for the messages through
// turn.CompactThrough, with the model the turn's settings choose and no
// tools. When the request would not fit the context window with room for
// the answer, the oldest messages are left out, whole responses at a time,
// and a note says how many.
func (r *Runner) SummarizeContext(ctx context.Context, turn session.TurnContext) (session.CompactionOutcome, error) {
	settings, err := contract.DecodeSessionSettings(turn.Settings)
	if err != nil {
		return session.CompactionOutcome{}, err
	}
	model, err := r.def.ChooseModel(settings)
	if err != nil {
		return session.CompactionOutcome{}, fmt.Errorf("choosing the model: %w", err)
	}
	var covered []session.Message
	for _, m := range turn.Messages {
		if m.Sequence <= turn.CompactThrough {
			covered = append(covered, m)
		}
	}
	groups := session.MessageGroups(session.PairToolResults(covered))
	build := func(omitted int, groups [][]session.Message) agent.ModelRequest {
		req := agent.ModelRequest{Instructions: session.ContextSummaryInstructions, Settings: model.Settings}
		if turn.Summary != nil {
			req.Input = append(req.Input, agent.Message{Role: agent.RoleUser, Text: session.SummaryNote(turn.Summary)})
		}
		if omitted > 0 {
			req.Input = append(req.Input, agent.Message{Role: agent.RoleUser, Text: session.SummaryOmissionNote(omitted)})
		}
		for _, g := range groups {
			// The summary call reads the text of the summarized items,
			// without their images.
			req.Input = append(req.Input, withoutImages(modelMessages(g))...)
		}
		req.Input = append(req.Input, agent.Message{Role: agent.RoleUser, Text: "Summarize the conversation above."})
		return req
	}
	budget := int64(0)
	if r.def.Compaction != nil {
		budget = r.def.Compaction.ContextWindowTokens - model.Settings.MaxOutputTokens
	}
	omitted := 0
	req := build(0, groups)
	for budget > 0 && len(groups) > 1 && model.Client.EstimateInputTokens(req) > budget {
		omitted += len(groups[0])
		groups = groups[1:]
		req = build(omitted, groups)
	}
	resp, err := model.Client.CallModel(ctx, req, agent.DiscardOutput)
	if err != nil {
		return session.CompactionOutcome{}, err
	}
	usage := resp.Usage
	if usage.ModelCalls == 0 {
		usage.ModelCalls = 1
	}
	return session.CompactionOutcome{Text: resp.Text(), Usage: storedUsage(usage)}, nil
}

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
		state.Continuations = 0
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
		case state.Continuations >= contract.MaxConsecutiveTurnContinuations:
			out.Kind = session.OutcomeTurnCompleted
			out.TurnError = contract.TurnContinuationLimitError
		default:
			out.Kind = session.OutcomeTurnContinued
			out.NewMessages = append(out.NewMessages, session.Message{Role: session.RoleUser, Text: text})
			out.RunState = runState{ModelCalls: turn.ModelCalls + 1, Continuations: state.Continuations + 1}.encode()
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

// decide asks the definition's continuation decision about one iteration;
// without one, the loop's default holds. A continuation with a blank
// message is an error, so the attempt fails as the decision's own errors do.
func (r *Runner) decide(turn session.TurnContext, settings agent.SessionSettings, output agent.Message, results []agent.ToolResult) (agent.TurnContinuation, error) {
	if r.def.DecideTurnContinuation == nil {
		return agent.DefaultContinuation, nil
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

// deferCall turns one call the model made into a deferred tool call: a
// function tool with its policy, a listed tool with the policy, reference
// and order its source gave, or a name nothing answers to, which runs
// without approval and fails as an unknown tool: it never reaches anything.
func (r *Runner) deferCall(c agent.ToolCall, listed []sourceTool) session.DeferredToolCall {
	call := session.DeferredToolCall{ID: c.ID, Name: c.Name, Arguments: c.Arguments}
	if t, ok := r.def.Tool(c.Name); ok {
		call.Policy, call.StepLimit = r.def.ResolvePolicy(c.Name, ""), t.StepLimit
		return call
	}
	for _, t := range listed {
		if t.Name == c.Name {
			call.Policy, call.StepLimit, call.Ordered = t.Policy, t.StepLimit, t.Ordered
			call.SourceReference = encodeReference(t.source, t.Reference)
			return call
		}
	}
	noApproval := false
	call.Policy = agent.Policy{Effect: agent.EffectUnclassified, RequiresApproval: &noApproval}
	return call
}

// ExecuteToolCall runs one tool call once: a function tool's, or a listed
// tool's through the source that listed it.
func (r *Runner) ExecuteToolCall(ctx context.Context, call session.ToolExecution) (session.ToolOutcome, error) {
	if call.Call.SourceReference != "" {
		return r.callSource(ctx, call)
	}
	tool, ok := r.def.Tool(call.Call.Name)
	if !ok {
		return session.ToolOutcome{Kind: session.ToolResultFailed, Error: "unknown tool " + call.Call.Name}, nil
	}
	output, err := tool.Call(ctx, r.toolContext(call), call.Call.Arguments)
	return r.callOutcome(call, output, err, tool.Poller != nil)
}

// callOutcome maps what a tool call returned onto a tool outcome: a task a
// tool started needs a poller, or the call records the missing-poller
// outcome.
func (r *Runner) callOutcome(call session.ToolExecution, output agent.ToolOutput, err error, polled bool) (session.ToolOutcome, error) {
	if task, started := agent.IsTaskStarted(err); started {
		if !polled {
			return session.MissingPollerOutcome(call.Call), nil
		}
		return session.ToolOutcome{Kind: session.ToolResultTaskStarted, TaskID: task.TaskID, PollInterval: task.PollInterval}, nil
	}
	return r.toolOutcome(output, err)
}

// PollToolTask polls a tool's task once.
func (r *Runner) PollToolTask(ctx context.Context, call session.ToolExecution) (session.ToolOutcome, error) {
	if call.Call.SourceReference != "" {
		return r.pollSource(ctx, call)
	}
	tool, ok := r.def.Tool(call.Call.Name)
	if !ok || tool.Poller == nil {
		return session.ToolOutcome{}, errors.New(contract.MissingTaskPollerText(call.Call.Name))
	}
	output, err := tool.Poller.PollTask(ctx, r.taskPoll(call))
	return r.pollOutcome(agent.ToolOutput{Output: output}, err)
}

// pollOutcome maps what a task poll returned onto a tool outcome.
func (r *Runner) pollOutcome(output agent.ToolOutput, err error) (session.ToolOutcome, error) {
	if pending, ok := agent.IsTaskPending(err); ok {
		return session.ToolOutcome{Kind: session.ToolResultTaskPending, PollInterval: pending.PollInterval, Continuation: pending.Continuation}, nil
	}
	return r.toolOutcome(output, err)
}

// CancelToolTask asks a tool to cancel its abandoned task.
func (r *Runner) CancelToolTask(ctx context.Context, call session.ToolExecution) error {
	if call.Call.SourceReference != "" {
		return r.cancelSource(ctx, call)
	}
	tool, ok := r.def.Tool(call.Call.Name)
	if !ok || tool.Poller == nil {
		return nil
	}
	return tool.Poller.CancelTask(ctx, r.taskPoll(call))
}

func (r *Runner) toolContext(call session.ToolExecution) agent.ToolContext {
	heartbeat, save := call.Heartbeat, call.SaveCheckpoint
	if heartbeat == nil {
		heartbeat = func() {}
	}
	if save == nil {
		save = func(string) {}
	}
	tc := agent.ToolContext{
		SessionID: call.SessionID, TurnID: call.TurnID, ToolCallID: call.Call.ID,
		IdempotencyKey: call.IdempotencyKey, Attempt: call.Attempt, Effect: call.Call.Effect,
		Heartbeat: heartbeat, Events: toolEvents{w: call.Events, turnID: call.TurnID},
		Answers: call.Call.InputAnswers, Continuation: call.Call.InputContinuation,
		Checkpoint: call.Checkpoint, SaveCheckpoint: save,
	}
	if r.store != nil {
		tc.MediaStore = toolMediaStore{r.store}
	}
	return tc
}

func (r *Runner) taskPoll(call session.ToolExecution) agent.TaskPoll {
	return agent.TaskPoll{ToolContext: r.toolContext(call), TaskID: call.Call.TaskID, PendingAnswer: call.Call.TaskAnswer}
}

// toolOutcome maps what a tool or a poll returned onto a tool outcome; an
// error the session does not know fails the attempt, as does an image
// reference of a result that is not a valid one of the store.
func (r *Runner) toolOutcome(output agent.ToolOutput, err error) (session.ToolOutcome, error) {
	if err == nil {
		if len(output.Images) > 0 && r.store == nil {
			return session.ToolOutcome{Kind: session.ToolResultFailed, Error: noImagesText}, nil
		}
		images, err := r.resultImages(output)
		if err != nil {
			return session.ToolOutcome{}, err
		}
		return session.ToolOutcome{Kind: session.ToolResultSucceeded, Output: output.Output, Images: images}, nil
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
