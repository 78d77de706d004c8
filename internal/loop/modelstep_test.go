package loop

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stepwise-run/stepwise/internal/contract"
	"github.com/stepwise-run/stepwise/internal/session"
	"github.com/stepwise-run/stepwise/pkg/agent"
)

func TestRunModelStepCompletesTheTurn(t *testing.T) {
	model := agent.NewScriptedModel(replying(agent.ScriptedReply{Text: "Your order shipped.", Reasoning: "check"}))
	r := newRunner(t, agent.Definition{
		Model: model, Instructions: "Help.", BuiltInTools: []agent.BuiltInTool{agent.BuiltInAskUser},
		InterruptDeadline: time.Hour,
	})
	log := &eventLog{}
	turn := userTurn("where is my order?")
	turn.Events = log
	out, err := r.RunModelStep(context.Background(), turn)
	if err != nil {
		t.Fatal(err)
	}
	if out.Kind != session.OutcomeTurnCompleted || out.TurnError != "" || len(out.ToolCalls) != 0 || out.RunState != "" {
		t.Errorf("outcome = %+v", out)
	}
	if len(out.NewMessages) != 1 {
		t.Fatalf("new messages = %+v", out.NewMessages)
	}
	answer := out.NewMessages[0]
	if answer.Role != session.RoleAssistant || answer.Text != "Your order shipped." || len(answer.Output) != 2 || answer.Output[0].Type != session.OutputReasoning {
		t.Errorf("answer = %+v", answer)
	}
	if out.Usage.ModelCalls != 1 || out.Usage.InputTokens == 0 {
		t.Errorf("usage = %+v", out.Usage)
	}
	wantOpts := session.TurnOptions{BuiltInTools: []agent.BuiltInTool{agent.BuiltInAskUser}, InterruptDeadline: time.Hour, MaxDurableWait: contract.DefaultMaxDurableWait}
	if !slices.Equal(out.Options.BuiltInTools, wantOpts.BuiltInTools) || out.Options.InterruptDeadline != wantOpts.InterruptDeadline || out.Options.MaxDurableWait != wantOpts.MaxDurableWait {
		t.Errorf("options = %+v, want %+v", out.Options, wantOpts)
	}
	if out.Metadata.Provider != agent.ScriptedProvider {
		t.Errorf("metadata = %+v", out.Metadata)
	}
	if got := log.types(); !slices.Equal(got, []session.EventType{session.EventReasoningDelta, session.EventTextDelta}) {
		t.Fatalf("events = %v", got)
	}
	var delta map[string]string
	if err := json.Unmarshal(log.events[1].Payload, &delta); err != nil || delta["text"] != "Your order shipped." {
		t.Errorf("text_delta = %s", log.events[1].Payload)
	}
	if reqs := model.Requests(); len(reqs) != 1 || reqs[0].Instructions != "Help." {
		t.Errorf("requests = %+v", reqs)
	}
}

