package session

import (
	"fmt"
	"slices"
	"strconv"
	"testing"
)

// conversation numbers messages from 1: "u" user, "a" answer, "c<n>" a
// response with n tool calls, followed by "r" results.
func conversation(kinds ...string) []Message {
	var out []Message
	for _, k := range kinds {
		m := Message{Sequence: int64(len(out) + 1), Text: "x"}
		switch {
		case k == "u":
			m.Role = RoleUser
		case k == "a":
			m.Role = RoleAssistant
		case k[0] == 'c':
			m.Role = RoleAssistant
			n, err := strconv.Atoi(k[1:])
			if err != nil {
				panic(err)
			}
			for i := range n {
				m.ToolCalls = append(m.ToolCalls, ToolCall{ID: fmt.Sprintf("t%d-%d", m.Sequence, i)})
			}
		case k == "r":
			m.Role = RoleTool
			// Answer the oldest unanswered call.
			answered := map[string]bool{}
			for _, prev := range out {
				answered[prev.ToolCallID] = true
			}
			for i := len(out) - 1; i >= 0; i-- {
				for _, c := range out[i].ToolCalls {
					if !answered[c.ID] {
						m.ToolCallID = c.ID
					}
				}
				if m.ToolCallID != "" {
					break
				}
			}
		}
		out = append(out, m)
	}
	return out
}

func TestCompactionCutoffNeverSeparatesACallFromItsResult(t *testing.T) {
	one := func(Message) int64 { return 1 }
	cases := []struct {
		name  string
		msgs  []Message
		keep  int64
		want  int64
		cutAt []int
	}{
		{"after answers", conversation("u", "a", "u", "a", "u", "a"), 2, 4, []int{1, 3, 5}},
		{"keeping everything possible still cuts the latest", conversation("u", "a", "u", "a"), 0, 4, []int{1, 3}},
		{"after a whole response with its results", conversation("u", "c2", "r", "r", "a", "u", "a"), 3, 4, []int{3, 4, 6}},
		{"never inside a response waiting for results", conversation("u", "c2", "r"), 0, 0, nil},
		{"no model response yet", conversation("u", "u"), 0, 0, nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := CompactionCutoff(c.msgs, c.keep, one); got != c.want {
				t.Errorf("CompactionCutoff = %d, want %d", got, c.want)
			}
			if got := cutPoints(c.msgs); !slices.Equal(got, c.cutAt) {
				t.Errorf("cut points = %v, want %v", got, c.cutAt)
			}
		})
	}
}

func TestMessageGroupsKeepResponsesWhole(t *testing.T) {
	groups := MessageGroups(conversation("u", "c2", "r", "r", "a", "u"))
	var sizes []int
	for _, g := range groups {
		sizes = append(sizes, len(g))
	}
	if !slices.Equal(sizes, []int{1, 3, 1, 1}) {
		t.Errorf("group sizes = %v", sizes)
	}
}

// longSession has n stored messages and runs a turn.
func longSession(t *testing.T, n int) *State {
	t.Helper()
	s := inTurn(t, "u1")
	for i := 1; i < n; i++ {
		s.store(Message{Role: RoleAssistant, Text: fmt.Sprintf("m%d", i+1)})
	}
	return s
}

func TestCompactionAndRetention(t *testing.T) {
	s := longSession(t, 200)
	opts := TurnOptions{RetainedMessages: 100}
	_, events := s.ApplyModelOutcome(ModelOutcome{Kind: OutcomeCompactionNeeded, CompactThrough: 150, Options: opts}, testNow)
	wantEvents(t, events, EventCompactionStarted)
	if s.Status != StatusCompactingContext {
		t.Fatalf("status = %s", s.Status)
	}
	tc, err := s.TurnContext("turn-1")
	if err != nil || tc.CompactThrough != 150 || len(tc.Messages) != 200 {
		t.Fatalf("CompactContext's turn context: through %d, %d messages, %v", tc.CompactThrough, len(tc.Messages), err)
	}
	events = s.ApplySummary(CompactionOutcome{Text: "earlier: 150 messages", Usage: Usage{ModelCalls: 1, InputTokens: 9}}, testNow)
	wantEvents(t, events, EventUsageRecorded, EventCompactionFinished)
	if s.Status != StatusRunningModel || s.Summary.LastSequence != 150 || s.Summary.Generation != 1 || s.Usage.ModelCalls != 1 {
		t.Fatalf("after the summary: status %s, summary %+v, usage %+v", s.Status, s.Summary, s.Usage)
	}
	// Retention deletes whole blocks the summary covers while 100 messages
	// stay after them: 96 messages (three blocks).
	if s.DeletedBeforeSequence != 97 || s.Messages()[0].Sequence != 97 || len(s.Messages()) != 104 {
		t.Fatalf("after retention: deleted before %d, first %d, %d stored", s.DeletedBeforeSequence, s.Messages()[0].Sequence, len(s.Messages()))
	}
	tc, _ = s.TurnContext("turn-1")
	if len(tc.Messages) != 50 || tc.Messages[0].Sequence != 151 || tc.Summary.Text != "earlier: 150 messages" {
		t.Errorf("the model input after the summary: %d messages from %d, summary %+v", len(tc.Messages), tc.Messages[0].Sequence, tc.Summary)
	}
	page := s.ListMessages(ListMessagesRequest{BeforeSequence: 100, Limit: 200})
	if page.DeletedBeforeSequence != 97 || page.FirstSequence != 97 || len(page.Messages) != 3 || page.NextBeforeSequence != 0 {
		t.Errorf("the oldest page = %d messages, first %d, deleted before %d, next %d",
			len(page.Messages), page.FirstSequence, page.DeletedBeforeSequence, page.NextBeforeSequence)
	}

	// A second request at or before the summary fails the turn rather than
	// loop.
	_, events = s.ApplyModelOutcome(ModelOutcome{Kind: OutcomeCompactionNeeded, CompactThrough: 150, Options: opts}, testNow)
	if s.Turn != nil || !slices.Contains(eventTypes(events), EventTurnFailed) {
		t.Errorf("a repeated compaction request = %v, turn %+v", eventTypes(events), s.Turn)
	}
}

func TestRetentionKeepsEverythingWithoutALimitOrASummary(t *testing.T) {
	s := longSession(t, 200)
	s.applyRetention(0)
	s.Summary = &ContextSummary{LastSequence: 190}
	s.applyRetention(0)
	if len(s.Messages()) != 200 || s.DeletedBeforeSequence != 0 {
		t.Errorf("%d messages, deleted before %d", len(s.Messages()), s.DeletedBeforeSequence)
	}
	s.Summary = nil
	s.applyRetention(10)
	if len(s.Messages()) != 200 {
		t.Errorf("retention without a summary deleted messages: %d left", len(s.Messages()))
	}
}
