package agent

import (
	"errors"
	"fmt"
	"slices"
	"strings"
)

// SessionSettings are one session's settings: a JSON object the application
// sets when it starts the session and may replace later, so one Flow type
// serves sessions that differ, such as by model. They are session state that
// snapshots show: never put a secret in them, only a reference the worker
// resolves.
type SessionSettings map[string]any

// ModelSetting is the session setting that ModelChoices reads.
const ModelSetting = "model"

// ModelChoice is a model client with the settings its calls use.
type ModelChoice struct {
	Client   ModelClient
	Settings ModelSettings
}

// ModelChoices maps the "model" session setting to one of the model
// clients a worker built. Settings only choose: a client is never built
// from them, so a session cannot point a worker at an endpoint or key the
// platform team did not configure.
type ModelChoices struct {
	// Default serves sessions whose settings choose no model.
	Default ModelChoice
	// Named are the models a session may choose by name.
	Named map[string]ModelChoice
}

// Resolve returns the model the settings choose. The error names the
// setting and the choices but never repeats the settings' values, because
// it becomes the turn's error, which snapshots show.
func (m ModelChoices) Resolve(s SessionSettings) (ModelChoice, error) {
	v, ok := s[ModelSetting]
	if !ok || v == nil {
		return m.Default, nil
	}
	name, isString := v.(string)
	if !isString {
		return ModelChoice{}, fmt.Errorf("session setting %q must be a string naming one of: %s", ModelSetting, m.names())
	}
	if c, ok := m.Named[name]; ok {
		return c, nil
	}
	if len(m.Named) == 0 {
		return ModelChoice{}, fmt.Errorf("session setting %q chooses a model, but this agent offers no model choices", ModelSetting)
	}
	return ModelChoice{}, fmt.Errorf("session setting %q names a model this agent does not offer; it offers: %s", ModelSetting, m.names())
}

func (m ModelChoices) names() string {
	names := make([]string, 0, len(m.Named))
	for n := range m.Named {
		names = append(names, n)
	}
	slices.Sort(names)
	if len(names) == 0 {
		return "(none)"
	}
	return strings.Join(names, ", ")
}

// Validate refuses choices with no client.
func (m ModelChoices) Validate() error {
	var problems []error
	if m.Default.Client == nil {
		problems = append(problems, errors.New("the default model has no client"))
	}
	for name, c := range m.Named {
		if name == "" {
			problems = append(problems, errors.New("a model choice has an empty name"))
		}
		if c.Client == nil {
			problems = append(problems, fmt.Errorf("model choice %s has no client", name))
		}
	}
	return errors.Join(problems...)
}