func TestRunModelStepRequestsToolCalls(t *testing.T) {
	yes := true
	model := agent.NewScriptedModel(replying(agent.ScriptedReply{
		Text: "Let me check.",
		ToolCalls: []agent.ScriptedToolCall{
			{ID: "c1", Name: "lookup", Arguments: `{"order_id":"7"}`},
			{ID: "c2", Name: "refund", Arguments: map[string]string{"order_id": "7"}},
			{ID: "c3", Name: "ask_user", Arguments: `{"question":"Sure?"}`},
			{ID: "c4", Name: "mystery", Arguments: `{}`},
			{ID: "c5", Name: "audited_lookup", Arguments: `{}`},
		},
	}))
	r := newRunner(t, agent.Definition{
		Model:        model,
		Tools:        []agent.Tool{lookupTool(t, nil), refundTool(t)},
		BuiltInTools: []agent.BuiltInTool{agent.BuiltInAskUser},
		ToolPolicies: map[string]agent.Policy{
			"lookup":         {Effect: agent.EffectRead, RequiresApproval: &yes},
			"audited_lookup": {Effect: agent.EffectRead},
		},
	})
	turn := userTurn("refund 7")
	turn.ModelCalls = 2
	out, err := r.RunModelStep(context.Background(), turn)
	if err != nil {
		t.Fatal(err)
	}
	if out.Kind != session.OutcomeToolCallsRequested {
		t.Fatalf("kind = %q", out.Kind)
	}
	if out.RunState != `{"modelCalls":3,"afterTools":true}` {
		t.Errorf("RunState = %q", out.RunState)
	}
	if len(out.NewMessages) != 1 || out.NewMessages[0].Role != session.RoleAssistant || len(out.NewMessages[0].ToolCalls) != 5 || out.NewMessages[0].Text != "Let me check." {
		t.Errorf("new messages = %+v", out.NewMessages)
	}
	want := []struct {
		id, name, args string
		effect         agent.Effect
		approval       bool
	}{
		{"c1", "lookup", `{"order_id":"7"}`, agent.EffectRead, true},
		{"c2", "refund", `{"order_id":"7"}`, agent.EffectNonIdempotentWrite, true},
		{"c3", "ask_user", `{"question":"Sure?"}`, agent.EffectUnclassified, false},
		{"c4", "mystery", `{}`, agent.EffectUnclassified, false},
		{"c5", "audited_lookup", `{}`, agent.EffectUnclassified, false},
	}
	if len(out.ToolCalls) != len(want) {
		t.Fatalf("tool calls = %+v", out.ToolCalls)
	}
	for i, w := range want {
		c := out.ToolCalls[i]
		if c.ID != w.id || c.Name != w.name || c.Arguments != w.args || c.Policy.Effect != w.effect || c.Policy.ApprovalRequired() != w.approval {
			t.Errorf("call %d = %+v (approval %v), want %+v", i, c, c.Policy.ApprovalRequired(), w)
		}
	}
}

func TestRunModelStepPastTheModelCallLimit(t *testing.T) {
	model := agent.NewScriptedModel(replying(agent.ScriptedReply{
		Text:      "Trying anyway.",
		ToolCalls: []agent.ScriptedToolCall{{ID: "c1", Name: "lookup", Arguments: `{"order_id":"7"}`}, {ID: "c2", Name: "refund", Arguments: `{}`}},
	}))
	r := newRunner(t, agent.Definition{Model: model, Tools: []agent.Tool{lookupTool(t, nil), refundTool(t)}, MaxModelCallsPerTurn: 2})
	turn := userTurn("x")
	turn.ModelCalls = 2
	out, err := r.RunModelStep(context.Background(), turn)
	if err != nil {
		t.Fatal(err)
	}
	if out.Kind != session.OutcomeTurnCompleted || len(out.ToolCalls) != 0 || out.RunState != "" {
		t.Errorf("outcome = %+v, want a completed turn", out)
	}
	if len(out.NewMessages) != 3 {
		t.Fatalf("new messages = %+v", out.NewMessages)
	}
	if out.NewMessages[0].Role != session.RoleAssistant || len(out.NewMessages[0].ToolCalls) != 2 {
		t.Errorf("answer = %+v", out.NewMessages[0])
	}
	limit := "The tool call was not run: this turn reached its limit of 2 model calls."
	for i, id := range []string{"c1", "c2"} {
		m := out.NewMessages[i+1]
		if m.Role != session.RoleTool || m.ToolCallID != id || m.Text != limit {
			t.Errorf("result %d = %+v", i, m)
		}
	}
	if out.NewMessages[1].ToolName != "lookup" || out.NewMessages[2].ToolName != "refund" {
		t.Errorf("result tool names = %q %q", out.NewMessages[1].ToolName, out.NewMessages[2].ToolName)
	}
	if reqs := model.Requests(); len(reqs) != 1 || len(reqs[0].Tools) != 0 {
		t.Errorf("the call past the limit offered tools: %+v", reqs)
	}
}

