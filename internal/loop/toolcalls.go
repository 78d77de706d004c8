package loop

import (
	"context"
	"errors"

	"github.com/stepwise-run/stepwise/internal/contract"
	"github.com/stepwise-run/stepwise/internal/session"
	"github.com/stepwise-run/stepwise/pkg/agent"
)

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
		return session.ToolOutcome{Kind: session.ToolResultTaskPending, PollInterval: pending.PollInterval, InputContinuation: pending.Continuation}, nil
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
			Kind:              session.ToolResultInputRequested,
			Question:          &session.Question{Text: input.Question, Choices: input.Choices, AllowsFreeText: input.AllowsFreeText},
			InputContinuation: input.Continuation,
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
