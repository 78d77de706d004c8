package agent

import (
	"context"
	"fmt"
)

// ToolSource gives a session tools listed at run time, such as an MCP
// server's. The built-in loop lists every source in each model call of a
// chat or executing turn and offers its tools after the function tools and
// before the built-in tools. A call of a listed tool stores the source's
// name and the tool's reference, so the tool Step reaches the source that
// built the call, on any worker, without a listing.
type ToolSource interface {
	// SourceName names the source in stored tool calls; it must be unique
	// per agent and stable across deploys.
	SourceName() string
	// ListTools returns the tools to offer in one model call, with their
	// policies resolved against the session's. It must return within ctx; a
	// source that fails or is late offers no tools in that call.
	ListTools(ctx context.Context, policies SourcePolicies) ([]SourceTool, error)
	// CallTool runs one call of a listed tool once. Its errors follow
	// Tool's: ToolExecutionError records failed, ToolOutcomeUnknownError
	// outcome_unknown, StartTask a tool task, and any other error is a
	// Step failure that the call's effect class decides.
	CallTool(ctx context.Context, call ToolContext, tool SourceCall) (ToolOutput, error)
}

// SourceTaskPoller is a tool source whose calls start tasks the session
// polls: the polls and cancellations of those calls reach it with the
// call's reference.
type SourceTaskPoller interface {
	PollSourceTask(ctx context.Context, poll TaskPoll, tool SourceCall) (ToolOutput, error)
	CancelSourceTask(ctx context.Context, poll TaskPoll, tool SourceCall) error
}

// SourcePolicies is what a source needs of the session to resolve a listed
// tool's effect class and approval.
type SourcePolicies struct {
	// ToolPolicies are the session's policies by tool name.
	ToolPolicies map[string]Policy
	// DefaultToolEffect is the effect of a tool that says nothing of its
	// own.
	DefaultToolEffect Effect
}

// Policy returns the session's policy for a tool, if it has one.
func (p SourcePolicies) Policy(name string) *Policy {
	if policy, ok := p.ToolPolicies[name]; ok {
		return &policy
	}
	return nil
}

// SourceTool is one tool a source offers to a model call.
type SourceTool struct {
	ToolDefinition
	// Policy is the call's effect class and approval, after the session's
	// policies.
	Policy Policy
	// Reference is the source's own text that reaches the tool in a tool
	// Step without a listing.
	Reference string
	// Ordered writes of one model response run one at a time in the
	// model's order, and a write after one that did not succeed is skipped.
	Ordered bool
	// StepLimit, when set, is the tool Step's own timeout and attempts.
	StepLimit *StepLimit
}

// SourceCall is a call of a listed tool, as the tool Step hands it to the
// source.
type SourceCall struct {
	// Name is the name the model called.
	Name string
	// Reference is the SourceTool's Reference as it was offered.
	Reference string
	// Arguments are the model's arguments, JSON.
	Arguments string
}

// DeclaredToolSource is a source with names it always lists, such as the
// MCP resource and prompt tools, which an agent checks when it is built.
type DeclaredToolSource interface {
	DeclaredToolNames() []string
}

// validateSources refuses sources without a unique name, and declared
// names that repeat a built-in, a function tool or another source's.
func (d Definition) validateSources(builtIns, functionTools map[string]bool) []error {
	var problems []error
	sources := map[string]bool{}
	declared := map[string]bool{}
	for i, src := range d.ToolSources {
		if src == nil {
			problems = append(problems, fmt.Errorf("toolSources[%d] is nil", i))
			continue
		}
		name := src.SourceName()
		switch {
		case name == "":
			problems = append(problems, fmt.Errorf("toolSources[%d] has no source name", i))
		case sources[name]:
			problems = append(problems, fmt.Errorf("two tool sources are named %s; name each source of an agent differently", name))
		}
		sources[name] = true
		ds, ok := src.(DeclaredToolSource)
		if !ok {
			continue
		}
		for _, tool := range ds.DeclaredToolNames() {
			switch {
			case builtIns[tool]:
				problems = append(problems, fmt.Errorf("tool %s uses the name of an enabled built-in tool", tool))
			case functionTools[tool]:
				problems = append(problems, fmt.Errorf("tool %s of a tool source uses the name of a function tool", tool))
			case declared[tool]:
				problems = append(problems, fmt.Errorf("two tool sources list a tool named %s", tool))
			}
			declared[tool] = true
		}
	}
	if d.ToolSourceListingTimeout < 0 {
		problems = append(problems, fmt.Errorf("toolSourceListingTimeout must not be negative, not %s", d.ToolSourceListingTimeout))
	}
	return problems
}
