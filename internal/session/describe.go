package session

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
)

// Model-visible texts. They are part of the session's behaviour: a model
// reads them, and tests hold them.
const (
	// ToolCallNotRunPrefix starts the error of a call whose tool Step never
	// reached a worker: the model may call the tool again.
	ToolCallNotRunPrefix = "the tool did not run, so it is safe to call again"
	// OutcomeUnknownText is what the model sees for a call that may or may
	// not have taken effect, and for a stored call with no result.
	OutcomeUnknownText = "The outcome of this tool call is unknown: it may or may not have taken effect. Check before you repeat it."
	// DeclinedAnswerText is an ask_user call's result when the user declines.
	DeclinedAnswerText = "The user declined to answer."
	// QuestionDeadlineText is an ask_user call's result past its deadline.
	QuestionDeadlineText = "question deadline passed"
	// ApprovalDeadlineText is a rejected call's message past its deadline.
	ApprovalDeadlineText = "approval deadline passed"
	// TurnFailureNoteHeader starts the note a failed turn leaves.
	TurnFailureNoteHeader = "[stepwise] The previous turn failed after these tool calls ran:"
	// TurnFailureNoteFooter ends it.
	TurnFailureNoteFooter = "Do not repeat these tool calls unless the user asks again."
	// ToolCallIDError fails a turn whose model sent a bad tool call ID.
	ToolCallIDError = "tool call IDs must be non-empty, contain no '/', and be unique within one turn"
)

// ModelCallLimitResult is the result of a tool call made after the turn's
// model call limit.
func ModelCallLimitResult(limit int) string {
	return fmt.Sprintf("The tool call was not run: this turn reached its limit of %d model calls.", limit)
}

// DescribeOutcome renders a final record as the model sees it.
func DescribeOutcome(r ToolCallRecord) string {
	switch r.Status {
	case ToolCallSucceeded:
		return r.Output
	case ToolCallFailed:
		return "The tool call failed: " + r.Error
	case ToolCallRejected:
		if r.Output != "" {
			return r.Output
		}
		if r.RejectionMessage != "" {
			return "The user rejected the tool call: " + r.RejectionMessage
		}
		return "The user rejected the tool call."
	default:
		if r.Error != "" {
			return OutcomeUnknownText + " (" + r.Error + ")"
		}
		return OutcomeUnknownText
	}
}

// TurnFailureNote lists the final records of a failed turn, so the next
// turn's model does not repeat a write. It is empty when no call is final.
func TurnFailureNote(records []*ToolCallRecord) string {
	var lines []string
	for _, r := range records {
		if r.Status.Final() {
			lines = append(lines, fmt.Sprintf("- %s %s -> %s: %s", r.Name, r.Arguments, r.Status, DescribeOutcome(*r)))
		}
	}
	if len(lines) == 0 {
		return ""
	}
	return TurnFailureNoteHeader + "\n" + strings.Join(lines, "\n") + "\n" + TurnFailureNoteFooter
}

// PairToolResults returns the messages with every assistant tool call
// followed by a result: a call with no stored result gets the outcome-unknown
// text, so an orphaned call never reaches a provider.
func PairToolResults(messages []Message) []Message {
	answered := map[string]bool{}
	for _, m := range messages {
		if m.Role == RoleTool {
			answered[m.TurnID+"\x00"+m.ToolCallID] = true
		}
	}
	out := make([]Message, 0, len(messages))
	for i := 0; i < len(messages); i++ {
		m := messages[i]
		out = append(out, m)
		if m.Role != RoleAssistant || len(m.ToolCalls) == 0 {
			continue
		}
		// Results follow their calls; the missing ones go right after the
		// results that are there.
		for i+1 < len(messages) && messages[i+1].Role == RoleTool {
			i++
			out = append(out, messages[i])
		}
		for _, c := range m.ToolCalls {
			if !answered[m.TurnID+"\x00"+c.ID] {
				out = append(out, Message{TurnID: m.TurnID, Role: RoleTool, ToolCallID: c.ID, ToolName: c.Name, Text: OutcomeUnknownText})
			}
		}
	}
	return out
}

// jsonText encodes a model-visible result with its fields in declaration
// order and without HTML escaping, so the model reads the text as written.
func jsonText(v any) string {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return "{}"
	}
	return strings.TrimRight(buf.String(), "\n")
}
