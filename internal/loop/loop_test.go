package loop

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stepwise-run/stepwise/internal/contract"
	"github.com/stepwise-run/stepwise/internal/session"
	"github.com/stepwise-run/stepwise/pkg/agent"
)

type orderArgs struct {
	OrderID string `json:"order_id"`
}

type eventLog struct{ events []session.Event }

func (l *eventLog) Write(e session.Event) { l.events = append(l.events, e) }

func (l *eventLog) types() []session.EventType {
	var out []session.EventType
	for _, e := range l.events {
		out = append(out, e.Type)
	}
	return out
}

func lookupTool(t *testing.T, fn func(context.Context, agent.ToolContext, orderArgs) (string, error)) agent.Tool {
	t.Helper()
	if fn == nil {
		fn = func(_ context.Context, _ agent.ToolContext, a orderArgs) (string, error) {
			return "order " + a.OrderID, nil
		}
	}
	tool, err := agent.NewTool("lookup", "Look up an order.", agent.EffectRead, fn)
	if err != nil {
		t.Fatal(err)
	}
	return tool
}

func refundTool(t *testing.T) agent.Tool {
	t.Helper()
	tool, err := agent.NewTool("refund", "Refund an order.", agent.EffectNonIdempotentWrite,
		func(_ context.Context, _ agent.ToolContext, a orderArgs) (map[string]string, error) {
			return map[string]string{"refunded": a.OrderID}, nil
		})
	if err != nil {
		t.Fatal(err)
	}
	return tool
}

func newRunner(t *testing.T, def agent.Definition) *Runner {
	t.Helper()
	if def.Model == nil {
		def.Model = agent.NewScriptedModel(agent.DemoScript)
	}
	r, err := New(def)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return r
}

// replying is a script that always gives the same reply.
func replying(reply agent.ScriptedReply) agent.Script {
	return func(agent.ModelRequest) (agent.ScriptedReply, error) { return reply, nil }
}

func userTurn(text string) session.TurnContext {
	return session.TurnContext{
		SessionID: "s1", TurnID: "turn-1", Attempt: 1, Mode: session.ModeChat,
		Messages: []session.Message{{Sequence: 1, TurnID: "turn-1", Role: session.RoleUser, Text: text}},
	}
}

func toolNames(tools []agent.ToolDefinition) []string {
	var out []string
	for _, t := range tools {
		out = append(out, t.Name)
	}
	return out
}

func TestNewRefusesADefinitionTheSessionCannotRun(t *testing.T) {
	askUser, err := agent.NewTool("ask_user", "", agent.EffectRead,
		func(context.Context, agent.ToolContext, struct{}) (string, error) { return "", nil })
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name    string
		def     agent.Definition
		wantErr string
	}{
		{"missing model", agent.Definition{Name: "support"}, "agent support: model is required"},
		{"function tool named like an enabled built-in", agent.Definition{
			Name: "support", Model: agent.NewScriptedModel(agent.DemoScript),
			Tools: []agent.Tool{askUser}, BuiltInTools: []agent.BuiltInTool{agent.BuiltInAskUser},
		}, "tool ask_user uses the name of an enabled built-in tool"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r, err := New(c.def)
			if err == nil || !strings.Contains(err.Error(), c.wantErr) || r != nil {
				t.Errorf("New = %v, %v; want an error containing %q", r, err, c.wantErr)
			}
		})
	}
}

