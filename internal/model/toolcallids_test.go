package model

import (
	"slices"
	"testing"

	"github.com/stepwise-run/stepwise/pkg/agent"
)

func TestUsableToolCallIDs(t *testing.T) {
	earlier := []agent.Message{
		{TurnID: "turn-1", Role: agent.RoleAssistant, ToolCalls: []agent.ToolCall{{ID: "call_0"}}},
		{TurnID: "turn-1", Role: agent.RoleTool, ToolCallID: "call_0"},
		{TurnID: "turn-1", Role: agent.RoleTool, ToolCallID: "orphan"},
	}
	cases := []struct {
		name  string
		input []agent.Message
		sent  []string
		want  []string
	}{
		{"usable IDs are kept", nil, []string{"call_a", "call_b"}, []string{"call_a", "call_b"}},
		{"empty IDs are made up from turn, model call and position", nil,
			[]string{"", "", "call_c"}, []string{"call_turn-2_3_0", "call_turn-2_3_1", "call_c"}},
		{"a repeat in the response: the first keeps it", nil,
			[]string{"call_0", "call_0", "call_0"}, []string{"call_0", "call_turn-2_3_1", "call_turn-2_3_2"}},
		{"an ID an earlier model call used", earlier,
			[]string{"call_0", "call_1"}, []string{"call_turn-2_3_0", "call_1"}},
		{"an ID a tool result used", earlier, []string{"orphan"}, []string{"call_turn-2_3_0"}},
		{"an ID with a slash", nil, []string{"a/b"}, []string{"call_turn-2_3_0"}},
		{"a made-up ID the provider already sent", nil,
			[]string{"call_turn-2_3_1", ""}, []string{"call_turn-2_3_1", "call_turn-2_3_1_2"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			req := agent.ModelRequest{TurnID: "turn-2", ModelCall: 3, Input: c.input}
			calls := make([]agent.ToolCall, len(c.sent))
			for i, id := range c.sent {
				calls[i] = agent.ToolCall{ID: id, Name: "lookup"}
			}
			UsableToolCallIDs(req, calls)
			var got []string
			for _, call := range calls {
				got = append(got, call.ID)
			}
			if !slices.Equal(got, c.want) {
				t.Errorf("IDs = %v, want %v", got, c.want)
			}
		})
	}
}
