package worker

import (
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/stepwise-run/stepwise/internal/contract"
	"github.com/stepwise-run/stepwise/internal/engine"
	"github.com/stepwise-run/stepwise/pkg/agent"
	"github.com/stepwise-run/stepwise/pkg/workerconfig"
)

func TestDefinitionCarriesTheConfiguredAgent(t *testing.T) {
	cfg := demoConfig()
	maxOutput := int32(512)
	noApproval := false
	cfg.Definition.Instructions = "You help customers."
	cfg.Definition.Model.MaxOutputTokens = &maxOutput
	cfg.Definition.Model.ReasoningEffort = "low"
	cfg.Definition.DefaultToolEffect = "read"
	cfg.Definition.ToolPolicies = []workerconfig.ToolPolicy{
		{Name: "refund", Effect: "non_idempotent_write", RequiresApproval: &noApproval},
		{Name: "tickets__list", Effect: "idempotent_write"},
	}
	cfg.Definition.BuiltInTools = []string{"ask_user", "durable_wait"}
	cfg.Definition.Limits = workerconfig.Limits{
		MaxModelCallsPerTurn: 7,
		InterruptDeadline:    metav1.Duration{Duration: time.Hour},
		MaxDurableWait:       metav1.Duration{Duration: 2 * time.Hour},
	}
	tool := noteTool(t, "refund", agent.EffectNonIdempotentWrite)

	def, err := Definition(cfg, Options{Tools: []agent.Tool{tool}})
	if err != nil {
		t.Fatalf("Definition() = %v", err)
	}
	if def.Name != "support" || def.Instructions != "You help customers." {
		t.Errorf("name and instructions = %q, %q", def.Name, def.Instructions)
	}
	if def.Model == nil {
		t.Fatal("the definition has no model")
	}
	if got := reply(t, def.Model, "hi"); got != "Demo reply: hi" {
		t.Errorf("the model answered %q, want the demo script's reply", got)
	}
	if def.ModelSettings != (agent.ModelSettings{MaxOutputTokens: 512, ReasoningEffort: "low"}) {
		t.Errorf("ModelSettings = %+v", def.ModelSettings)
	}
	if def.DefaultToolEffect != agent.EffectRead {
		t.Errorf("DefaultToolEffect = %q, want read", def.DefaultToolEffect)
	}
	refund := def.ToolPolicies["refund"]
	if refund.Effect != agent.EffectNonIdempotentWrite || refund.RequiresApproval == nil || *refund.RequiresApproval {
		t.Errorf("policy of refund = %+v, want a non-idempotent write without approval", refund)
	}
	list := def.ToolPolicies["tickets__list"]
	if list.Effect != agent.EffectIdempotentWrite || list.RequiresApproval != nil {
		t.Errorf("policy of tickets__list = %+v, want an idempotent write with the default approval", list)
	}
	if len(def.ToolPolicies) != 2 {
		t.Errorf("ToolPolicies = %v, want the two configured", def.ToolPolicies)
	}
	wantBuiltIns := []agent.BuiltInTool{agent.BuiltInAskUser, agent.BuiltInDurableWait}
	if len(def.BuiltInTools) != 2 || def.BuiltInTools[0] != wantBuiltIns[0] || def.BuiltInTools[1] != wantBuiltIns[1] {
		t.Errorf("BuiltInTools = %v, want %v", def.BuiltInTools, wantBuiltIns)
	}
	if len(def.Tools) != 1 || def.Tools[0].Name != "refund" {
		t.Errorf("Tools = %v, want the image's refund tool", def.Tools)
	}
	if def.MaxModelCallsPerTurn != 7 || def.InterruptDeadline != time.Hour || def.MaxDurableWait != 2*time.Hour {
		t.Errorf("limits = %d calls, deadline %s, wait %s; want 7, 1h, 2h",
			def.MaxModelCallsPerTurn, def.InterruptDeadline, def.MaxDurableWait)
	}
}