type zeroUsageModel struct{}

func (zeroUsageModel) CallModel(context.Context, agent.ModelRequest, agent.OutputWriter) (agent.ModelResponse, error) {
	return agent.ModelResponse{Output: []agent.OutputItem{{Type: agent.OutputText, Text: "ok"}}}, nil
}

func (zeroUsageModel) EstimateInputTokens(agent.ModelRequest) int64 { return 0 }

func TestRunModelStepCountsAModelCallTheClientDidNotReport(t *testing.T) {
	r := newRunner(t, agent.Definition{Model: zeroUsageModel{}})
	out, err := r.RunModelStep(context.Background(), userTurn("x"))
	if err != nil {
		t.Fatal(err)
	}
	if out.Usage.ModelCalls != 1 {
		t.Errorf("usage = %+v, want one model call", out.Usage)
	}
}

func TestRunModelStepReturnsModelErrors(t *testing.T) {
	boom := errors.New("provider down")
	r := newRunner(t, agent.Definition{Model: agent.NewScriptedModel(func(agent.ModelRequest) (agent.ScriptedReply, error) { return agent.ScriptedReply{}, boom })})
	if _, err := r.RunModelStep(context.Background(), userTurn("x")); !errors.Is(err, boom) {
		t.Errorf("error = %v, want %v", err, boom)
	}
}

func TestInstructionsFuncIsEvaluatedInEveryModelCall(t *testing.T) {
	model := agent.NewScriptedModel(replying(agent.ScriptedReply{Text: "ok"}))
	var seen []agent.InstructionContext
	r := newRunner(t, agent.Definition{Name: "t", Model: model, Instructions: "static",
		InstructionsFunc: func(c agent.InstructionContext) (string, error) {
			seen = append(seen, c)
			if c.Attempt == 3 {
				return "", errors.New("no instructions today")
			}
			return fmt.Sprintf("for %s, call %d", c.TurnID, c.ModelCalls+1), nil
		}})
	turn := userTurn("hi")
	turn.Attempt, turn.ModelCalls = 2, 1
	if _, err := r.RunModelStep(context.Background(), turn); err != nil {
		t.Fatal(err)
	}
	if got := model.Requests()[0].Instructions; got != "for "+turn.TurnID+", call 2" {
		t.Errorf("instructions = %q, want the function's", got)
	}
	if len(seen) != 1 || seen[0].SessionID != turn.SessionID || seen[0].Attempt != 2 {
		t.Errorf("InstructionsFunc saw %+v", seen)
	}
	turn.Attempt = 3
	if _, err := r.RunModelStep(context.Background(), turn); err == nil || !strings.Contains(err.Error(), "computing the instructions: no instructions today") {
		t.Errorf("a failing InstructionsFunc = %v, want the attempt to fail", err)
	}
	if len(model.Requests()) != 1 {
		t.Error("a model call was made without instructions")
	}
}

