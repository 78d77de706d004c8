package session

import (
	"fmt"
	"time"
)

// ContextSummary summarizes the session's messages from the first through
// LastSequence; the model sees it instead of them.
type ContextSummary struct {
	Generation    int       `json:"generation"`
	FirstSequence int64     `json:"firstSequence"`
	LastSequence  int64     `json:"lastSequence"`
	Text          string    `json:"text"`
	CreatedAt     time.Time `json:"createdAt"`
}

// Texts of compaction.
const (
	// ContextSummaryNoteHeader starts the note that gives the model the
	// summary in place of the messages it covers.
	ContextSummaryNoteHeader = "[stepwise] Summary of the earlier conversation:"
	// ContextSummaryInstructions are the instructions of a summary call.
	ContextSummaryInstructions = "Summarize the conversation so far for the assistant that continues it. " +
		"Keep every fact, decision, open question, commitment and tool result it will need, " +
		"and say which tool calls ran and what they did, so none is repeated. Write plain text."
)

// SummaryOmissionNote says that the oldest messages of a summary request did
// not fit in it.
func SummaryOmissionNote(omitted int) string {
	return fmt.Sprintf("[stepwise] %d earlier messages did not fit in this request and are left out.", omitted)
}

// CompactionOutcome is what a CompactContext Step returns.
type CompactionOutcome struct {
	Text    string `json:"text"`
	Usage   Usage  `json:"usage"`
	Attempt int    `json:"attempt,omitempty"`
}

// requestCompaction is a RunModel Step that found the model input past the
// compaction threshold: the session compacts before the next model call.
func (s *State) requestCompaction(through int64) []Event {
	s.Turn.CompactThrough = through
	s.Status = StatusCompactingContext
	return []Event{NewEvent(EventCompactionStarted, s.Turn.ID, map[string]any{"through_sequence": through})}
}

// ApplySummary is CompactContext's commit: the summary replaces the
// messages it covers in every later model input, its usage is recorded, and
// retention may delete what it covers.
func (s *State) ApplySummary(out CompactionOutcome, now time.Time) []Event {
	turn := s.Turn
	if turn == nil || s.Status != StatusCompactingContext {
		return nil
	}
	generation := 1
	if s.Summary != nil {
		generation = s.Summary.Generation + 1
	}
	s.Summary = &ContextSummary{Generation: generation, FirstSequence: 1, LastSequence: turn.CompactThrough, Text: out.Text, CreatedAt: now}
	turn.CompactThrough = 0
	s.Status = StatusRunningModel
	var events []Event
	if out.Usage != (Usage{}) {
		turn.Usage = turn.Usage.Add(out.Usage)
		s.Usage = s.Usage.Add(out.Usage)
		events = append(events, usageRecorded(turn.ID, out.Usage, s.Usage, CallMetadata{}))
	}
	events = append(events, NewEvent(EventCompactionFinished, turn.ID, map[string]any{
		"generation": generation, "through_sequence": s.Summary.LastSequence,
	}))
	s.applyRetention(turn.Options.RetainedMessages)
	return events
}

// CompactionCutoff returns the last message to summarize so that the
// messages after it fit keepTokens, or zero when no cut is possible. A cut
// falls only after a whole model response: an answer without tool calls, or
// the last result of a response whose tool calls all have stored results,
// so a call is never separated from its result. When no cut leaves little
// enough, the latest cut is taken.
func CompactionCutoff(messages []Message, keepTokens int64, estimate func(Message) int64) int64 {
	cuts := cutPoints(messages)
	if len(cuts) == 0 {
		return 0
	}
	// after[i] is the tokens of messages[i+1:].
	after := make([]int64, len(messages))
	var sum int64
	for i := len(messages) - 1; i >= 0; i-- {
		after[i] = sum
		sum += estimate(messages[i])
	}
	for _, i := range cuts {
		if after[i] <= keepTokens {
			return messages[i].Sequence
		}
	}
	return messages[cuts[len(cuts)-1]].Sequence
}

// cutPoints are the indexes after which a summary may end, oldest first.
func cutPoints(messages []Message) []int {
	var cuts []int
	for i := 0; i < len(messages); i++ {
		m := messages[i]
		if m.Role != RoleAssistant {
			continue
		}
		if len(m.ToolCalls) == 0 {
			cuts = append(cuts, i)
			continue
		}
		pending := map[string]bool{}
		for _, c := range m.ToolCalls {
			pending[c.ID] = true
		}
		j := i + 1
		for ; j < len(messages) && messages[j].Role == RoleTool && len(pending) > 0; j++ {
			delete(pending, messages[j].ToolCallID)
		}
		if len(pending) == 0 {
			cuts = append(cuts, j-1)
		}
		i = j - 1
	}
	return cuts
}

// MessageGroups splits messages into the units a summary request may leave
// out from the oldest: a model response with its tool results, or any other
// single message.
func MessageGroups(messages []Message) [][]Message {
	var groups [][]Message
	for i := 0; i < len(messages); {
		j := i + 1
		if messages[i].Role == RoleAssistant && len(messages[i].ToolCalls) > 0 {
			for j < len(messages) && messages[j].Role == RoleTool {
				j++
			}
		}
		groups = append(groups, messages[i:j])
		i = j
	}
	return groups
}

// SummaryNote gives the model the summary in place of the messages it
// covers.
func SummaryNote(summary *ContextSummary) string {
	if summary == nil {
		return ""
	}
	return ContextSummaryNoteHeader + "\n" + summary.Text
}
