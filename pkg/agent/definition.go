package agent

import (
	"errors"
	"fmt"
	"time"

	"github.com/stepwise-run/stepwise/internal/contract"
)

// Definition is an agent: its instructions, model, tools and limits. The
// worker builds one from the Agent's rendered configuration and the function
// tools compiled into its image.
type Definition struct {
	// Name names the agent.
	Name string
	// Instructions are the system instructions of every model call.
	Instructions string
	// InstructionsFunc, when set, computes the instructions in every
	// RunModel instead, from the turn. A retried RunModel calls it again, so
	// keep it deterministic and free of side effects.
	InstructionsFunc func(InstructionContext) (string, error)
	// Model makes the model calls.
	Model ModelClient
	// ModelSettings tune every model call.
	ModelSettings ModelSettings
	// ResolveModel, when set, chooses the model of each model call from the
	// turn's session settings, among clients the worker built: Model and
	// ModelSettings serve only when it is nil. An error it returns fails the
	// turn without a retry, because the turn's settings cannot change.
	ResolveModel func(SessionSettings) (ModelChoice, error)
	// Tools are the function tools.
	Tools []Tool
	// ToolSources list tools at run time, such as MCP servers; their tools
	// are offered after the function tools.
	ToolSources []ToolSource
	// ToolSourceListingTimeout bounds each source's listing in a model
	// call; 10 seconds when zero.
	ToolSourceListingTimeout time.Duration
	// ToolPolicies override a tool's effect class and approval by name.
	ToolPolicies map[string]Policy
	// DefaultToolEffect is the effect of a tool with no policy and no
	// metadata of its own.
	DefaultToolEffect Effect
	// BuiltInTools are the built-in tools the model is offered; their names
	// are reserved.
	BuiltInTools []BuiltInTool
	// MaxModelCallsPerTurn bounds the model calls of one turn; 100 when
	// zero.
	MaxModelCallsPerTurn int
	// InterruptDeadline bounds how long an approval or question waits; zero
	// waits forever.
	InterruptDeadline time.Duration
	// MaxDurableWait bounds one durable_wait; 365 days when zero.
	MaxDurableWait time.Duration
	// RunModelLimit, when set, changes RunModel's timeout, attempts and
	// retry budget.
	RunModelLimit *StepLimit
	// Compaction, when set, keeps the model input under the context window
	// by summarizing older messages, and lets retention bound the stored
	// messages.
	Compaction *CompactionPolicy
	// PlanModeEnabled lets messages ask for a planning turn, which offers
	// only write_todos so the user reviews a plan before it runs. It needs
	// the write_todos built-in tool.
	PlanModeEnabled bool
	// PlanningToolChoice is ToolChoiceAuto (the default: a planning turn may
	// answer in text, such as with a clarifying question) or
	// ToolChoiceRequired (the first model call of a planning turn must call
	// write_todos while no draft exists), which a model that cannot be
	// forced to call a tool refuses.
	PlanningToolChoice ToolChoice
	// DecideTurnContinuation, when set, decides at the end of each loop
	// iteration whether the turn ends or continues. After tool calls it runs
	// in the next RunModel before the model call; after an answer, in the
	// same RunModel after it. An error fails the RunModel attempt, which its
	// retry policy runs again, model call included, so keep it free of side
	// effects.
	DecideTurnContinuation func(TurnContinuationContext) (TurnContinuation, error)
}

// CompactionPolicy says when a session summarizes its earlier messages.
type CompactionPolicy struct {
	// ContextWindowTokens is the model's context window.
	ContextWindowTokens int64
	// TriggerRatio of the window starts a compaction; 0.85 when zero.
	TriggerRatio float64
	// KeepRatio of the window is kept unsummarized; 0.3 when zero.
	KeepRatio float64
	// RetainedMessages is how many newest messages retention keeps stored;
	// older ones that the summary covers are deleted. Zero keeps every
	// message.
	RetainedMessages int
}

// InstructionContext is what InstructionsFunc sees of a model call.
type InstructionContext struct {
	SessionID string
	TurnID    string
	// ModelCalls counts the turn's model calls before this one.
	ModelCalls int
	// Attempt is the one-based RunModel attempt.
	Attempt int
	// Settings are the turn's session settings.
	Settings SessionSettings
}

// WithDefaults fills the fields left zero.
func (d Definition) WithDefaults() Definition {
	if d.DefaultToolEffect == "" {
		d.DefaultToolEffect = EffectUnclassified
	}
	if d.MaxModelCallsPerTurn == 0 {
		d.MaxModelCallsPerTurn = contract.DefaultMaxModelCallsPerTurn
	}
	if d.MaxDurableWait == 0 {
		d.MaxDurableWait = contract.DefaultMaxDurableWait
	}
	if d.ToolSourceListingTimeout == 0 {
		d.ToolSourceListingTimeout = contract.DefaultToolSourceListingTimeout
	}
	if c := d.Compaction; c != nil {
		policy := *c
		if policy.TriggerRatio == 0 {
			policy.TriggerRatio = contract.DefaultCompactionTriggerRatio
		}
		if policy.KeepRatio == 0 {
			policy.KeepRatio = contract.DefaultCompactionKeepRatio
		}
		d.Compaction = &policy
	}
	return d
}

