package telemetry

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"strings"
	"testing"

	"github.com/stepwise-run/stepwise/internal/session"
)

func TestEventLogNamesTheStepAndLeavesOutContent(t *testing.T) {
	var out bytes.Buffer
	log := EventLog{Logger: slog.New(slog.NewJSONHandler(&out, nil))}
	stamp := func(e session.Event) session.Event {
		e.StepExecutionID, e.Attempt = "7", 2
		return e
	}
	log.Write("s-1", stamp(session.NewEvent(session.EventTextDelta, "turn-1", map[string]string{"text": "the card number is 4242"})))
	log.Write("s-1", stamp(session.NewEvent(session.EventInterruptRaised, "turn-1", map[string]any{
		"interrupt_id": "i-1", "tool_call_id": "c1", "tool_name": "refund", "kind": "question",
		"question": "what is your password?", "arguments": `{"card":"4242"}`,
	})))
	log.Write("s-1", stamp(session.NewEvent(session.EventTurnFailed, "turn-1", map[string]any{"error": "the model said 4242"})))
	text := out.String()
	if strings.Contains(text, "4242") || strings.Contains(text, "password") {
		t.Fatalf("the log holds content:\n%s", text)
	}
	lines := strings.Split(strings.TrimSpace(text), "\n")
	if len(lines) != 2 {
		t.Fatalf("want 2 lines (no text delta), got:\n%s", text)
	}
	var raised map[string]any
	if err := json.Unmarshal([]byte(lines[0]), &raised); err != nil {
		t.Fatal(err)
	}
	for k, want := range map[string]any{"session": "s-1", "turn": "turn-1", "stepExecution": "7", "attempt": 2.0,
		"event": "interrupt_raised", "interrupt_id": "i-1", "tool_name": "refund", "kind": "question"} {
		if raised[k] != want {
			t.Errorf("%s = %v, want %v in %s", k, raised[k], want, lines[0])
		}
	}
	if !strings.Contains(lines[1], `"level":"WARN"`) {
		t.Errorf("a failed turn is not a warning: %s", lines[1])
	}
}
