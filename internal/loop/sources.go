package loop

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"

	"github.com/stepwise-run/stepwise/internal/contract"
	"github.com/stepwise-run/stepwise/internal/session"
	"github.com/stepwise-run/stepwise/pkg/agent"
)

// sourceTool is a listed tool with the source that listed it.
type sourceTool struct {
	agent.SourceTool
	source string
}

// storedReference is how a call of a listed tool names its source and the
// source's own reference, so the tool Step reaches that source on any
// worker whatever the order of the sources. The key names are part of
// stored state and never change.
type storedReference struct {
	Source    string `json:"stepwise_tool_source"`
	Reference string `json:"reference"`
}

func encodeReference(source, reference string) string {
	raw, _ := json.Marshal(storedReference{Source: source, Reference: reference})
	return string(raw)
}

func definitions(listed []sourceTool) []agent.ToolDefinition {
	out := make([]agent.ToolDefinition, 0, len(listed))
	for _, t := range listed {
		out = append(out, t.ToolDefinition)
	}
	return out
}

// listSources lists every source for one model call, each for at most the
// listing timeout and all at once. A source that fails or is late offers
// nothing in this call, with a warning, so a down server never fails a
// turn. A planning turn, and a call after the model call limit, list
// nothing. A listed name that repeats a function tool, an enabled built-in
// or another source's tool fails the attempt before any model request.
func (r *Runner) listSources(ctx context.Context, turn session.TurnContext) ([]sourceTool, error) {
	if len(r.def.ToolSources) == 0 || turn.Mode == session.ModePlanning || turn.ModelCalls >= r.def.MaxModelCallsPerTurn {
		return nil, nil
	}
	policies := agent.SourcePolicies{ToolPolicies: r.def.ToolPolicies, DefaultToolEffect: r.def.DefaultToolEffect}
	listCtx, cancel := context.WithTimeout(ctx, r.def.ToolSourceListingTimeout)
	defer cancel()
	type listing struct {
		i     int
		tools []agent.SourceTool
		err   error
	}
	// Buffered, so a source that ignores its context and answers late
	// never blocks: its answer is dropped.
	answers := make(chan listing, len(r.def.ToolSources))
	for i, src := range r.def.ToolSources {
		go func() {
			tools, err := src.ListTools(listCtx, policies)
			answers <- listing{i, tools, err}
		}()
	}
	lists := make([][]agent.SourceTool, len(r.def.ToolSources))
	answered := make([]bool, len(r.def.ToolSources))
	take := func(l listing) {
		answered[l.i] = true
		if l.err != nil {
			slog.Warn("a tool source could not be listed; it offers no tools in this model call",
				"source", r.def.ToolSources[l.i].SourceName(), "error", l.err)
			return
		}
		lists[l.i] = l.tools
	}
collect:
	for range r.def.ToolSources {
		select {
		case l := <-answers:
			take(l)
		case <-listCtx.Done():
			// Answers that arrived with the deadline still count.
			for {
				select {
				case l := <-answers:
					take(l)
				default:
					break collect
				}
			}
		}
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	for i, ok := range answered {
		if !ok {
			slog.Warn("a tool source took too long to list; it offers no tools in this model call",
				"source", r.def.ToolSources[i].SourceName())
		}
	}
	enabled := map[string]bool{}
	for _, b := range r.offeredBuiltIns() {
		enabled[string(b)] = true
	}
	var out []sourceTool
	owner := map[string]string{}
	for i, tools := range lists {
		name := r.def.ToolSources[i].SourceName()
		for _, t := range tools {
			if err := checkListedName(t.Name, r.def, enabled, owner); err != nil {
				return nil, err
			}
			owner[t.Name] = name
			out = append(out, sourceTool{SourceTool: t, source: name})
		}
	}
	return out, nil
}

// checkListedName refuses a listed name that repeats a function tool, an
// enabled built-in, or another source's tool, with an error that names
// both.
func checkListedName(name string, def agent.Definition, builtIns map[string]bool, owner map[string]string) error {
	if builtIns[name] {
		return fmt.Errorf("tool %s uses the name of an enabled built-in tool", name)
	}
	if _, ok := def.Tool(name); ok {
		return fmt.Errorf("tool %s of a tool source uses the name of a function tool", name)
	}
	if _, ok := owner[name]; ok {
		return fmt.Errorf("two tool sources list a tool named %s", name)
	}
	return nil
}

// source resolves a stored call's source. A source this worker does not
// have is an error, a Step failure, so the call's effect class decides its
// outcome.
func (r *Runner) source(call session.ToolExecution) (agent.ToolSource, agent.SourceCall, error) {
	var ref storedReference
	if err := json.Unmarshal([]byte(call.Call.SourceReference), &ref); err != nil {
		return nil, agent.SourceCall{}, fmt.Errorf("tool call %s has a source reference that is not JSON: %w", call.Call.ID, err)
	}
	sc := agent.SourceCall{Name: call.Call.Name, Reference: ref.Reference, Arguments: call.Call.Arguments}
	for _, src := range r.def.ToolSources {
		if src.SourceName() == ref.Source {
			return src, sc, nil
		}
	}
	return nil, sc, fmt.Errorf("tool call %s names tool source %q, which this worker does not have", call.Call.ID, ref.Source)
}

// callSource runs a listed tool's call through its source.
func (r *Runner) callSource(ctx context.Context, call session.ToolExecution) (session.ToolOutcome, error) {
	src, sc, err := r.source(call)
	if err != nil {
		return session.ToolOutcome{}, err
	}
	output, err := src.CallTool(ctx, r.toolContext(call), sc)
	_, polled := src.(agent.SourceTaskPoller)
	return r.callOutcome(call, output, err, polled)
}

// pollSource polls a listed tool's task through its source.
func (r *Runner) pollSource(ctx context.Context, call session.ToolExecution) (session.ToolOutcome, error) {
	src, sc, err := r.source(call)
	if err != nil {
		return session.ToolOutcome{}, err
	}
	poller, ok := src.(agent.SourceTaskPoller)
	if !ok {
		return session.ToolOutcome{}, errors.New(contract.MissingTaskPollerText(call.Call.Name))
	}
	return r.pollOutcome(poller.PollSourceTask(ctx, r.taskPoll(call), sc))
}

// cancelSource asks a listed tool's source to cancel its abandoned task.
func (r *Runner) cancelSource(ctx context.Context, call session.ToolExecution) error {
	src, sc, err := r.source(call)
	if err != nil {
		return err
	}
	if poller, ok := src.(agent.SourceTaskPoller); ok {
		return poller.CancelSourceTask(ctx, r.taskPoll(call), sc)
	}
	return nil
}
