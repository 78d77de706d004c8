package loop

import (
	"context"
	"slices"
	"strings"
	"testing"

	"github.com/stepwise-run/stepwise/internal/session"
	"github.com/stepwise-run/stepwise/pkg/agent"
)

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