func TestRequest(t *testing.T) {
	r := newRunner(t, agent.Definition{
		Name: "support", Instructions: "You help customers.",
		Tools:                []agent.Tool{lookupTool(t, nil), refundTool(t)},
		BuiltInTools:         []agent.BuiltInTool{agent.BuiltInDurableWait, agent.BuiltInWriteTodos, agent.BuiltInAskUser},
		ModelSettings:        agent.ModelSettings{MaxOutputTokens: 500, ReasoningEffort: "low"},
		MaxModelCallsPerTurn: 3,
	})
	turn := userTurn("refund order 7")
	turn.Messages = append(turn.Messages,
		session.Message{Sequence: 2, TurnID: "turn-1", Role: session.RoleAssistant, ToolCalls: []session.ToolCall{{ID: "c1", Name: "lookup", Arguments: `{"order_id":"7"}`}}},
		session.Message{Sequence: 3, TurnID: "turn-1", Role: session.RoleUser, Text: "note"},
	)

	cases := []struct {
		modelCalls int
		wantTools  []string
		wantChoice agent.ToolChoice
	}{
		{0, []string{"lookup", "refund", "durable_wait", "write_todos", "ask_user"}, agent.ToolChoiceAuto},
		{2, []string{"lookup", "refund", "durable_wait", "write_todos", "ask_user"}, agent.ToolChoiceAuto},
		{3, nil, ""},
		{4, nil, ""},
	}
	for _, c := range cases {
		t.Run(fmt.Sprintf("after %d model calls", c.modelCalls), func(t *testing.T) {
			turn.ModelCalls = c.modelCalls
			req := r.Request(turn, nil)
			if req.Instructions != "You help customers." {
				t.Errorf("Instructions = %q", req.Instructions)
			}
			if req.Settings != (agent.ModelSettings{MaxOutputTokens: 500, ReasoningEffort: "low"}) {
				t.Errorf("Settings = %+v", req.Settings)
			}
			if got := toolNames(req.Tools); !slices.Equal(got, c.wantTools) {
				t.Errorf("tools = %v, want %v", got, c.wantTools)
			}
			if req.ToolChoice != c.wantChoice {
				t.Errorf("ToolChoice = %q, want %q", req.ToolChoice, c.wantChoice)
			}
			var roles []string
			for _, m := range req.Input {
				roles = append(roles, string(m.Role))
			}
			if want := []string{"user", "assistant", "tool", "user"}; !slices.Equal(roles, want) {
				t.Fatalf("input roles = %v, want %v (the orphaned call paired)", roles, want)
			}
			if paired := req.Input[2]; paired.ToolCallID != "c1" || paired.ToolName != "lookup" || paired.Text != session.OutcomeUnknownText {
				t.Errorf("paired result = %+v", paired)
			}
		})
	}

	req := r.Request(userTurn("x"), nil)
	wantAsk := session.BuiltInToolDefinitions[agent.BuiltInAskUser]
	got := req.Tools[4]
	if got.Name != wantAsk.Name || got.Description != wantAsk.Description || string(got.Parameters) != string(wantAsk.Parameters) {
		t.Errorf("ask_user offered as %+v", got)
	}
	lookup := req.Tools[0]
	if lookup.Description != "Look up an order." || !json.Valid(lookup.Parameters) || !strings.Contains(string(lookup.Parameters), "order_id") {
		t.Errorf("lookup offered as %+v", lookup)
	}
}

func TestRequestWithoutToolsOffersNone(t *testing.T) {
	r := newRunner(t, agent.Definition{Instructions: "Chat."})
	req := r.Request(userTurn("hi"), nil)
	if len(req.Tools) != 0 || req.ToolChoice != "" {
		t.Errorf("tools = %v choice = %q", toolNames(req.Tools), req.ToolChoice)
	}
	if len(req.Input) != 1 || req.Input[0].Text != "hi" {
		t.Errorf("input = %+v", req.Input)
	}
}

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

func execution(name, args string, effect agent.Effect) session.ToolExecution {
	return session.ToolExecution{
		SessionID: "s1", TurnID: "turn-2",
		Call:           session.ToolCallRecord{ID: "c9", Name: name, Arguments: args, Effect: effect, Status: session.ToolCallApproved},
		IdempotencyKey: session.IdempotencyKey("s1", "turn-2", "c9"), Attempt: 2,
	}
}

