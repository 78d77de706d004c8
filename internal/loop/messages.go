package loop

import (
	"github.com/stepwise-run/stepwise/internal/session"
	"github.com/stepwise-run/stepwise/pkg/agent"
)

// The conversions between the session's stored messages and the model
// interface's: field for field, so what a model client sees is what the
// session stored, and what it answered is stored as it answered.

func modelMessages(in []session.Message) []agent.Message {
	if in == nil {
		return nil
	}
	out := make([]agent.Message, 0, len(in))
	for _, m := range in {
		out = append(out, modelMessage(m))
	}
	return out
}

func modelMessage(m session.Message) agent.Message {
	out := agent.Message{
		Sequence: m.Sequence, TurnID: m.TurnID, Role: agent.Role(m.Role), Text: m.Text,
		ToolCallID: m.ToolCallID, ToolName: m.ToolName,
	}
	for _, img := range m.Images {
		out.Images = append(out.Images, agent.ImageReference(img))
	}
	if m.ToolCalls != nil {
		out.ToolCalls = make([]agent.ToolCall, 0, len(m.ToolCalls))
		for _, c := range m.ToolCalls {
			out.ToolCalls = append(out.ToolCalls, agent.ToolCall(c))
		}
	}
	if m.Output != nil {
		out.Output = make([]agent.OutputItem, 0, len(m.Output))
		for _, item := range m.Output {
			o := agent.OutputItem{Provider: item.Provider, API: item.API, Item: item.Item, Type: agent.OutputItemType(item.Type), Text: item.Text}
			if item.ToolCall != nil {
				c := agent.ToolCall(*item.ToolCall)
				o.ToolCall = &c
			}
			out.Output = append(out.Output, o)
		}
	}
	return out
}

func storedMessages(in []agent.Message) []session.Message {
	if in == nil {
		return nil
	}
	out := make([]session.Message, 0, len(in))
	for _, m := range in {
		out = append(out, storedMessage(m))
	}
	return out
}

func storedMessage(m agent.Message) session.Message {
	out := session.Message{
		Sequence: m.Sequence, TurnID: m.TurnID, Role: session.Role(m.Role), Text: m.Text,
		ToolCallID: m.ToolCallID, ToolName: m.ToolName,
	}
	for _, img := range m.Images {
		out.Images = append(out.Images, session.ImageReference(img))
	}
	if m.ToolCalls != nil {
		out.ToolCalls = make([]session.ToolCall, 0, len(m.ToolCalls))
		for _, c := range m.ToolCalls {
			out.ToolCalls = append(out.ToolCalls, session.ToolCall(c))
		}
	}
	if m.Output != nil {
		out.Output = make([]session.OutputItem, 0, len(m.Output))
		for _, item := range m.Output {
			o := session.OutputItem{Provider: item.Provider, API: item.API, Item: item.Item, Type: session.OutputItemType(item.Type), Text: item.Text}
			if item.ToolCall != nil {
				c := session.ToolCall(*item.ToolCall)
				o.ToolCall = &c
			}
			out.Output = append(out.Output, o)
		}
	}
	return out
}

// storedUsage is a provider's report of one call as the session counts
// it: a negative count is none.
func storedUsage(u agent.Usage) session.Usage { return session.Usage{}.Add(session.Usage(u)) }

func storedMetadata(m agent.CallMetadata) session.CallMetadata { return session.CallMetadata(m) }
