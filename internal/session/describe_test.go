package session

import (
	"slices"
	"testing"
)

func TestDescribeOutcome(t *testing.T) {
	cases := []struct {
		name   string
		record ToolCallRecord
		want   string
	}{
		{"succeeded", ToolCallRecord{Status: ToolCallSucceeded, Output: `{"id":"7"}`}, `{"id":"7"}`},
		{"succeeded with empty output", ToolCallRecord{Status: ToolCallSucceeded}, ""},
		{"failed", ToolCallRecord{Status: ToolCallFailed, Error: "not found"}, "The tool call failed: not found"},
		{"rejected", ToolCallRecord{Status: ToolCallRejected}, "The user rejected the tool call."},
		{"rejected with a message", ToolCallRecord{Status: ToolCallRejected, RejectionMessage: "too much"}, "The user rejected the tool call: too much"},
		{"rejected approval past its deadline", ToolCallRecord{Status: ToolCallRejected, RejectionMessage: ApprovalDeadlineText}, "The user rejected the tool call: approval deadline passed"},
		{"declined question", ToolCallRecord{Status: ToolCallRejected, Output: DeclinedAnswerText, RejectionMessage: "ignored"}, "The user declined to answer."},
		{"question past its deadline", ToolCallRecord{Status: ToolCallRejected, Output: QuestionDeadlineText}, "question deadline passed"},
		{"outcome unknown", ToolCallRecord{Status: ToolCallOutcomeUnknown}, OutcomeUnknownText},
		{"outcome unknown with detail", ToolCallRecord{Status: ToolCallOutcomeUnknown, Error: "timeout"}, OutcomeUnknownText + " (timeout)"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := DescribeOutcome(c.record); got != c.want {
				t.Errorf("DescribeOutcome = %q, want %q", got, c.want)
			}
		})
	}
}

func TestModelVisibleTexts(t *testing.T) {
	cases := []struct{ got, want string }{
		{ToolCallNotRunPrefix, "the tool did not run, so it is safe to call again"},
		{DeclinedAnswerText, "The user declined to answer."},
		{QuestionDeadlineText, "question deadline passed"},
		{ToolCallIDError, "tool call IDs must be non-empty, contain no '/', and be unique within one turn"},
		{ModelCallLimitResult(100), "The tool call was not run: this turn reached its limit of 100 model calls."},
		{ModelCallLimitResult(3), "The tool call was not run: this turn reached its limit of 3 model calls."},
		{TurnFailureNoteFooter, "Do not repeat these tool calls unless the user asks again."},
	}
	for _, c := range cases {
		if c.got != c.want {
			t.Errorf("text = %q, want %q", c.got, c.want)
		}
	}
}

func TestTurnFailureNote(t *testing.T) {
	cases := []struct {
		name    string
		records []*ToolCallRecord
		want    string
	}{
		{"no records", nil, ""},
		{"no final records", []*ToolCallRecord{
			{Name: "refund", Arguments: `{}`, Status: ToolCallAwaitingApproval},
			{Name: "lookup", Arguments: `{}`, Status: ToolCallApproved},
			{Name: "wait", Arguments: `{}`, Status: ToolCallWaitingForTimer},
		}, ""},
		{"final records in order, others left out", []*ToolCallRecord{
			{Name: "lookup", Arguments: `{"id":"7"}`, Status: ToolCallSucceeded, Output: "order 7"},
			{Name: "refund", Arguments: `{"id":"7"}`, Status: ToolCallAwaitingApproval},
			{Name: "charge", Arguments: `{"cents":5}`, Status: ToolCallOutcomeUnknown, Error: "timeout"},
			{Name: "notify", Arguments: `{}`, Status: ToolCallRejected, RejectionMessage: "no"},
			{Name: "find", Arguments: `{"q":""}`, Status: ToolCallFailed, Error: "empty query"},
		},
			"[stepwise] The previous turn failed after these tool calls ran:\n" +
				"- lookup {\"id\":\"7\"} -> succeeded: order 7\n" +
				"- charge {\"cents\":5} -> outcome_unknown: " + OutcomeUnknownText + " (timeout)\n" +
				"- notify {} -> rejected: The user rejected the tool call: no\n" +
				"- find {\"q\":\"\"} -> failed: The tool call failed: empty query\n" +
				"Do not repeat these tool calls unless the user asks again."},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := TurnFailureNote(c.records); got != c.want {
				t.Errorf("TurnFailureNote =\n%s\nwant\n%s", got, c.want)
			}
		})
	}
}

