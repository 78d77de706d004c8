package loop

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

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

func TestParseRunStateReadsStatesFromBeforeContinuations(t *testing.T) {
	s, err := parseRunState(`{"modelCalls":4}`)
	if err != nil || !s.AfterTools || s.ModelCalls != 4 {
		t.Errorf("parseRunState(old) = %+v, %v; want after tools", s, err)
	}
	if _, err := parseRunState("not json"); err == nil {
		t.Error("parseRunState accepted a broken state")
	}
}
