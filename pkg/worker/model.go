package worker

import (
	"fmt"
	"maps"
	"slices"
	"strconv"

	"github.com/stepwise-run/stepwise/internal/model/chatcompletions"
	"github.com/stepwise-run/stepwise/internal/model/messages"
	"github.com/stepwise-run/stepwise/internal/model/responses"
	"github.com/stepwise-run/stepwise/pkg/agent"
	"github.com/stepwise-run/stepwise/pkg/workerconfig"
)

// modelChoice builds one configured model with its settings: the image's
// own client when it brings one, else a built-in client.
func modelChoice(field string, m workerconfig.Model, opts Options) (agent.ModelChoice, error) {
	var out agent.ModelChoice
	var err error
	if opts.Model != nil {
		if out.Client, err = opts.Model(m); err != nil {
			return agent.ModelChoice{}, fmt.Errorf("%s: %w", field, err)
		}
	}
	if out.Client == nil {
		if out.Client, err = model(field, m, opts.Scripts); err != nil {
			return agent.ModelChoice{}, err
		}
	}
	if m.MaxOutputTokens != nil {
		out.Settings.MaxOutputTokens = int64(*m.MaxOutputTokens)
	}
	out.Settings.ReasoningEffort = m.ReasoningEffort
	return out, nil
}

// Model returns the model client the configuration selects. Only clients
// this worker carries are built; a provider it lacks is an error that names
// it.
func Model(m workerconfig.Model, scripts map[string]agent.Script) (agent.ModelClient, error) {
	return model("definition.model", m, scripts)
}

func model(field string, m workerconfig.Model, scripts map[string]agent.Script) (agent.ModelClient, error) {
	switch m.Provider {
	case agent.ScriptedProvider:
		if m.Name == "demo" {
			return agent.NewScriptedModel(agent.DemoScript), nil
		}
		if script, ok := scripts[m.Name]; ok {
			return agent.NewScriptedModel(script), nil
		}
		return nil, fmt.Errorf("%s.name: this worker has no script named %q; it has \"demo\"%s", field, m.Name, scriptNames(scripts))
	case messages.Provider:
		return messages.New(messages.Config{BaseURL: m.BaseURL, Model: m.Name, APIKey: keyFrom(field, m.APIKey)}), nil
	case responses.Provider:
		return responses.New(responses.Config{BaseURL: m.BaseURL, Model: m.Name, APIKey: keyFrom(field, m.APIKey)}), nil
	case chatcompletions.Provider:
		if m.BaseURL == "" {
			return nil, fmt.Errorf("%s.baseURL is required for an openai-compatible model", field)
		}
		return chatcompletions.New(chatcompletions.Config{BaseURL: m.BaseURL, Model: m.Name, APIKey: keyFrom(field, m.APIKey)}), nil
	default:
		return nil, fmt.Errorf("%s.provider: this worker has no %q model client; it has openai, openai-compatible, anthropic and scripted", field, m.Provider)
	}
}

// keyFrom reads a model key from the worker's environment at each call, so
// a rotated Secret is read after the rollout it causes; nil sends no key.
func keyFrom(field string, ref *workerconfig.SecretEnv) func() (string, error) {
	if ref == nil {
		return nil
	}
	return func() (string, error) {
		key, err := ref.Lookup()
		if err != nil {
			return "", fmt.Errorf("%s.apiKey: %w", field, err)
		}
		return key, nil
	}
}

func scriptNames(scripts map[string]agent.Script) string {
	var s string
	for _, name := range slices.Sorted(maps.Keys(scripts)) {
		s += ", " + strconv.Quote(name)
	}
	return s
}