// Validate refuses a definition the session cannot run, naming the field.
func (d Definition) Validate() error {
	var problems []error
	if d.Model == nil {
		problems = append(problems, errors.New("model is required"))
	}
	if d.DefaultToolEffect != "" && !d.DefaultToolEffect.Valid() {
		problems = append(problems, fmt.Errorf("defaultToolEffect: unknown effect %q", d.DefaultToolEffect))
	}
	if d.MaxModelCallsPerTurn < 0 {
		problems = append(problems, fmt.Errorf("maxModelCallsPerTurn must be at least 1, not %d", d.MaxModelCallsPerTurn))
	}
	enabled := map[string]bool{}
	for _, b := range d.BuiltInTools {
		enabled[string(b)] = true
	}
	names := map[string]bool{}
	for _, t := range d.Tools {
		switch {
		case t.run == nil:
			problems = append(problems, fmt.Errorf("tool %q was not built with NewTool", t.Name))
		case enabled[t.Name]:
			problems = append(problems, fmt.Errorf("tool %s uses the name of an enabled built-in tool", t.Name))
		case names[t.Name]:
			problems = append(problems, fmt.Errorf("two function tools are named %s", t.Name))
		}
		names[t.Name] = true
	}
	problems = append(problems, d.validateSources(enabled, names)...)
	if c := d.Compaction; c != nil {
		if c.ContextWindowTokens < 1 {
			problems = append(problems, fmt.Errorf("compaction.contextWindowTokens must be at least 1, not %d", c.ContextWindowTokens))
		}
		if c.TriggerRatio < 0 || c.TriggerRatio > 1 || c.KeepRatio < 0 || c.KeepRatio >= 1 {
			problems = append(problems, fmt.Errorf("compaction ratios must be within 0..1 (trigger %v, keep %v)", c.TriggerRatio, c.KeepRatio))
		}
		if c.TriggerRatio > 0 && c.KeepRatio >= c.TriggerRatio {
			problems = append(problems, fmt.Errorf("compaction.keepRatio %v must be below triggerRatio %v", c.KeepRatio, c.TriggerRatio))
		}
		if c.RetainedMessages < 0 {
			problems = append(problems, fmt.Errorf("compaction.retainedMessages must not be negative, not %d", c.RetainedMessages))
		}
	}
	if d.PlanModeEnabled && !enabled[string(BuiltInWriteTodos)] {
		problems = append(problems, errors.New("planModeEnabled needs the write_todos built-in tool: a planning turn writes its plan with it"))
	}
	switch d.PlanningToolChoice {
	case "", ToolChoiceAuto:
	case ToolChoiceRequired:
		if f, ok := d.Model.(ForcedToolChoice); ok && !f.SupportsForcedToolChoice(d.ModelSettings) {
			problems = append(problems, errors.New("planningToolChoice required: the model cannot be forced to call a tool with these settings (extended thinking refuses it); use auto"))
		}
	default:
		problems = append(problems, fmt.Errorf("planningToolChoice must be auto or required, not %q", d.PlanningToolChoice))
	}
	for name, p := range d.ToolPolicies {
		if !p.Effect.Valid() {
			problems = append(problems, fmt.Errorf("toolPolicies[%s]: unknown effect %q", name, p.Effect))
		}
	}
	return errors.Join(problems...)
}

// ResolvePolicy returns the policy of a tool: the explicit policy, else the
// tool's own metadata (frameworkEffect, or a function tool's policy), else
// the default effect with its default approval.
func (d Definition) ResolvePolicy(name string, frameworkEffect Effect) Policy {
	if p, ok := d.ToolPolicies[name]; ok {
		return p
	}
	if frameworkEffect != "" {
		return Policy{Effect: frameworkEffect}
	}
	effect := d.DefaultToolEffect
	if effect == "" {
		effect = EffectUnclassified
	}
	for _, t := range d.Tools {
		if t.Name == name && t.Policy.Effect != "" {
			return t.Policy
		}
		if t.Name == name {
			return Policy{Effect: effect, RequiresApproval: t.Policy.RequiresApproval}
		}
	}
	return Policy{Effect: effect}
}

// ChooseModel returns the model of a model call with these session
// settings.
func (d Definition) ChooseModel(s SessionSettings) (ModelChoice, error) {
	if d.ResolveModel == nil {
		return ModelChoice{Client: d.Model, Settings: d.ModelSettings}, nil
	}
	c, err := d.ResolveModel(s)
	if err != nil {
		return ModelChoice{}, err
	}
	if c.Client == nil {
		return ModelChoice{}, errors.New("the model resolver chose no model client")
	}
	return c, nil
}

// Tool returns the function tool of that name.
func (d Definition) Tool(name string) (Tool, bool) {
	for _, t := range d.Tools {
		if t.Name == name {
			return t, true
		}
	}
	return Tool{}, false
}