func TestRunModelStepChoosesTheModelBySessionSettings(t *testing.T) {
	var seen []agent.ModelSettings
	answering := func(text string) agent.ModelClient {
		return agent.NewScriptedModel(func(req agent.ModelRequest) (agent.ScriptedReply, error) {
			seen = append(seen, req.Settings)
			return agent.ScriptedReply{Text: text}, nil
		})
	}
	choices := agent.ModelChoices{
		Default: agent.ModelChoice{Client: answering("small"), Settings: agent.ModelSettings{MaxOutputTokens: 100}},
		Named: map[string]agent.ModelChoice{
			"large": {Client: answering("large"), Settings: agent.ModelSettings{ReasoningEffort: "high"}},
		},
	}
	var instructionSettings []agent.SessionSettings
	r := newRunner(t, agent.Definition{
		Model: answering("unused"), ResolveModel: choices.Resolve,
		InstructionsFunc: func(c agent.InstructionContext) (string, error) {
			instructionSettings = append(instructionSettings, c.Settings)
			return "Help.", nil
		},
	})
	cases := []struct {
		name         string
		settings     string
		wantText     string
		wantSettings agent.ModelSettings
		wantErr      string
	}{
		{"no settings", "", "small", agent.ModelSettings{MaxOutputTokens: 100}, ""},
		{"no model setting", `{"tone":"brief"}`, "small", agent.ModelSettings{MaxOutputTokens: 100}, ""},
		{"a named model", `{"model":"large"}`, "large", agent.ModelSettings{ReasoningEffort: "high"}, ""},
		{"an unknown model", `{"model":"sk-secret-looking-value"}`, "", agent.ModelSettings{},
			`choosing the model: session setting "model" names a model this agent does not offer; it offers: large`},
		{"a model that is not a string", `{"model":7}`, "", agent.ModelSettings{},
			`choosing the model: session setting "model" must be a string naming one of: large`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			seen, instructionSettings = nil, nil
			turn := userTurn("hi")
			turn.Settings = json.RawMessage(c.settings)
			out, err := r.RunModelStep(context.Background(), turn)
			if err != nil {
				t.Fatalf("RunModelStep: %v", err)
			}
			if c.wantErr != "" {
				if out.Kind != session.OutcomeTurnCompleted || out.TurnError != c.wantErr || len(out.NewMessages) != 0 || len(seen) != 0 {
					t.Errorf("outcome = %+v after %d calls; want turn error %q and no call", out, len(seen), c.wantErr)
				}
				if strings.Contains(out.TurnError, "sk-secret") {
					t.Errorf("the turn error repeats the settings: %q", out.TurnError)
				}
				return
			}
			if len(out.NewMessages) != 1 || out.NewMessages[0].Text != c.wantText {
				t.Fatalf("answer = %+v, want %q", out.NewMessages, c.wantText)
			}
			if len(seen) != 1 || seen[0] != c.wantSettings {
				t.Errorf("model settings = %+v, want %+v", seen, c.wantSettings)
			}
			want, _ := contract.DecodeSessionSettings(json.RawMessage(c.settings))
			if len(instructionSettings) != 1 || fmt.Sprint(instructionSettings[0]) != fmt.Sprint(want) {
				t.Errorf("instructions saw settings %v, want %v", instructionSettings, want)
			}
		})
	}
}

func TestAForcedPlanningCallTheModelRefusesFailsTheTurn(t *testing.T) {
	calls := 0
	model := refusingModel{agent.NewScriptedModel(func(agent.ModelRequest) (agent.ScriptedReply, error) {
		calls++
		return agent.ScriptedReply{Text: "x"}, nil
	})}
	plain := agent.NewScriptedModel(agent.DemoScript)
	// The agent's own model takes a forced choice; the one a session's
	// settings choose does not.
	choices := agent.ModelChoices{Default: agent.ModelChoice{Client: plain}, Named: map[string]agent.ModelChoice{"thinking": {Client: model}}}
	r := newRunner(t, agent.Definition{
		Model: plain, ResolveModel: choices.Resolve, PlanModeEnabled: true, PlanningToolChoice: agent.ToolChoiceRequired,
		BuiltInTools: []agent.BuiltInTool{agent.BuiltInWriteTodos},
	})
	turn := userTurn("plan")
	turn.Mode = session.ModePlanning
	turn.Settings = json.RawMessage(`{"model":"thinking"}`)
	out, err := r.RunModelStep(context.Background(), turn)
	if err != nil || out.Kind != session.OutcomeTurnCompleted || !strings.Contains(out.TurnError, "cannot be forced to call write_todos") || calls != 0 {
		t.Errorf("RunModelStep = %+v, %v after %d calls; want the turn failed before any call", out, err, calls)
	}
}

// refusingModel never accepts a forced tool choice.
type refusingModel struct{ *agent.ScriptedModel }

func (refusingModel) SupportsForcedToolChoice(agent.ModelSettings) bool { return false }
