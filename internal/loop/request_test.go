package loop

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/stepwise-run/stepwise/internal/session"
	"github.com/stepwise-run/stepwise/pkg/agent"
)

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
