package agent

import (
	"strings"
	"testing"
)

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
