package session

import (
	"encoding/json"
	"slices"
	"testing"
	"time"

	"github.com/stepwise-run/stepwise/internal/contract"
	"github.com/stepwise-run/stepwise/pkg/agent"
)

func TestParseAskUser(t *testing.T) {
	cases := []struct {
		name      string
		arguments string
		want      AskUserArguments
		wantErr   string
	}{
		{name: "question only allows free text",
			arguments: `{"question":"Which order?"}`,
			want:      AskUserArguments{Question: "Which order?", AllowsFreeText: true}},
		{name: "choices default to no free text",
			arguments: `{"question":"Ship?","choices":["yes","no"]}`,
			want:      AskUserArguments{Question: "Ship?", Choices: []string{"yes", "no"}}},
		{name: "choices with free text allowed",
			arguments: `{"question":"Ship?","choices":["yes","no"],"allows_free_text":true}`,
			want:      AskUserArguments{Question: "Ship?", Choices: []string{"yes", "no"}, AllowsFreeText: true}},
		{name: "null choices and null free text are absent",
			arguments: `{"question":"Which order?","choices":null,"allows_free_text":null}`,
			want:      AskUserArguments{Question: "Which order?", AllowsFreeText: true}},
		{name: "null free text with choices keeps the choices default",
			arguments: `{"question":"Ship?","choices":["yes"],"allows_free_text":null}`,
			want:      AskUserArguments{Question: "Ship?", Choices: []string{"yes"}}},
		{name: "empty choices allow free text",
			arguments: `{"question":"Which order?","choices":[]}`,
			want:      AskUserArguments{Question: "Which order?", Choices: []string{}, AllowsFreeText: true}},
		{name: "not JSON",
			arguments: `{"question":`,
			wantErr:   "invalid ask_user arguments: arguments must be a JSON object"},
		{name: "JSON null",
			arguments: `null`,
			wantErr:   "invalid ask_user arguments: arguments must be a JSON object"},
		{name: "JSON array",
			arguments: `["Which order?"]`,
			wantErr:   "invalid ask_user arguments: arguments must be a JSON object"},
		{name: "unknown argument",
			arguments: `{"question":"Which order?","urgent":true}`,
			wantErr:   `invalid ask_user arguments: unknown argument "urgent"`},
		{name: "missing question",
			arguments: `{"choices":["a"]}`,
			wantErr:   "invalid ask_user arguments: question must be a non-blank string"},
		{name: "null question",
			arguments: `{"question":null}`,
			wantErr:   "invalid ask_user arguments: question must be a non-blank string"},
		{name: "blank question",
			arguments: `{"question":"   "}`,
			wantErr:   "invalid ask_user arguments: question must be a non-blank string"},
		{name: "question not a string",
			arguments: `{"question":42}`,
			wantErr:   "invalid ask_user arguments: question must be a non-blank string"},
		{name: "choices not a list",
			arguments: `{"question":"Ship?","choices":"yes"}`,
			wantErr:   "invalid ask_user arguments: choices must be a list of strings"},
		{name: "choices not strings",
			arguments: `{"question":"Ship?","choices":[1,2]}`,
			wantErr:   "invalid ask_user arguments: choices must be a list of strings"},
		{name: "blank choice",
			arguments: `{"question":"Ship?","choices":["yes"," "]}`,
			wantErr:   "invalid ask_user arguments: choices must not be blank"},
		{name: "free text not a boolean",
			arguments: `{"question":"Ship?","allows_free_text":"yes"}`,
			wantErr:   "invalid ask_user arguments: allows_free_text must be a boolean"},
		{name: "no choices and no free text",
			arguments: `{"question":"Ship?","allows_free_text":false}`,
			wantErr:   "invalid ask_user arguments: a question without choices must allow free text"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, err := ParseAskUser(c.arguments)
			if c.wantErr != "" {
				if err == nil || err.Error() != c.wantErr {
					t.Fatalf("ParseAskUser error = %v, want %q", err, c.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("ParseAskUser: %v", err)
			}
			if got.Question != c.want.Question || got.AllowsFreeText != c.want.AllowsFreeText || !slices.Equal(got.Choices, c.want.Choices) {
				t.Errorf("ParseAskUser = %+v, want %+v", got, c.want)
			}
		})
	}
}

func TestParseDurableWait(t *testing.T) {
	const maxWait = time.Hour
	bounds := "invalid durable_wait arguments: duration_seconds must be a whole number of seconds from 1 to 3600"
	cases := []struct {
		name      string
		arguments string
		want      DurableWaitArguments
		wantErr   string
	}{
		{name: "shortest wait", arguments: `{"duration_seconds":1,"reason":"poll"}`,
			want: DurableWaitArguments{Duration: time.Second, Reason: "poll"}},
		{name: "longest wait", arguments: `{"duration_seconds":3600,"reason":"poll"}`,
			want: DurableWaitArguments{Duration: time.Hour, Reason: "poll"}},
		{name: "whole number written as a float", arguments: `{"duration_seconds":30.0,"reason":"poll"}`,
			want: DurableWaitArguments{Duration: 30 * time.Second, Reason: "poll"}},
		{name: "empty reason", arguments: `{"duration_seconds":5,"reason":""}`,
			want: DurableWaitArguments{Duration: 5 * time.Second}},
		{name: "zero", arguments: `{"duration_seconds":0,"reason":"poll"}`, wantErr: bounds},
		{name: "negative", arguments: `{"duration_seconds":-5,"reason":"poll"}`, wantErr: bounds},
		{name: "fraction", arguments: `{"duration_seconds":1.5,"reason":"poll"}`, wantErr: bounds},
		{name: "over the maximum", arguments: `{"duration_seconds":3601,"reason":"poll"}`, wantErr: bounds},
		{name: "huge", arguments: `{"duration_seconds":1e300,"reason":"poll"}`, wantErr: bounds},
		{name: "string duration", arguments: `{"duration_seconds":"5","reason":"poll"}`, wantErr: bounds},
		{name: "missing duration", arguments: `{"reason":"poll"}`, wantErr: bounds},
		{name: "null duration is missing", arguments: `{"duration_seconds":null,"reason":"poll"}`, wantErr: bounds},
		{name: "missing reason", arguments: `{"duration_seconds":5}`,
			wantErr: "invalid durable_wait arguments: reason must be a string"},
		{name: "null reason is missing", arguments: `{"duration_seconds":5,"reason":null}`,
			wantErr: "invalid durable_wait arguments: reason must be a string"},
		{name: "reason not a string", arguments: `{"duration_seconds":5,"reason":7}`,
			wantErr: "invalid durable_wait arguments: reason must be a string"},
		{name: "unknown argument", arguments: `{"duration_seconds":5,"reason":"poll","unit":"s"}`,
			wantErr: `invalid durable_wait arguments: unknown argument "unit"`},
		{name: "not JSON", arguments: `5`,
			wantErr: "invalid durable_wait arguments: arguments must be a JSON object"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, err := ParseDurableWait(c.arguments, maxWait)
			if c.wantErr != "" {
				if err == nil || err.Error() != c.wantErr {
					t.Fatalf("ParseDurableWait error = %v, want %q", err, c.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("ParseDurableWait: %v", err)
			}
			if got != c.want {
				t.Errorf("ParseDurableWait = %+v, want %+v", got, c.want)
			}
		})
	}
}

func TestParseDurableWaitDefaultMaximumIsAYear(t *testing.T) {
	year := `{"duration_seconds":31536000,"reason":"anniversary"}`
	got, err := ParseDurableWait(year, contract.DefaultMaxDurableWait)
	if err != nil || got.Duration != contract.DefaultMaxDurableWait {
		t.Errorf("a 365-day wait = %+v, %v", got, err)
	}
	if _, err := ParseDurableWait(`{"duration_seconds":31536001,"reason":"x"}`, contract.DefaultMaxDurableWait); err == nil {
		t.Error("a wait one second over 365 days was accepted")
	}
}

func TestQuestionCheckAnswer(t *testing.T) {
	freeText := Question{Text: "Which order?", AllowsFreeText: true}
	choicesOnly := Question{Text: "Ship?", Choices: []string{"yes", "no"}}
	choicesAndText := Question{Text: "Ship?", Choices: []string{"yes", "no"}, AllowsFreeText: true}
	cases := []struct {
		name     string
		question Question
		answer   string
		ok       bool
	}{
		{"free text", freeText, "order 7", true},
		{"blank free text", freeText, "  ", false},
		{"empty answer", freeText, "", false},
		{"a choice", choicesOnly, "no", true},
		{"not a choice", choicesOnly, "maybe", false},
		{"a choice in another case", choicesOnly, "Yes", false},
		{"blank with choices", choicesOnly, "", false},
		{"free text beside choices", choicesAndText, "later", true},
		{"blank beside choices", choicesAndText, " ", false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			err := c.question.CheckAnswer(c.answer)
			if (err == nil) != c.ok {
				t.Errorf("CheckAnswer(%q) = %v, want ok=%v", c.answer, err, c.ok)
			}
		})
	}
}

func TestBuiltInToolDefinitionsAreOfferable(t *testing.T) {
	for _, b := range []agent.BuiltInTool{agent.BuiltInAskUser, agent.BuiltInDurableWait} {
		def, ok := BuiltInToolDefinitions[b]
		if !ok {
			t.Fatalf("no definition for %s", b)
		}
		if def.Name != string(b) || def.Description == "" {
			t.Errorf("%s definition = %+v", b, def)
		}
		var schema struct {
			Type     string         `json:"type"`
			Required []string       `json:"required"`
			Props    map[string]any `json:"properties"`
		}
		if err := json.Unmarshal(def.Parameters, &schema); err != nil || schema.Type != "object" {
			t.Errorf("%s parameters %s: %v", b, def.Parameters, err)
		}
		for _, r := range schema.Required {
			if _, ok := schema.Props[r]; !ok {
				t.Errorf("%s requires %s, which is not a property", b, r)
			}
		}
	}
	for _, b := range []agent.BuiltInTool{agent.BuiltInAskUser, agent.BuiltInDurableWait, agent.BuiltInWriteTodos} {
		if _, ok := BuiltInToolDefinitions[b]; !ok {
			t.Errorf("%s has no definition", b)
		}
	}
}
