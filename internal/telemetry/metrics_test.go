package telemetry

import (
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/stepwise-run/stepwise/internal/session"
)

func TestResolutionNamesHowAnInterruptEnded(t *testing.T) {
	for _, c := range []struct {
		kind                          string
		approved, answered, cancelled bool
		want                          string
	}{
		{"approval", true, false, false, "approved"},
		{"approval", false, false, false, "rejected"},
		{"approval", false, false, true, "cancelled"},
		{"question", false, true, false, "answered"},
		{"question", false, false, false, "declined"},
		{"question", false, false, true, "cancelled"},
	} {
		if got := resolution(c.kind, c.approved, c.answered, c.cancelled); got != c.want {
			t.Errorf("resolution(%+v) = %s, want %s", c, got, c.want)
		}
	}
}

func TestAnUnreadableEventIsCountedNotFatal(t *testing.T) {
	m, err := NewWorkerMetrics("Support")
	if err != nil {
		t.Fatal(err)
	}
	m.Write("s1", session.Event{Type: session.EventToolCallFinished, Payload: []byte("{not json")})
	m.Write("s1", session.NewEvent(session.EventToolCallFinished, "turn-1", map[string]any{"status": "outcome_unknown", "effect": "non_idempotent_write"}))
	rec := httptest.NewRecorder()
	m.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	body := rec.Body.String()
	for _, want := range []string{
		`stepwise_session_events_unreadable_total{flow_type="Support"} 1`,
		`stepwise_session_tool_calls_total{effect="non_idempotent_write",flow_type="Support",status="outcome_unknown"} 1`,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("the scrape lacks %s:\n%s", want, body)
		}
	}
}