func msgKey(m Message) string {
	if m.Role == RoleTool {
		return "tool:" + m.TurnID + ":" + m.ToolCallID + ":" + m.ToolName + ":" + m.Text
	}
	return string(m.Role) + ":" + m.TurnID + ":" + m.Text
}

func TestPairToolResults(t *testing.T) {
	user := func(turn, text string) Message {
		return Message{TurnID: turn, Role: RoleUser, Text: text}
	}
	ask := func(turn string, ids ...string) Message {
		m := Message{TurnID: turn, Role: RoleAssistant, Text: "calling"}
		for _, id := range ids {
			m.ToolCalls = append(m.ToolCalls, ToolCall{ID: id, Name: "tool_" + id, Arguments: "{}"})
		}
		return m
	}
	result := func(turn, id, text string) Message {
		return Message{TurnID: turn, Role: RoleTool, ToolCallID: id, ToolName: "tool_" + id, Text: text}
	}
	answer := func(turn, text string) Message {
		return Message{TurnID: turn, Role: RoleAssistant, Text: text}
	}
	unknown := func(turn, id string) Message { return result(turn, id, OutcomeUnknownText) }

	cases := []struct {
		name string
		in   []Message
		want []Message
	}{
		{"empty", nil, []Message{}},
		{"complete transcript unchanged",
			[]Message{user("t1", "hi"), ask("t1", "a", "b"), result("t1", "a", "A"), result("t1", "b", "B"), answer("t1", "done")},
			[]Message{user("t1", "hi"), ask("t1", "a", "b"), result("t1", "a", "A"), result("t1", "b", "B"), answer("t1", "done")}},
		{"orphaned call at the end",
			[]Message{user("t1", "hi"), ask("t1", "a")},
			[]Message{user("t1", "hi"), ask("t1", "a"), unknown("t1", "a")}},
		{"missing results go right after the existing ones",
			[]Message{user("t1", "hi"), ask("t1", "a", "b", "c"), result("t1", "b", "B"), user("t1", "note"), user("t2", "next")},
			[]Message{user("t1", "hi"), ask("t1", "a", "b", "c"), result("t1", "b", "B"), unknown("t1", "a"), unknown("t1", "c"), user("t1", "note"), user("t2", "next")}},
		{"a result of the same ID in another turn does not count",
			[]Message{user("t1", "hi"), ask("t1", "a"), result("t1", "a", "A"), answer("t1", "ok"), user("t2", "again"), ask("t2", "a"), user("t3", "later")},
			[]Message{user("t1", "hi"), ask("t1", "a"), result("t1", "a", "A"), answer("t1", "ok"), user("t2", "again"), ask("t2", "a"), unknown("t2", "a"), user("t3", "later")}},
		{"each model call of a turn is paired",
			[]Message{user("t1", "hi"), ask("t1", "a"), ask("t1", "b"), result("t1", "b", "B")},
			[]Message{user("t1", "hi"), ask("t1", "a"), unknown("t1", "a"), ask("t1", "b"), result("t1", "b", "B")}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			in := slices.Clone(c.in)
			got := PairToolResults(c.in)
			var gotKeys, wantKeys []string
			for _, m := range got {
				gotKeys = append(gotKeys, msgKey(m))
			}
			for _, m := range c.want {
				wantKeys = append(wantKeys, msgKey(m))
			}
			if !slices.Equal(gotKeys, wantKeys) {
				t.Errorf("PairToolResults =\n%v\nwant\n%v", gotKeys, wantKeys)
			}
			if got == nil {
				t.Error("PairToolResults returned nil")
			}
			for i := range in {
				if msgKey(in[i]) != msgKey(c.in[i]) {
					t.Errorf("the input was changed at %d", i)
				}
			}
		})
	}
}
