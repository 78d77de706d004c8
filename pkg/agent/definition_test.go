package agent_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stepwise-run/stepwise/pkg/agent"
)

func namedTool(t *testing.T, name string, effect agent.Effect, opts ...agent.ToolOption) agent.Tool {
	t.Helper()
	tool, err := agent.NewTool(name, "", effect,
		func(context.Context, agent.ToolContext, struct{}) (string, error) { return name, nil }, opts...)
	if err != nil {
		t.Fatalf("NewTool(%s): %v", name, err)
	}
	return tool
}

func scripted() agent.ModelClient {
	return agent.NewScriptedModel(agent.DemoScript)
}

func TestDefinitionValidate(t *testing.T) {
	cases := []struct {
		name    string
		def     agent.Definition
		wantErr []string // each must appear; none means valid
	}{
		{name: "minimal definition is valid",
			def: agent.Definition{Model: scripted()}},
		{name: "full definition is valid",
			def: agent.Definition{
				Name: "support", Model: scripted(),
				Tools:             []agent.Tool{namedTool(t, "lookup", agent.EffectRead), namedTool(t, "refund", agent.EffectNonIdempotentWrite)},
				ToolPolicies:      map[string]agent.Policy{"refund": {Effect: agent.EffectIdempotentWrite}, "remote": {Effect: agent.EffectRead}},
				DefaultToolEffect: agent.EffectRead,
				BuiltInTools:      []agent.BuiltInTool{agent.BuiltInAskUser, agent.BuiltInDurableWait},
			}},
		{name: "a built-in name is ordinary while that built-in is disabled",
			def: agent.Definition{Model: scripted(), Tools: []agent.Tool{namedTool(t, "ask_user", agent.EffectRead)},
				BuiltInTools: []agent.BuiltInTool{agent.BuiltInDurableWait}}},
		{name: "missing model",
			def:     agent.Definition{},
			wantErr: []string{"model is required"}},
		{name: "function tool named like an enabled built-in",
			def: agent.Definition{Model: scripted(), Tools: []agent.Tool{namedTool(t, "ask_user", agent.EffectRead)},
				BuiltInTools: []agent.BuiltInTool{agent.BuiltInAskUser}},
			wantErr: []string{"tool ask_user uses the name of an enabled built-in tool"}},
		{name: "function tool named like enabled write_todos",
			def: agent.Definition{Model: scripted(), Tools: []agent.Tool{namedTool(t, "write_todos", agent.EffectRead)},
				BuiltInTools: []agent.BuiltInTool{agent.BuiltInWriteTodos}},
			wantErr: []string{"tool write_todos uses the name of an enabled built-in tool"}},
		{name: "duplicate tool names",
			def:     agent.Definition{Model: scripted(), Tools: []agent.Tool{namedTool(t, "lookup", agent.EffectRead), namedTool(t, "lookup", agent.EffectIdempotentWrite)}},
			wantErr: []string{"two function tools are named lookup"}},
		{name: "tool not built with NewTool",
			def:     agent.Definition{Model: scripted(), Tools: []agent.Tool{{Name: "handmade"}}},
			wantErr: []string{`tool "handmade" was not built with NewTool`}},
		{name: "bad policy effect",
			def:     agent.Definition{Model: scripted(), ToolPolicies: map[string]agent.Policy{"refund": {Effect: "write"}}},
			wantErr: []string{`toolPolicies[refund]: unknown effect "write"`}},
		{name: "empty policy effect",
			def:     agent.Definition{Model: scripted(), ToolPolicies: map[string]agent.Policy{"refund": {}}},
			wantErr: []string{`toolPolicies[refund]: unknown effect ""`}},
		{name: "bad default effect",
			def:     agent.Definition{Model: scripted(), DefaultToolEffect: "sometimes"},
			wantErr: []string{`defaultToolEffect: unknown effect "sometimes"`}},
		{name: "negative model call limit",
			def:     agent.Definition{Model: scripted(), MaxModelCallsPerTurn: -1},
			wantErr: []string{"maxModelCallsPerTurn must be at least 1, not -1"}},
		{name: "plan mode with write_todos",
			def: agent.Definition{Model: scripted(), PlanModeEnabled: true, PlanningToolChoice: agent.ToolChoiceRequired,
				BuiltInTools: []agent.BuiltInTool{agent.BuiltInWriteTodos}}},
		{name: "plan mode without write_todos",
			def:     agent.Definition{Model: scripted(), PlanModeEnabled: true},
			wantErr: []string{"planModeEnabled needs the write_todos built-in tool"}},
		{name: "an unknown planning tool choice",
			def:     agent.Definition{Model: scripted(), PlanningToolChoice: "sometimes"},
			wantErr: []string{`planningToolChoice must be auto or required, not "sometimes"`}},
		{name: "a required planning tool choice the model refuses",
			def: agent.Definition{Model: unforceable{scripted()}, PlanningToolChoice: agent.ToolChoiceRequired,
				ModelSettings: agent.ModelSettings{ReasoningEffort: "high"}},
			wantErr: []string{"planningToolChoice required: the model cannot be forced to call a tool"}},
		{name: "every problem is reported",
			def: agent.Definition{ToolPolicies: map[string]agent.Policy{"x": {Effect: "bad"}},
				Tools: []agent.Tool{namedTool(t, "a", agent.EffectRead), namedTool(t, "a", agent.EffectRead)}},
			wantErr: []string{"model is required", "two function tools are named a", `toolPolicies[x]: unknown effect "bad"`}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			err := c.def.Validate()
			if len(c.wantErr) == 0 {
				if err != nil {
					t.Errorf("Validate() = %v, want nil", err)
				}
				return
			}
			if err == nil {
				t.Fatalf("Validate() = nil, want %q", c.wantErr)
			}
			for _, want := range c.wantErr {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("Validate() = %q, want it to contain %q", err, want)
				}
			}
		})
	}
}

