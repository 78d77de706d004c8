// Package loop is the built-in agent loop: a runner that makes each model
// call through an agent.ModelClient and runs function tools, so agents
// defined without a framework run on the session Flow.
package loop

import (
	"encoding/json"
	"fmt"
	"strings"

	"github.com/stepwise-run/stepwise/internal/media"
	"github.com/stepwise-run/stepwise/internal/session"
	"github.com/stepwise-run/stepwise/pkg/agent"
)

// Runner runs an agent definition.
type Runner struct {
	def agent.Definition
	// store keeps the sessions' images; nil when the agent has none.
	store media.Store
}

var (
	_ session.Runner     = (*Runner)(nil)
	_ session.TaskRunner = (*Runner)(nil)
	_ session.Compactor  = (*Runner)(nil)
)

// New returns a runner for a definition, refusing one the session cannot
// run.
func New(def agent.Definition, opts ...Option) (*Runner, error) {
	def = def.WithDefaults()
	if err := def.Validate(); err != nil {
		return nil, fmt.Errorf("agent %s: %w", def.Name, err)
	}
	r := &Runner{def: def}
	for _, opt := range opts {
		opt(r)
	}
	return r, nil
}

// runState continues a turn after its tool calls, or after a continued
// answer.
type runState struct {
	ModelCalls int `json:"modelCalls"`
	// AfterTools is true when the turn continues after tool calls, so the
	// continuation decision of that iteration is still to be made.
	AfterTools bool `json:"afterTools,omitempty"`
	// TurnContinuations counts the turn continuations in a row that
	// followed answers without tools.
	TurnContinuations int `json:"continuations,omitempty"`
}

func (s runState) encode() string {
	raw, _ := json.Marshal(s)
	return string(raw)
}

// parseRunState reads a turn's run state. A state written before
// continuations existed continues after tool calls, the only way it could
// be set.
func parseRunState(raw string) (runState, error) {
	if raw == "" {
		return runState{}, nil
	}
	var s runState
	if err := json.Unmarshal([]byte(raw), &s); err != nil {
		return runState{}, fmt.Errorf("reading the turn's run state: %w", err)
	}
	if !strings.Contains(raw, `"afterTools"`) && !strings.Contains(raw, `"continuations"`) {
		s.AfterTools = true
	}
	return s, nil
}

// offeredBuiltIns are the enabled built-in tools this worker runs.
func (r *Runner) offeredBuiltIns() []agent.BuiltInTool {
	var out []agent.BuiltInTool
	for _, b := range r.def.BuiltInTools {
		if _, ok := session.BuiltInToolDefinitions[b]; ok {
			out = append(out, b)
		}
	}
	return out
}

// options are the session options recorded with each RunModel outcome.
func (r *Runner) options() session.TurnOptions {
	opts := session.TurnOptions{
		BuiltInTools:      append([]agent.BuiltInTool(nil), r.def.BuiltInTools...),
		InterruptDeadline: r.def.InterruptDeadline,
		MaxDurableWait:    r.def.MaxDurableWait,
	}
	if c := r.def.Compaction; c != nil {
		opts.RetainedMessages = c.RetainedMessages
	}
	return opts
}
