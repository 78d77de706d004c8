package worker

import (
	"context"
	"fmt"

	"github.com/stepwise-run/stepwise/internal/engine"
	"github.com/stepwise-run/stepwise/internal/media"
	"github.com/stepwise-run/stepwise/pkg/agent"
	"github.com/stepwise-run/stepwise/pkg/workerconfig"
)

// Definition builds the agent definition from the configuration and the
// image's own tools.
func Definition(cfg workerconfig.Config, opts Options) (agent.Definition, error) {
	store, err := mediaStore(context.Background(), cfg.MediaStore)
	if err != nil {
		return agent.Definition{}, err
	}
	return definition(cfg, opts, store)
}

func definition(cfg workerconfig.Config, opts Options, store media.Store) (agent.Definition, error) {
	d := cfg.Definition
	def := agent.Definition{
		Name: d.Name, Instructions: d.Instructions, Tools: opts.Tools,
		MaxModelCallsPerTurn: int(d.Limits.MaxModelCallsPerTurn),
		InterruptDeadline:    d.Limits.InterruptDeadline.Duration,
		MaxDurableWait:       d.Limits.MaxDurableWait.Duration,
	}
	choice, err := modelChoice("definition.model", d.Model, opts)
	if err != nil {
		return agent.Definition{}, err
	}
	def.Model, def.ModelSettings = choice.Client, choice.Settings
	if len(d.ModelChoices) > 0 {
		choices := agent.ModelChoices{Default: choice, Named: map[string]agent.ModelChoice{}}
		for _, mc := range d.ModelChoices {
			if choices.Named[mc.Choice], err = modelChoice(fmt.Sprintf("definition.modelChoices[%s].model", mc.Choice), mc.Model, opts); err != nil {
				return agent.Definition{}, err
			}
		}
		def.ResolveModel = choices.Resolve
	}
	if d.DefaultToolEffect != "" {
		if def.DefaultToolEffect, err = agent.ParseEffect(d.DefaultToolEffect); err != nil {
			return agent.Definition{}, fmt.Errorf("definition.defaultToolEffect: %w", err)
		}
	}
	for _, p := range d.ToolPolicies {
		effect, err := agent.ParseEffect(p.Effect)
		if err != nil {
			return agent.Definition{}, fmt.Errorf("definition.toolPolicies[%s]: %w", p.Name, err)
		}
		if def.ToolPolicies == nil {
			def.ToolPolicies = map[string]agent.Policy{}
		}
		def.ToolPolicies[p.Name] = agent.Policy{Effect: effect, RequiresApproval: p.RequiresApproval}
	}
	for _, b := range d.BuiltInTools {
		def.BuiltInTools = append(def.BuiltInTools, agent.BuiltInTool(b))
	}
	if c := d.Compaction; c != nil {
		def.Compaction = &agent.CompactionPolicy{
			ContextWindowTokens: c.ContextWindowTokens, TriggerRatio: c.TriggerRatio, KeepRatio: c.KeepRatio,
			RetainedMessages: int(c.RetainedMessageLimit),
		}
	}
	for i, ts := range cfg.ToolSources {
		src, err := toolSource(ts, store)
		if err != nil {
			return agent.Definition{}, fmt.Errorf("toolSources[%d] (%s): %w", i, ts.SourceName, err)
		}
		def.ToolSources = append(def.ToolSources, src)
	}
	if pm := d.PlanMode; pm != nil {
		def.PlanModeEnabled = true
		def.PlanningToolChoice = agent.ToolChoice(pm.PlanningToolChoice)
	}
	if opts.Customize != nil {
		opts.Customize(&def)
	}
	def = def.WithDefaults()
	return def, def.Validate()
}

// timings are the engine's Step limits for a configuration and definition:
// the defaults, the configured heartbeat timeout, and the definition's
// RunModel limit.
func timings(cfg workerconfig.Config, def agent.Definition) engine.Timings {
	t := engine.DefaultTimings()
	if hb := cfg.Engine.StepHeartbeatTimeout.Duration; hb > 0 {
		t.Heartbeat = hb
	}
	if l := def.RunModelLimit; l != nil {
		if l.AttemptTimeout > 0 {
			t.ModelAttempt = l.AttemptTimeout
		}
		if l.MaxAttempts > 0 {
			t.ModelAttempts = int32(min(l.MaxAttempts, 100)) //nolint:gosec // bounded above
		}
		if l.Within > 0 {
			t.ModelWithin = l.Within
		}
	}
	return t
}