func TestExecuteToolCall(t *testing.T) {
	plain := errors.New("connection reset")
	failing := func(err error) func(context.Context, agent.ToolContext, orderArgs) (string, error) {
		return func(context.Context, agent.ToolContext, orderArgs) (string, error) { return "ignored", err }
	}
	cases := []struct {
		name    string
		fn      func(context.Context, agent.ToolContext, orderArgs) (string, error)
		tool    string
		args    string
		want    session.ToolOutcome
		wantErr error
	}{
		{name: "succeeded", tool: "lookup", args: `{"order_id":"7"}`,
			want: session.ToolOutcome{Kind: session.ToolResultSucceeded, Output: "order 7"}},
		{name: "unknown tool", tool: "mystery", args: `{}`,
			want: session.ToolOutcome{Kind: session.ToolResultFailed, Error: "unknown tool mystery"}},
		{name: "arguments not JSON", tool: "lookup", args: `{"order_id"`,
			want: session.ToolOutcome{Kind: session.ToolResultFailed, Error: "invalid arguments for lookup: arguments are not valid JSON"}},
		{name: "tool execution error", tool: "lookup", args: `{"order_id":"7"}`, fn: failing(agent.Failed("order 7 not found")),
			want: session.ToolOutcome{Kind: session.ToolResultFailed, Error: "order 7 not found"}},
		{name: "wrapped tool execution error", tool: "lookup", args: `{"order_id":"7"}`, fn: failing(fmt.Errorf("lookup: %w", agent.Failed("gone"))),
			want: session.ToolOutcome{Kind: session.ToolResultFailed, Error: "gone"}},
		{name: "outcome unknown error", tool: "lookup", args: `{"order_id":"7"}`, fn: failing(agent.OutcomeUnknown("sent, no reply")),
			want: session.ToolOutcome{Kind: session.ToolResultOutcomeUnknown, Error: "sent, no reply"}},
		{name: "other error", tool: "lookup", args: `{"order_id":"7"}`, fn: failing(plain),
			wantErr: plain},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := newRunner(t, agent.Definition{Tools: []agent.Tool{lookupTool(t, c.fn)}})
			out, err := r.ExecuteToolCall(context.Background(), execution(c.tool, c.args, agent.EffectRead))
			if c.wantErr != nil {
				if !errors.Is(err, c.wantErr) || !reflect.DeepEqual(out, session.ToolOutcome{}) {
					t.Errorf("ExecuteToolCall = %+v, %v; want the error %v", out, err, c.wantErr)
				}
				return
			}
			if err != nil || !reflect.DeepEqual(out, c.want) {
				t.Errorf("ExecuteToolCall = %+v, %v; want %+v", out, err, c.want)
			}
		})
	}
}

func TestExecuteToolCallGivesTheToolItsContext(t *testing.T) {
	var seen agent.ToolContext
	tool := lookupTool(t, func(_ context.Context, call agent.ToolContext, a orderArgs) (string, error) {
		seen = call
		call.Heartbeat()
		call.Events.WriteEvent("order_checked", map[string]string{"order_id": a.OrderID})
		return "ok", nil
	})
	r := newRunner(t, agent.Definition{Tools: []agent.Tool{tool}})
	log := &eventLog{}
	exec := execution("lookup", `{"order_id":"7"}`, agent.EffectIdempotentWrite)
	exec.Events = log
	out, err := r.ExecuteToolCall(context.Background(), exec)
	if err != nil || out.Kind != session.ToolResultSucceeded {
		t.Fatalf("ExecuteToolCall = %+v, %v", out, err)
	}
	if seen.SessionID != "s1" || seen.TurnID != "turn-2" || seen.ToolCallID != "c9" || seen.IdempotencyKey != "s1/turn-2/c9" || seen.Attempt != 2 || seen.Effect != agent.EffectIdempotentWrite {
		t.Errorf("tool context = %+v", seen)
	}
	if len(log.events) != 1 || log.events[0].Type != "order_checked" || log.events[0].TurnID != "turn-2" || string(log.events[0].Payload) != `{"order_id":"7"}` {
		t.Errorf("tool events = %+v", log.events)
	}

	// Without an event writer or heartbeat, a tool still runs.
	exec.Events, exec.Heartbeat = nil, nil
	if out, err := r.ExecuteToolCall(context.Background(), exec); err != nil || out.Output != "ok" {
		t.Errorf("ExecuteToolCall without writer = %+v, %v", out, err)
	}
}