func TestDefinitionFillsDefaultsForOmittedFields(t *testing.T) {
	cfg := demoConfig()
	cfg.Definition.DefaultToolEffect = ""
	def, err := Definition(cfg, Options{})
	if err != nil {
		t.Fatalf("Definition() = %v", err)
	}
	if def.DefaultToolEffect != agent.EffectUnclassified {
		t.Errorf("DefaultToolEffect = %q, want unclassified", def.DefaultToolEffect)
	}
	if def.MaxModelCallsPerTurn != contract.DefaultMaxModelCallsPerTurn || def.MaxDurableWait != contract.DefaultMaxDurableWait {
		t.Errorf("limits = %d calls, wait %s; want the defaults", def.MaxModelCallsPerTurn, def.MaxDurableWait)
	}
	if def.InterruptDeadline != 0 || def.ToolPolicies != nil || def.BuiltInTools != nil {
		t.Errorf("omitted fields were filled: deadline %s, policies %v, built-ins %v",
			def.InterruptDeadline, def.ToolPolicies, def.BuiltInTools)
	}
	if def.ModelSettings != (agent.ModelSettings{}) {
		t.Errorf("ModelSettings = %+v, want none", def.ModelSettings)
	}
}

func TestDefinitionRefuses(t *testing.T) {
	tests := []struct {
		name   string
		mutate func(*workerconfig.Config)
		tools  []agent.Tool
		want   []string
	}{
		{
			name: "a tool policy with an unknown effect",
			mutate: func(c *workerconfig.Config) {
				c.Definition.ToolPolicies = []workerconfig.ToolPolicy{{Name: "refund", Effect: "write"}}
			},
			want: []string{"definition.toolPolicies[refund]", `"write"`},
		},
		{
			name:   "an unknown default tool effect",
			mutate: func(c *workerconfig.Config) { c.Definition.DefaultToolEffect = "harmless" },
			want:   []string{"definition.defaultToolEffect", `"harmless"`},
		},
		{
			name:   "a function tool named like an enabled built-in tool",
			mutate: func(c *workerconfig.Config) { c.Definition.BuiltInTools = []string{"ask_user"} },
			tools:  []agent.Tool{noteTool(t, "ask_user", agent.EffectRead)},
			want:   []string{"tool ask_user uses the name of an enabled built-in tool"},
		},
		{
			name: "a model provider this worker does not carry",
			mutate: func(c *workerconfig.Config) {
				c.Definition.Model = workerconfig.Model{Provider: "mistral", Name: "large"}
			},
			want: []string{"definition.model.provider", `"mistral"`},
		},
		{
			name: "a model choice this worker cannot build",
			mutate: func(c *workerconfig.Config) {
				c.Definition.ModelChoices = []workerconfig.ModelChoice{{Choice: "large", Model: workerconfig.Model{Provider: "scripted", Name: "nope"}}}
			},
			want: []string{"definition.modelChoices[large].model.name", `"nope"`},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := demoConfig()
			tt.mutate(&cfg)
			_, err := Definition(cfg, Options{Tools: tt.tools})
			if err == nil {
				t.Fatal("Definition() = nil, want an error")
			}
			for _, want := range tt.want {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("Definition() = %q, want it to mention %s", err, want)
				}
			}
		})
	}
}

func TestDefinitionAllowsAFunctionToolNamedLikeADisabledBuiltInTool(t *testing.T) {
	cfg := demoConfig()
	cfg.Definition.BuiltInTools = []string{"durable_wait"}
	def, err := Definition(cfg, Options{Tools: []agent.Tool{noteTool(t, "ask_user", agent.EffectRead)}})
	if err != nil {
		t.Fatalf("Definition() = %v, want the tool accepted while ask_user is not enabled", err)
	}
	if _, ok := def.Tool("ask_user"); !ok {
		t.Error("the function tool ask_user is missing from the definition")
	}
}

