package telemetry

import (
	"context"
	"encoding/json"
	"log/slog"

	"github.com/stepwise-run/stepwise/internal/session"
)

// EventLog writes one structured log line per session lifecycle event, with
// the session, turn, Step execution and attempt that let a reader find the
// Step in the engine's history. It logs no content: no message or
// streamed text, no tool arguments, output or error text, no question,
// only names, IDs, statuses and counts.
type EventLog struct {
	Logger *slog.Logger
}

// loggedFields are the payload fields a log line may carry, by event: IDs,
// names, statuses and counts, never text a person or a model wrote.
var loggedFields = map[session.EventType][]string{
	session.EventTurnStarted:          {"sequence"},
	session.EventTurnCompleted:        {"message_count"},
	session.EventTurnFailed:           nil,
	session.EventTurnCancelled:        {"message_count"},
	session.EventTurnSteered:          nil,
	session.EventToolCallDeferred:     {"tool_call_id", "tool_name", "effect", "requires_approval"},
	session.EventToolCallStarted:      {"tool_call_id", "tool_name"},
	session.EventToolCallFinished:     {"tool_call_id", "tool_name", "status", "effect"},
	session.EventToolTaskStarted:      {"tool_call_id", "task_id"},
	session.EventInterruptRaised:      {"interrupt_id", "tool_call_id", "tool_name", "kind"},
	session.EventInterruptResolved:    {"interrupt_id", "kind", "approved", "answered"},
	session.EventTimerStarted:         {"tool_call_id"},
	session.EventUsageRecorded:        {"provider", "model"},
	session.EventPlanUpdated:          {"revision", "status", "task_count"},
	session.EventPlanExecutionStarted: {"revision"},
	session.EventCompactionStarted:    {"through_sequence"},
	session.EventCompactionFinished:   {"generation", "through_sequence"},
}

// Write logs a lifecycle event; streamed text and reasoning are not
// logged at all.
func (l EventLog) Write(sessionID string, e session.Event) {
	fields, ok := loggedFields[e.Type]
	if !ok || l.Logger == nil {
		return
	}
	attrs := []slog.Attr{
		slog.String("session", sessionID), slog.String("event", string(e.Type)),
		slog.String("turn", e.TurnID), slog.String("stepExecution", e.StepExecutionID), slog.Int("attempt", e.Attempt),
	}
	var payload map[string]json.RawMessage
	if len(fields) > 0 && json.Unmarshal(e.Payload, &payload) == nil {
		for _, f := range fields {
			raw, ok := payload[f]
			if !ok {
				continue
			}
			var v any
			if json.Unmarshal(raw, &v) == nil && v != nil {
				attrs = append(attrs, slog.Any(f, v))
			}
		}
	}
	if e.Type == session.EventUsageRecorded {
		var p struct {
			Recorded session.Usage `json:"recorded"`
		}
		if json.Unmarshal(e.Payload, &p) == nil {
			attrs = append(attrs, slog.Int64("inputTokens", p.Recorded.InputTokens), slog.Int64("outputTokens", p.Recorded.OutputTokens))
		}
	}
	level := slog.LevelInfo
	if e.Type == session.EventTurnFailed {
		level = slog.LevelWarn
	}
	l.Logger.LogAttrs(context.Background(), level, "session event", attrs...)
}