func TestDefinitionWithDefaults(t *testing.T) {
	filled := agent.Definition{}.WithDefaults()
	if filled.DefaultToolEffect != agent.EffectUnclassified {
		t.Errorf("DefaultToolEffect = %q, want unclassified", filled.DefaultToolEffect)
	}
	if filled.MaxModelCallsPerTurn != 100 {
		t.Errorf("MaxModelCallsPerTurn = %d, want 100", filled.MaxModelCallsPerTurn)
	}
	if filled.MaxDurableWait != 365*24*time.Hour {
		t.Errorf("MaxDurableWait = %v, want 365 days", filled.MaxDurableWait)
	}
	if filled.InterruptDeadline != 0 {
		t.Errorf("InterruptDeadline = %v, want no deadline by default", filled.InterruptDeadline)
	}

	set := agent.Definition{DefaultToolEffect: agent.EffectRead, MaxModelCallsPerTurn: 3, MaxDurableWait: time.Minute, InterruptDeadline: time.Hour}
	kept := set.WithDefaults()
	if kept.DefaultToolEffect != agent.EffectRead || kept.MaxModelCallsPerTurn != 3 || kept.MaxDurableWait != time.Minute || kept.InterruptDeadline != time.Hour {
		t.Errorf("WithDefaults changed set fields: %+v", kept)
	}
}

func TestDefinitionResolvePolicy(t *testing.T) {
	yes, no := true, false
	def := agent.Definition{
		Model: scripted(),
		Tools: []agent.Tool{
			namedTool(t, "lookup", agent.EffectRead),
			namedTool(t, "refund", agent.EffectNonIdempotentWrite, agent.WithApproval(false)),
			namedTool(t, "overridden", agent.EffectRead),
		},
		ToolPolicies: map[string]agent.Policy{
			"overridden": {Effect: agent.EffectNonIdempotentWrite, RequiresApproval: &yes},
			"remote":     {Effect: agent.EffectIdempotentWrite},
		},
		DefaultToolEffect: agent.EffectIdempotentWrite,
	}
	cases := []struct {
		name            string
		def             agent.Definition
		tool            string
		frameworkEffect agent.Effect
		wantEffect      agent.Effect
		wantApproval    bool
	}{
		{"explicit policy wins over the tool's own", def, "overridden", "", agent.EffectNonIdempotentWrite, true},
		{"explicit policy wins over framework metadata", def, "overridden", agent.EffectRead, agent.EffectNonIdempotentWrite, true},
		{"explicit policy of a tool that is not a function tool", def, "remote", agent.EffectRead, agent.EffectIdempotentWrite, false},
		{"framework effect wins over the function tool's policy", def, "refund", agent.EffectRead, agent.EffectRead, false},
		{"framework effect with its default approval", def, "unknown", agent.EffectNonIdempotentWrite, agent.EffectNonIdempotentWrite, true},
		{"function tool's own policy", def, "lookup", "", agent.EffectRead, false},
		{"function tool's own approval override", def, "refund", "", agent.EffectNonIdempotentWrite, false},
		{"default effect", def, "unknown", "", agent.EffectIdempotentWrite, false},
		{"unset default effect is unclassified", agent.Definition{}, "unknown", "", agent.EffectUnclassified, true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p := c.def.ResolvePolicy(c.tool, c.frameworkEffect)
			if p.Effect != c.wantEffect || p.ApprovalRequired() != c.wantApproval {
				t.Errorf("ResolvePolicy(%q, %q) = %s approval=%v, want %s approval=%v",
					c.tool, c.frameworkEffect, p.Effect, p.ApprovalRequired(), c.wantEffect, c.wantApproval)
			}
		})
	}
	if p := def.ResolvePolicy("refund", ""); p.RequiresApproval == nil || *p.RequiresApproval != no {
		t.Errorf("the function tool's approval override was lost: %+v", p)
	}
}

func TestDefinitionTool(t *testing.T) {
	def := agent.Definition{Tools: []agent.Tool{namedTool(t, "a", agent.EffectRead), namedTool(t, "b", agent.EffectRead)}}
	if got, ok := def.Tool("b"); !ok || got.Name != "b" {
		t.Errorf("Tool(b) = %q, %v", got.Name, ok)
	}
	if _, ok := def.Tool("c"); ok {
		t.Error("Tool(c) found a tool that does not exist")
	}
}

// unforceable refuses a forced tool choice whenever reasoning is on, as
// extended thinking does.
type unforceable struct{ agent.ModelClient }

func (unforceable) SupportsForcedToolChoice(s agent.ModelSettings) bool {
	return s.ReasoningEffort == ""
}