func TestDefinitionLetsSessionSettingsChooseAModel(t *testing.T) {
	cfg := demoConfig()
	tokens := int32(50)
	cfg.Definition.ModelChoices = []workerconfig.ModelChoice{
		{Choice: "billing", Model: workerconfig.Model{Provider: agent.ScriptedProvider, Name: "billing-demo", MaxOutputTokens: &tokens, ReasoningEffort: "low"}},
	}
	scripts := map[string]agent.Script{"billing-demo": func(agent.ModelRequest) (agent.ScriptedReply, error) {
		return agent.ScriptedReply{Text: "billing"}, nil
	}}
	def, err := Definition(cfg, Options{Scripts: scripts})
	if err != nil {
		t.Fatal(err)
	}
	if def.ResolveModel == nil {
		t.Fatal("a definition with model choices has no resolver")
	}
	chosen, err := def.ChooseModel(agent.SessionSettings{"model": "billing"})
	if err != nil {
		t.Fatal(err)
	}
	if got := reply(t, chosen.Client, "hi"); got != "billing" || chosen.Settings != (agent.ModelSettings{MaxOutputTokens: 50, ReasoningEffort: "low"}) {
		t.Errorf("the billing choice answered %q with settings %+v", got, chosen.Settings)
	}
	fallback, err := def.ChooseModel(nil)
	if err != nil {
		t.Fatal(err)
	}
	if got := reply(t, fallback.Client, "hi"); got != "Demo reply: hi" {
		t.Errorf("without settings the model answered %q, want the Agent's model", got)
	}
	if _, err := def.ChooseModel(agent.SessionSettings{"model": "gpt-9"}); err == nil || !strings.Contains(err.Error(), "it offers: billing") {
		t.Errorf("ChooseModel(unknown) = %v", err)
	}

	plain, err := Definition(demoConfig(), Options{})
	if err != nil || plain.ResolveModel != nil {
		t.Errorf("a definition without model choices: resolver set = %v, err = %v", plain.ResolveModel != nil, err)
	}
}

func TestTimingsFollowTheHeartbeatAndTheRunModelLimit(t *testing.T) {
	cfg := workerconfig.Config{}
	if got := timings(cfg, agent.Definition{}); got != engine.DefaultTimings() {
		t.Errorf("Timings without settings = %+v, want the defaults", got)
	}
	cfg.Engine.StepHeartbeatTimeout.Duration = 5 * time.Second
	def := agent.Definition{RunModelLimit: &agent.StepLimit{AttemptTimeout: time.Minute, MaxAttempts: 5, Within: time.Hour}}
	got := timings(cfg, def)
	if got.Heartbeat != 5*time.Second || got.ModelAttempt != time.Minute || got.ModelAttempts != 5 || got.ModelWithin != time.Hour {
		t.Errorf("Timings = %+v", got)
	}
	custom, err := Definition(workerconfig.Config{Definition: workerconfig.Definition{Model: workerconfig.Model{Provider: "scripted", Name: "demo"}}},
		Options{Customize: func(d *agent.Definition) { d.Instructions = "computed" }})
	if err != nil || custom.Instructions != "computed" {
		t.Errorf("Customize = %q, %v", custom.Instructions, err)
	}
}

func TestDefinitionTakesPlanModeFromTheConfiguration(t *testing.T) {
	cfg := demoConfig()
	cfg.Definition.BuiltInTools = []string{"write_todos"}
	cfg.Definition.PlanMode = &workerconfig.PlanMode{PlanningToolChoice: "required"}
	def, err := Definition(cfg, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if !def.PlanModeEnabled || def.PlanningToolChoice != agent.ToolChoiceRequired {
		t.Errorf("plan mode = %v, %q", def.PlanModeEnabled, def.PlanningToolChoice)
	}
	cfg.Definition.BuiltInTools = nil
	if _, err := Definition(cfg, Options{}); err == nil || !strings.Contains(err.Error(), "planModeEnabled needs the write_todos built-in tool") {
		t.Errorf("plan mode without write_todos = %v", err)
	}
}
