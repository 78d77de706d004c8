package session

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/stepwise-run/stepwise/internal/contract"
)

// settingsOfSize is a settings object of exactly n bytes of compact JSON.
func settingsOfSize(n int) json.RawMessage {
	return json.RawMessage(`{"k":"` + strings.Repeat("a", n-8) + `"}`)
}

func TestSettingsUpdateRefusals(t *testing.T) {
	limit := contract.MaxSessionSettingsBytes + contract.SessionSettingsSizeTolerance
	cases := []struct {
		name     string
		started  bool
		settings string
		wantErr  string
	}{
		{"before the session starts", false, `{}`, "the session has not started"},
		{"null", true, `null`, "session settings are missing; send {} to clear them"},
		{"absent", true, ``, "session settings are missing"},
		{"an array", true, `[{"model":"x"}]`, "session settings must be a JSON object"},
		{"a string", true, `"large"`, "session settings must be a JSON object"},
		{"broken JSON", true, `{"model":`, "session settings are not a JSON object"},
		{"beyond the tolerance", true, string(settingsOfSize(limit + 1)), "session settings are 17409 bytes of JSON, more than the limit of 16384"},
		{"within the tolerance", true, string(settingsOfSize(limit)), ""},
		{"whitespace does not count", true, " {\"model\" :\n \"large\"} ", ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s := NewState("s1")
			if c.started {
				s.Start(StartInput{RequestID: "r", Settings: json.RawMessage(`{"model":"small"}`)})
			}
			before := string(s.Settings)
			err := s.UpdateSettings(json.RawMessage(c.settings))
			if c.wantErr == "" {
				if err != nil {
					t.Fatalf("UpdateSettings = %v", err)
				}
				return
			}
			if err == nil || !isRejection(err) || !strings.Contains(err.Error(), c.wantErr) {
				t.Errorf("UpdateSettings = %v, want a rejection containing %q", err, c.wantErr)
			}
			if string(s.Settings) != before {
				t.Errorf("a refused update changed the settings to %s", s.Settings)
			}
		})
	}
}

func TestCheckStartSettings(t *testing.T) {
	if err := CheckStartSettings(nil); err != nil {
		t.Errorf("no settings: %v", err)
	}
	if err := CheckStartSettings(json.RawMessage(`{"model":"large"}`)); err != nil {
		t.Errorf("an object: %v", err)
	}
	err := CheckStartSettings(json.RawMessage(`["x"]`))
	if err == nil || !strings.HasPrefix(err.Error(), InvalidStartSettingsReason+": ") {
		t.Errorf("an array: %v, want a reason starting with %q", err, InvalidStartSettingsReason)
	}
}

func TestSettingsReachTurnsAtTheirStart(t *testing.T) {
	s := NewState("s1")
	s.Start(StartInput{RequestID: "r", InitialMessage: "hi", Settings: json.RawMessage(`{ "model": "small" }`)})
	if got := string(s.Snapshot().SessionSettings); got != `{"model":"small"}` {
		t.Errorf("snapshot settings = %s", got)
	}
	tc, err := s.TurnContext("turn-1")
	if err != nil || string(tc.Settings) != `{"model":"small"}` {
		t.Fatalf("turn-1 settings = %s, %v", tc.Settings, err)
	}

	// An update during the turn is the next turn's: the running turn keeps
	// its copy, and the snapshot shows the update.
	if err := s.UpdateSettings(json.RawMessage(`{"model":"large"}`)); err != nil {
		t.Fatal(err)
	}
	if tc, _ := s.TurnContext("turn-1"); string(tc.Settings) != `{"model":"small"}` {
		t.Errorf("turn-1 settings after the update = %s", tc.Settings)
	}
	if got := string(s.Snapshot().SessionSettings); got != `{"model":"large"}` {
		t.Errorf("snapshot settings after the update = %s", got)
	}
	s.ApplyModelOutcome(completed("done"), testNow)
	if _, err := s.QueueUserMessage("again"); err != nil {
		t.Fatal(err)
	}
	s.BeginTurn()
	if tc, _ := s.TurnContext("turn-2"); string(tc.Settings) != `{"model":"large"}` {
		t.Errorf("turn-2 settings = %s", tc.Settings)
	}

	// {} clears them: the next turn has none.
	if err := s.UpdateSettings(json.RawMessage(`{}`)); err != nil {
		t.Fatal(err)
	}
	if got := string(s.Snapshot().SessionSettings); got != `{}` {
		t.Errorf("snapshot settings after clearing = %s", got)
	}
	s.ApplyModelOutcome(completed("done"), testNow)
	if _, err := s.QueueUserMessage("third"); err != nil {
		t.Fatal(err)
	}
	s.BeginTurn()
	if tc, _ := s.TurnContext("turn-3"); tc.Settings != nil {
		t.Errorf("turn-3 settings = %s, want none", tc.Settings)
	}
}
