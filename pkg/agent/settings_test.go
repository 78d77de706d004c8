package agent

import (
	"encoding/json"
	"strings"
	"testing"
)

func TestEncodeSessionSettingsIsCompactAndUnescaped(t *testing.T) {
	raw, err := EncodeSessionSettings(SessionSettings{"model": "gpt-5", "note": "<ü>&"})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := string(raw), `{"model":"gpt-5","note":"<ü>&"}`; got != want {
		t.Errorf("encoded = %s, want %s", got, want)
	}
	if raw, _ := EncodeSessionSettings(nil); string(raw) != "{}" {
		t.Errorf("nil settings encode as %s", raw)
	}
}

func TestValidateSessionSettingsSize(t *testing.T) {
	// {"k":"<n bytes>"} is n+8 bytes of JSON.
	sized := func(n int) SessionSettings { return SessionSettings{"k": strings.Repeat("a", n-8)} }
	cases := []struct {
		name    string
		s       SessionSettings
		wantErr string
	}{
		{"empty", SessionSettings{}, ""},
		{"at the limit", sized(MaxSessionSettingsBytes), ""},
		{"one byte over", sized(MaxSessionSettingsBytes + 1), "session settings are 16385 bytes of JSON, more than the limit of 16384"},
		{"multi-byte characters count as bytes", SessionSettings{"k": strings.Repeat("ü", MaxSessionSettingsBytes/2)}, "more than the limit of 16384"},
		{"not JSON", SessionSettings{"f": func() {}}, "session settings are not JSON"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			err := ValidateSessionSettings(c.s)
			if c.wantErr == "" && err != nil || c.wantErr != "" && (err == nil || !strings.Contains(err.Error(), c.wantErr)) {
				t.Errorf("ValidateSessionSettings = %v, want %q", err, c.wantErr)
			}
		})
	}
}

func TestDecodeSessionSettings(t *testing.T) {
	cases := []struct {
		raw     string
		want    string
		wantErr bool
	}{
		{"", "{}", false},
		{"null", "{}", false},
		// Numbers keep their digits: settings are read, never rewritten.
		{`{"model":"large","n":12345678901234567890}`, `{"model":"large","n":12345678901234567890}`, false},
		{`[1]`, "", true},
		{`{"a":`, "", true},
	}
	for _, c := range cases {
		got, err := DecodeSessionSettings(json.RawMessage(c.raw))
		if (err != nil) != c.wantErr {
			t.Errorf("DecodeSessionSettings(%s) error = %v", c.raw, err)
			continue
		}
		if c.wantErr {
			continue
		}
		if encoded, _ := EncodeSessionSettings(got); got == nil || string(encoded) != c.want {
			t.Errorf("DecodeSessionSettings(%s) = %s, want %s", c.raw, encoded, c.want)
		}
	}
}

type namedClient struct{ ScriptedModel }

func TestModelChoicesResolve(t *testing.T) {
	small, large := &namedClient{}, &namedClient{}
	choices := ModelChoices{
		Default: ModelChoice{Client: small},
		Named:   map[string]ModelChoice{"large": {Client: large, Settings: ModelSettings{ReasoningEffort: "high"}}, "fast": {Client: small}},
	}
	cases := []struct {
		name     string
		settings SessionSettings
		want     ModelClient
		wantErr  string
	}{
		{"no settings", nil, small, ""},
		{"other settings", SessionSettings{"tone": "brief"}, small, ""},
		{"null model", SessionSettings{"model": nil}, small, ""},
		{"named", SessionSettings{"model": "large"}, large, ""},
		{"unknown", SessionSettings{"model": "secret-ish"}, nil, `session setting "model" names a model this agent does not offer; it offers: fast, large`},
		{"not a string", SessionSettings{"model": true}, nil, `session setting "model" must be a string naming one of: fast, large`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, err := choices.Resolve(c.settings)
			if c.wantErr != "" {
				if err == nil || err.Error() != c.wantErr {
					t.Errorf("Resolve error = %v, want %q", err, c.wantErr)
				}
				return
			}
			if err != nil || got.Client != c.want {
				t.Errorf("Resolve = %+v, %v", got, err)
			}
		})
	}
	if _, err := (ModelChoices{Default: ModelChoice{Client: small}}).Resolve(SessionSettings{"model": "large"}); err == nil ||
		!strings.Contains(err.Error(), "this agent offers no model choices") {
		t.Errorf("Resolve with no named models = %v", err)
	}
	if err := (ModelChoices{Named: map[string]ModelChoice{"x": {}}}).Validate(); err == nil ||
		!strings.Contains(err.Error(), "the default model has no client") || !strings.Contains(err.Error(), "model choice x has no client") {
		t.Errorf("Validate = %v", err)
	}
}