func TestExecuteToolCallHeartbeats(t *testing.T) {
	beats := 0
	tool := lookupTool(t, func(_ context.Context, call agent.ToolContext, _ orderArgs) (string, error) {
		call.Heartbeat()
		call.Heartbeat()
		return "ok", nil
	})
	r := newRunner(t, agent.Definition{Tools: []agent.Tool{tool}})
	exec := execution("lookup", `{"order_id":"7"}`, agent.EffectRead)
	exec.Heartbeat = func() { beats++ }
	if _, err := r.ExecuteToolCall(context.Background(), exec); err != nil {
		t.Fatal(err)
	}
	if beats != 2 {
		t.Errorf("heartbeats = %d, want 2", beats)
	}
}

// TestATurnRunsThroughTheSession drives the session state with the loop
// runner and the demo script, as the engine does, without an engine.
func TestATurnRunsThroughTheSession(t *testing.T) {
	r := newRunner(t, agent.Definition{Instructions: "Demo.", Tools: []agent.Tool{lookupTool(t, nil), refundTool(t)}})
	now := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	s := session.NewState("s1")
	s.Start(session.StartInput{RequestID: "r1", InitialMessage: `call lookup {"order_id":"7"}`})

	turn, err := s.TurnContext("turn-1")
	if err != nil {
		t.Fatal(err)
	}
	out, err := r.RunModelStep(context.Background(), turn)
	if err != nil {
		t.Fatal(err)
	}
	records, _ := s.ApplyModelOutcome(out, now)
	if len(records) != 1 || records[0].Status != session.ToolCallApproved || records[0].Effect != agent.EffectRead {
		t.Fatalf("records = %+v", records)
	}
	rec := *records[0]
	result, err := r.ExecuteToolCall(context.Background(), session.ToolExecution{
		SessionID: "s1", TurnID: "turn-1", Call: rec, IdempotencyKey: session.IdempotencyKey("s1", "turn-1", rec.ID), Attempt: 1,
	})
	if err != nil {
		t.Fatal(err)
	}
	s.RecordToolOutcome(rec.ID, result)
	if !s.ToolCallsFinal() {
		t.Fatal("the call is not final")
	}
	s.ResumeTurn()

	turn, err = s.TurnContext("turn-1")
	if err != nil {
		t.Fatal(err)
	}
	if turn.ModelCalls != 1 {
		t.Errorf("model calls = %d", turn.ModelCalls)
	}
	out, err = r.RunModelStep(context.Background(), turn)
	if err != nil {
		t.Fatal(err)
	}
	_, events := s.ApplyModelOutcome(out, now)
	if s.Turn != nil || events[len(events)-1].Type != session.EventTurnCompleted {
		t.Fatalf("the turn did not complete: %+v", s.Turn)
	}
	var texts []string
	for _, m := range s.Messages() {
		texts = append(texts, string(m.Role)+": "+m.Text)
	}
	want := []string{
		`user: call lookup {"order_id":"7"}`,
		"assistant: ",
		"tool: order 7",
		"assistant: Done. lookup: order 7",
	}
	if !slices.Equal(texts, want) {
		t.Errorf("messages =\n%s\nwant\n%s", strings.Join(texts, "\n"), strings.Join(want, "\n"))
	}
	if s.Usage.ModelCalls != 2 {
		t.Errorf("session usage = %+v", s.Usage)
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

// continuationTurn is a turn after one model call whose lookup call c1
// succeeded.
func continuationTurn() session.TurnContext {
	turn := userTurn("check order 7")
	turn.ModelCalls = 1
	turn.RunState = `{"modelCalls":1,"afterTools":true}`
	turn.Messages = append(turn.Messages,
		session.Message{Sequence: 2, TurnID: "turn-1", Role: session.RoleAssistant, ToolCalls: []session.ToolCall{{ID: "c1", Name: "lookup", Arguments: `{"order_id":"7"}`}}},
		session.Message{Sequence: 3, TurnID: "turn-1", Role: session.RoleTool, ToolCallID: "c1", ToolName: "lookup", Text: "order 7"},
	)
	turn.ToolCalls = []session.ToolCallRecord{{ID: "c1", Name: "lookup", Status: session.ToolCallSucceeded, Output: "order 7", ResultStored: true}}
	return turn
}

func TestTurnContinuationAfterToolCalls(t *testing.T) {
	cases := []struct {
		name         string
		decision     agent.TurnContinuation
		wantKind     session.OutcomeKind
		wantCalls    int
		wantMessages []string
	}{
		{"end completes the turn without a model call", agent.EndTurn, session.OutcomeTurnCompleted, 0, nil},
		{"default calls the model with the results", agent.DefaultContinuation, session.OutcomeTurnCompleted, 1, []string{"assistant:answer"}},
		{"continue adds the message after the results", agent.ContinueTurn("Now summarize."), session.OutcomeTurnCompleted, 1,
			[]string{"user:Now summarize.", "assistant:answer"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var requests []agent.ModelRequest
			var seen []agent.TurnContinuationContext
			r := newRunner(t, agent.Definition{
				Model: agent.NewScriptedModel(func(req agent.ModelRequest) (agent.ScriptedReply, error) {
					requests = append(requests, req)
					return agent.ScriptedReply{Text: "answer"}, nil
				}),
				Tools: []agent.Tool{lookupTool(t, nil)},
				DecideTurnContinuation: func(ctx agent.TurnContinuationContext) (agent.TurnContinuation, error) {
					seen = append(seen, ctx)
					if len(ctx.ToolResults) > 0 {
						return c.decision, nil
					}
					return agent.DefaultContinuation, nil
				},
			})
			out, err := r.RunModelStep(context.Background(), continuationTurn())
			if err != nil {
				t.Fatal(err)
			}
			if out.Kind != c.wantKind || len(requests) != c.wantCalls || int(out.Usage.ModelCalls) != c.wantCalls {
				t.Errorf("kind %q after %d calls (usage %d), want %q after %d", out.Kind, len(requests), out.Usage.ModelCalls, c.wantKind, c.wantCalls)
			}
			var got []string
			for _, m := range out.NewMessages {
				got = append(got, string(m.Role)+":"+m.Text)
			}
			if !slices.Equal(got, c.wantMessages) {
				t.Errorf("new messages = %v, want %v", got, c.wantMessages)
			}
			first := seen[0]
			if first.TurnID != "turn-1" || len(first.ToolResults) != 1 || first.ToolResults[0] != (agent.ToolResult{ToolCallID: "c1", ToolName: "lookup", Status: "succeeded", Output: "order 7"}) ||
				len(first.ModelOutput.ToolCalls) != 1 {
				t.Errorf("the decision saw %+v", first)
			}
			if msg, ok := c.decision.Continues(); ok {
				last := requests[0].Input[len(requests[0].Input)-1]
				if last.Role != agent.RoleUser || last.Text != msg {
					t.Errorf("the request ends with %+v, want the continuation message", last)
				}
			}
		})
	}
}

func TestTurnContinuationAfterAnswers(t *testing.T) {
	var decisions []agent.TurnContinuationContext
	r := newRunner(t, agent.Definition{
		Model: agent.NewScriptedModel(replying(agent.ScriptedReply{Text: "thinking"})),
		DecideTurnContinuation: func(ctx agent.TurnContinuationContext) (agent.TurnContinuation, error) {
			decisions = append(decisions, ctx)
			return agent.ContinueTurn("Finish with DECISION:."), nil
		},
	})
	turn := userTurn("decide")
	for i := range contract.MaxConsecutiveTurnContinuations {
		out, err := r.RunModelStep(context.Background(), turn)
		if err != nil {
			t.Fatal(err)
		}
		if out.Kind != session.OutcomeTurnContinued {
			t.Fatalf("continuation %d: kind %q", i+1, out.Kind)
		}
		if len(out.NewMessages) != 2 || out.NewMessages[0].Text != "thinking" || out.NewMessages[1].Role != session.RoleUser ||
			out.NewMessages[1].Text != "Finish with DECISION:." {
			t.Fatalf("continuation %d: new messages %+v", i+1, out.NewMessages)
		}
		for _, m := range out.NewMessages {
			m.Sequence, m.TurnID = int64(len(turn.Messages)+1), turn.TurnID
			turn.Messages = append(turn.Messages, m)
		}
		turn.RunState, turn.ModelCalls = out.RunState, turn.ModelCalls+1
	}
	out, err := r.RunModelStep(context.Background(), turn)
	if err != nil {
		t.Fatal(err)
	}
	if out.Kind != session.OutcomeTurnCompleted || out.TurnError != contract.TurnContinuationLimitError ||
		len(out.NewMessages) != 1 || out.NewMessages[0].Text != "thinking" {
		t.Errorf("the ninth continuation = %+v, want the turn ended with its answer and the limit error", out)
	}
	if last := decisions[len(decisions)-1]; last.ModelOutput.Text != "thinking" || len(last.ToolResults) != 0 {
		t.Errorf("the decision after an answer saw %+v", last)
	}

	// A tool call resets the count: after tools, continuations start again.
	turn = continuationTurn()
	turn.RunState = `{"modelCalls":1,"afterTools":true}`
	out, err = r.RunModelStep(context.Background(), turn)
	if err != nil || out.Kind != session.OutcomeTurnContinued || out.RunState != `{"modelCalls":2,"continuations":1}` {
		t.Errorf("after tools = %+v, %v; want a first continuation", out, err)
	}
}

func TestTurnContinuationErrorsFailTheAttempt(t *testing.T) {
	cases := []struct {
		name     string
		decide   func(agent.TurnContinuationContext) (agent.TurnContinuation, error)
		wantErrs string
	}{
		{"an error", func(agent.TurnContinuationContext) (agent.TurnContinuation, error) {
			return agent.TurnContinuation{}, errors.New("rules unavailable")
		}, "deciding whether the turn continues: rules unavailable"},
		{"a blank message", func(agent.TurnContinuationContext) (agent.TurnContinuation, error) {
			return agent.ContinueTurn("  "), nil
		}, "a continuation needs a message that is not blank"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := newRunner(t, agent.Definition{
				Model:                  agent.NewScriptedModel(replying(agent.ScriptedReply{Text: "x"})),
				DecideTurnContinuation: c.decide,
			})
			if _, err := r.RunModelStep(context.Background(), userTurn("hi")); err == nil || !strings.Contains(err.Error(), c.wantErrs) {
				t.Errorf("RunModelStep = %v, want %q", err, c.wantErrs)
			}
		})
	}
}

func TestParseRunStateReadsStatesFromBeforeContinuations(t *testing.T) {
	s, err := parseRunState(`{"modelCalls":4}`)
	if err != nil || !s.AfterTools || s.ModelCalls != 4 {
		t.Errorf("parseRunState(old) = %+v, %v; want after tools", s, err)
	}
	if _, err := parseRunState("not json"); err == nil {
		t.Error("parseRunState accepted a broken state")
	}
}

func TestPlanningRequests(t *testing.T) {
	def := agent.Definition{
		Instructions: "Plan.", Tools: []agent.Tool{lookupTool(t, nil)},
		BuiltInTools:    []agent.BuiltInTool{agent.BuiltInWriteTodos, agent.BuiltInAskUser},
		PlanModeEnabled: true,
	}
	draft := &session.Plan{Revision: 1, Status: session.PlanDraft, Todos: []session.Todo{{Content: "a", Status: session.TodoPending}}}
	cases := []struct {
		name       string
		choice     agent.ToolChoice
		mode       session.InteractionMode
		plan       *session.Plan
		modelCalls int
		wantTools  []string
		wantChoice agent.ToolChoice
		wantNote   string
	}{
		{"a planning turn offers only write_todos", agent.ToolChoiceAuto, session.ModePlanning, nil, 0,
			[]string{"write_todos"}, agent.ToolChoiceAuto, "This is a planning turn"},
		{"required forces the first call without a draft", agent.ToolChoiceRequired, session.ModePlanning, nil, 0,
			[]string{"write_todos"}, agent.ToolChoiceRequired, "none yet"},
		{"required does not force later calls", agent.ToolChoiceRequired, session.ModePlanning, nil, 1,
			[]string{"write_todos"}, agent.ToolChoiceAuto, "This is a planning turn"},
		{"required does not force feedback on a draft", agent.ToolChoiceRequired, session.ModePlanning, draft, 0,
			[]string{"write_todos"}, agent.ToolChoiceAuto, "(revision 1, draft)"},
		{"an executing turn offers every tool and shows the plan", agent.ToolChoiceRequired, session.ModeExecuting, draft, 0,
			[]string{"lookup", "write_todos", "ask_user"}, agent.ToolChoiceAuto, "Execute the plan"},
		{"a chat turn without a plan has no note", agent.ToolChoiceAuto, session.ModeChat, nil, 0,
			[]string{"lookup", "write_todos", "ask_user"}, agent.ToolChoiceAuto, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			d := def
			d.PlanningToolChoice = c.choice
			r := newRunner(t, d)
			turn := userTurn("second")
			turn.TurnID = "turn-2"
			turn.Messages = []session.Message{
				{Sequence: 1, TurnID: "turn-1", Role: session.RoleUser, Text: "first"},
				{Sequence: 2, TurnID: "turn-1", Role: session.RoleAssistant, Text: "ok"},
				{Sequence: 3, TurnID: "turn-2", Role: session.RoleUser, Text: "second"},
			}
			turn.Mode, turn.Plan, turn.ModelCalls = c.mode, c.plan, c.modelCalls
			req := r.Request(turn, nil)
			if got := toolNames(req.Tools); !slices.Equal(got, c.wantTools) {
				t.Errorf("tools = %v, want %v", got, c.wantTools)
			}
			if req.ToolChoice != c.wantChoice {
				t.Errorf("tool choice = %q, want %q", req.ToolChoice, c.wantChoice)
			}
			var texts []string
			for _, m := range req.Input {
				texts = append(texts, m.Text)
			}
			if c.wantNote == "" {
				if len(texts) != 3 {
					t.Errorf("input = %q, want no note", texts)
				}
				return
			}
			// The note comes before the turn's items, after earlier turns.
			if len(texts) != 4 || !strings.Contains(texts[2], c.wantNote) || texts[3] != "second" || texts[1] != "ok" {
				t.Errorf("input = %q, want the note with %q before the turn's first message", texts, c.wantNote)
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

func TestSummarizeContextLeavesOutWhatDoesNotFit(t *testing.T) {
	var got agent.ModelRequest
	model := agent.NewScriptedModel(func(req agent.ModelRequest) (agent.ScriptedReply, error) {
		got = req
		return agent.ScriptedReply{Text: "the summary"}, nil
	})
	r := newRunner(t, agent.Definition{Model: model, Compaction: &agent.CompactionPolicy{ContextWindowTokens: 120},
		ModelSettings: agent.ModelSettings{MaxOutputTokens: 20}})
	turn := userTurn("q1")
	long := strings.Repeat("w", 120)
	turn.Messages = []session.Message{
		{Sequence: 1, TurnID: "turn-1", Role: session.RoleUser, Text: long},
		{Sequence: 2, TurnID: "turn-1", Role: session.RoleAssistant, ToolCalls: []session.ToolCall{{ID: "c1", Name: "lookup", Arguments: "{}"}}},
		{Sequence: 3, TurnID: "turn-1", Role: session.RoleTool, ToolCallID: "c1", ToolName: "lookup", Text: long},
		{Sequence: 4, TurnID: "turn-1", Role: session.RoleAssistant, Text: "short answer"},
		{Sequence: 5, TurnID: "turn-1", Role: session.RoleUser, Text: "not covered"},
	}
	turn.Summary = &session.ContextSummary{Generation: 1, LastSequence: 0, Text: "before"}
	turn.CompactThrough = 4
	out, err := r.SummarizeContext(context.Background(), turn)
	if err != nil || out.Text != "the summary" || out.Usage.ModelCalls != 1 {
		t.Fatalf("SummarizeContext = %+v, %v", out, err)
	}
	if got.Instructions != session.ContextSummaryInstructions || len(got.Tools) != 0 {
		t.Errorf("the summary request has instructions %q and %d tools", got.Instructions, len(got.Tools))
	}
	var texts []string
	for _, m := range got.Input {
		texts = append(texts, m.Text)
	}
	// The first message and the call with its long result do not fit; they
	// go whole, and the note counts them.
	want := []string{session.SummaryNote(turn.Summary), session.SummaryOmissionNote(3), "short answer", "Summarize the conversation above."}
	if !slices.Equal(texts, want) {
		t.Errorf("summary input = %q, want %q", texts, want)
	}
}

func TestRunModelStepAsksForCompactionPastTheThreshold(t *testing.T) {
	model := agent.NewScriptedModel(replying(agent.ScriptedReply{Text: "x"}))
	r := newRunner(t, agent.Definition{Model: model, Compaction: &agent.CompactionPolicy{ContextWindowTokens: 100}})
	turn := userTurn("q")
	for i := 2; i <= 9; i++ {
		role := session.RoleAssistant
		if i%2 == 1 {
			role = session.RoleUser
		}
		turn.Messages = append(turn.Messages, session.Message{Sequence: int64(i), TurnID: "turn-1", Role: role, Text: strings.Repeat("z", 60)})
	}
	out, err := r.RunModelStep(context.Background(), turn)
	if err != nil || out.Kind != session.OutcomeCompactionNeeded || out.CompactThrough < 2 || len(model.Requests()) != 0 {
		t.Fatalf("RunModelStep = %+v, %v after %d calls; want a compaction request and no call", out, err, len(model.Requests()))
	}
	// With the summary through that cut, nothing new can be summarized, so
	// the model is called even though the estimate is still high.
	turn.Summary = &session.ContextSummary{LastSequence: out.CompactThrough, Text: strings.Repeat("s", 400)}
	var after []session.Message
	for _, m := range turn.Messages {
		if m.Sequence > out.CompactThrough {
			after = append(after, m)
		}
	}
	turn.Messages = after
	if len(after) > 0 && after[len(after)-1].Role == session.RoleAssistant {
		turn.Messages = append(turn.Messages, session.Message{Sequence: 10, TurnID: "turn-1", Role: session.RoleUser, Text: "q"})
	}
	out, err = r.RunModelStep(context.Background(), turn)
	if err != nil || out.Kind != session.OutcomeTurnCompleted {
		t.Errorf("after the summary: %+v, %v", out, err)
	}
}
