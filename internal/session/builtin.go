package session

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/stepwise-run/stepwise/pkg/agent"
)

// BuiltInToolDefinitions are the built-in tools as offered to a model.
var BuiltInToolDefinitions = map[agent.BuiltInTool]agent.ToolDefinition{
	agent.BuiltInAskUser: {
		Name:        string(agent.BuiltInAskUser),
		Description: "Ask the user a question and wait for the answer. Offer choices when the answer is one of a few options.",
		Parameters: json.RawMessage(`{"type":"object","properties":{` +
			`"question":{"type":"string","description":"The question to ask."},` +
			`"choices":{"type":["array","null"],"items":{"type":"string"},"description":"Answers the user may pick from."},` +
			`"allows_free_text":{"type":["boolean","null"],"description":"Whether the user may answer with other text; defaults to true without choices and false with them."}},` +
			`"required":["question"],"additionalProperties":false}`),
	},
	agent.BuiltInDurableWait: {
		Name:        string(agent.BuiltInDurableWait),
		Description: "Wait for a number of seconds before continuing, without holding any resources, for example before checking on a slow job again.",
		Parameters: json.RawMessage(`{"type":"object","properties":{` +
			`"duration_seconds":{"type":"integer","minimum":1,"description":"How long to wait, in whole seconds."},` +
			`"reason":{"type":"string","description":"Why the wait is needed."}},` +
			`"required":["duration_seconds","reason"],"additionalProperties":false}`),
	},
	agent.BuiltInWriteTodos: {
		Name: string(agent.BuiltInWriteTodos),
		Description: "Replace the plan with this list of tasks, as a whole. Keep each task's status current: " +
			"pending, in_progress or completed. An empty list clears the plan.",
		Parameters: json.RawMessage(`{"type":"object","properties":{` +
			`"todos":{"type":"array","items":{"type":"object","properties":{` +
			`"content":{"type":"string","description":"What the task does."},` +
			`"status":{"type":"string","enum":["pending","in_progress","completed"]}},` +
			`"required":["content","status"],"additionalProperties":false}}},` +
			`"required":["todos"],"additionalProperties":false}`),
	},
}

// AskUserArguments are the decoded arguments of an ask_user call.
type AskUserArguments struct {
	Question       string
	Choices        []string
	AllowsFreeText bool
}

// DurableWaitArguments are the decoded arguments of a durable_wait call.
type DurableWaitArguments struct {
	Duration time.Duration
	Reason   string
}

// invalidBuiltIn formats the failure of a built-in call with bad arguments.
func invalidBuiltIn(tool agent.BuiltInTool, reason string) error {
	return fmt.Errorf("invalid %s arguments: %s", tool, reason)
}

// sortedKeys is the keys of a map in order. Workflow code ranges over
// these, never over a map, whose order Go randomizes.
func sortedKeys[V any](m map[string]V) []string {
	return slices.Sorted(maps.Keys(m)) //workflowcheck:ignore the keys are sorted before anyone reads them
}

// decodeObject decodes built-in arguments, treating null as absent because
// providers in strict-schema mode send null for optional arguments.
func decodeObject(tool agent.BuiltInTool, arguments string, allowed ...string) (map[string]json.RawMessage, error) {
	var obj map[string]json.RawMessage
	if err := json.Unmarshal([]byte(arguments), &obj); err != nil || obj == nil {
		return nil, invalidBuiltIn(tool, "arguments must be a JSON object")
	}
	// Sorted, so the argument an error names never depends on map order.
	for _, k := range sortedKeys(obj) {
		v := obj[k]
		if string(v) == "null" {
			delete(obj, k)
			continue
		}
		known := false
		for _, a := range allowed {
			known = known || a == k
		}
		if !known {
			return nil, invalidBuiltIn(tool, fmt.Sprintf("unknown argument %q", k))
		}
	}
	return obj, nil
}

// ParseAskUser decodes and checks ask_user arguments.
func ParseAskUser(arguments string) (AskUserArguments, error) {
	const tool = agent.BuiltInAskUser
	obj, err := decodeObject(tool, arguments, "question", "choices", "allows_free_text")
	if err != nil {
		return AskUserArguments{}, err
	}
	var a AskUserArguments
	if raw, ok := obj["question"]; !ok || json.Unmarshal(raw, &a.Question) != nil || strings.TrimSpace(a.Question) == "" {
		return AskUserArguments{}, invalidBuiltIn(tool, "question must be a non-blank string")
	}
	if raw, ok := obj["choices"]; ok {
		if json.Unmarshal(raw, &a.Choices) != nil {
			return AskUserArguments{}, invalidBuiltIn(tool, "choices must be a list of strings")
		}
		for _, c := range a.Choices {
			if strings.TrimSpace(c) == "" {
				return AskUserArguments{}, invalidBuiltIn(tool, "choices must not be blank")
			}
		}
	}
	a.AllowsFreeText = len(a.Choices) == 0
	if raw, ok := obj["allows_free_text"]; ok {
		if json.Unmarshal(raw, &a.AllowsFreeText) != nil {
			return AskUserArguments{}, invalidBuiltIn(tool, "allows_free_text must be a boolean")
		}
	}
	if len(a.Choices) == 0 && !a.AllowsFreeText {
		return AskUserArguments{}, invalidBuiltIn(tool, "a question without choices must allow free text")
	}
	return a, nil
}

// ParseDurableWait decodes and checks durable_wait arguments against the
// longest wait allowed.
func ParseDurableWait(arguments string, maxWait time.Duration) (DurableWaitArguments, error) {
	const tool = agent.BuiltInDurableWait
	obj, err := decodeObject(tool, arguments, "duration_seconds", "reason")
	if err != nil {
		return DurableWaitArguments{}, err
	}
	maxSeconds := int64(maxWait / time.Second)
	var seconds float64
	raw, ok := obj["duration_seconds"]
	if !ok || json.Unmarshal(raw, &seconds) != nil || seconds != math.Trunc(seconds) || seconds < 1 || seconds > float64(maxSeconds) {
		return DurableWaitArguments{}, invalidBuiltIn(tool, fmt.Sprintf("duration_seconds must be a whole number of seconds from 1 to %d", maxSeconds))
	}
	var reason string
	if raw, ok := obj["reason"]; !ok || json.Unmarshal(raw, &reason) != nil {
		return DurableWaitArguments{}, invalidBuiltIn(tool, "reason must be a string")
	}
	return DurableWaitArguments{Duration: time.Duration(seconds) * time.Second, Reason: reason}, nil
}

// CheckAnswer reports why an answer does not fit a question, or nil.
func (q Question) CheckAnswer(answer string) error {
	if strings.TrimSpace(answer) == "" {
		return errors.New("the answer is blank")
	}
	if q.AllowsFreeText {
		return nil
	}
	for _, c := range q.Choices {
		if c == answer {
			return nil
		}
	}
	return fmt.Errorf("the answer %q is not one of the choices", answer)
}
