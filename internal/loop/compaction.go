package loop

import (
	"context"
	"fmt"

	"github.com/stepwise-run/stepwise/internal/contract"
	"github.com/stepwise-run/stepwise/internal/session"
	"github.com/stepwise-run/stepwise/pkg/agent"
)

// compactionCutoff is the last message to summarize before this model
// call, or zero when the input is under the policy's threshold or nothing
// new can be summarized.
func (r *Runner) compactionCutoff(turn session.TurnContext, model agent.ModelChoice, req agent.ModelRequest) int64 {
	policy := r.def.Compaction
	if policy == nil {
		return 0
	}
	window := float64(policy.ContextWindowTokens)
	if float64(model.Client.EstimateInputTokens(req)) < policy.TriggerRatio*window {
		return 0
	}
	estimate := func(m session.Message) int64 {
		return model.Client.EstimateInputTokens(agent.ModelRequest{Input: []agent.Message{modelMessage(m)}})
	}
	cut := session.CompactionCutoff(turn.Messages, int64(policy.KeepRatio*window), estimate)
	if turn.Summary != nil && cut <= turn.Summary.LastSequence {
		return 0
	}
	return cut
}

// SummarizeContext makes one summary call for the messages through
// turn.CompactThrough, with the model the turn's settings choose and no
// tools. When the request would not fit the context window with room for
// the answer, the oldest messages are left out, whole responses at a time,
// and a note says how many.
func (r *Runner) SummarizeContext(ctx context.Context, turn session.TurnContext) (session.CompactionOutcome, error) {
	settings, err := contract.DecodeSessionSettings(turn.Settings)
	if err != nil {
		return session.CompactionOutcome{}, err
	}
	model, err := r.def.ChooseModel(settings)
	if err != nil {
		return session.CompactionOutcome{}, fmt.Errorf("choosing the model: %w", err)
	}
	var covered []session.Message
	for _, m := range turn.Messages {
		if m.Sequence <= turn.CompactThrough {
			covered = append(covered, m)
		}
	}
	groups := session.MessageGroups(session.PairToolResults(covered))
	build := func(omitted int, groups [][]session.Message) agent.ModelRequest {
		req := agent.ModelRequest{Instructions: session.ContextSummaryInstructions, Settings: model.Settings}
		if turn.Summary != nil {
			req.Input = append(req.Input, agent.Message{Role: agent.RoleUser, Text: session.SummaryNote(turn.Summary)})
		}
		if omitted > 0 {
			req.Input = append(req.Input, agent.Message{Role: agent.RoleUser, Text: session.SummaryOmissionNote(omitted)})
		}
		for _, g := range groups {
			// The summary call reads the text of the summarized items,
			// without their images.
			req.Input = append(req.Input, withoutImages(modelMessages(g))...)
		}
		req.Input = append(req.Input, agent.Message{Role: agent.RoleUser, Text: "Summarize the conversation above."})
		return req
	}
	budget := int64(0)
	if r.def.Compaction != nil {
		budget = r.def.Compaction.ContextWindowTokens - model.Settings.MaxOutputTokens
	}
	omitted := 0
	req := build(0, groups)
	for budget > 0 && len(groups) > 1 && model.Client.EstimateInputTokens(req) > budget {
		omitted += len(groups[0])
		groups = groups[1:]
		req = build(omitted, groups)
	}
	resp, err := model.Client.CallModel(ctx, req, agent.DiscardOutput)
	if err != nil {
		return session.CompactionOutcome{}, err
	}
	usage := resp.Usage
	if usage.ModelCalls == 0 {
		usage.ModelCalls = 1
	}
	return session.CompactionOutcome{Text: resp.Text(), Usage: storedUsage(usage)}, nil
}
