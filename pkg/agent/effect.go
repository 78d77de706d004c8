package agent

import (
	"fmt"
	"time"
)

// Effect is a tool call's effect class. It decides which Step runs the call,
// whether a crashed call runs again, and whether it needs approval by
// default.
type Effect string

// Effect classes.
const (
	// EffectRead changes nothing: retried up to three attempts, then failed.
	EffectRead Effect = "read"
	// EffectIdempotentWrite changes state, and a repeat with the same
	// idempotency key changes nothing more: retried up to three attempts with
	// the same key, then outcome unknown.
	EffectIdempotentWrite Effect = "idempotent_write"
	// EffectNonIdempotentWrite changes state on every call: one attempt, then
	// outcome unknown; needs approval by default.
	EffectNonIdempotentWrite Effect = "non_idempotent_write"
	// EffectUnclassified is treated like a non-idempotent write.
	EffectUnclassified Effect = "unclassified"
)

// Effects lists every effect class.
var Effects = []Effect{EffectRead, EffectIdempotentWrite, EffectNonIdempotentWrite, EffectUnclassified}

// Valid reports whether e is a known effect class.
func (e Effect) Valid() bool {
	for _, known := range Effects {
		if e == known {
			return true
		}
	}
	return false
}

// Retried reports whether a call of this effect may run more than once:
// reads and idempotent writes are; anything else gets a single attempt.
func (e Effect) Retried() bool {
	return e == EffectRead || e == EffectIdempotentWrite
}

// ApprovalByDefault reports whether a call of this effect waits for a
// person's approval unless a policy says otherwise.
func (e Effect) ApprovalByDefault() bool {
	return !e.Retried()
}

// ParseEffect turns a configured name into an Effect, naming the value it
// refuses.
func ParseEffect(name string) (Effect, error) {
	e := Effect(name)
	if !e.Valid() {
		return "", fmt.Errorf("unknown tool effect %q; use one of read, idempotent_write, non_idempotent_write, unclassified", name)
	}
	return e, nil
}

// Policy sets a tool's effect class and approval.
type Policy struct {
	// Effect is the tool's effect class.
	Effect Effect `json:"effect"`
	// RequiresApproval overrides the effect's default approval; nil keeps it.
	RequiresApproval *bool `json:"requiresApproval,omitempty"`
}

// ApprovalRequired reports whether a call under this policy waits for
// approval.
func (p Policy) ApprovalRequired() bool {
	if p.RequiresApproval != nil {
		return *p.RequiresApproval
	}
	return p.Effect.ApprovalByDefault()
}

// StepLimit changes the limits of a Step: a tool's own Step, or RunModel.
// Zero fields keep the defaults.
type StepLimit struct {
	// AttemptTimeout bounds one attempt.
	AttemptTimeout time.Duration `json:"attemptTimeout,omitempty"`
	// MaxAttempts is the attempt count of a Step that retries: RunModel,
	// and CallTool for reads and idempotent writes. A single-attempt call
	// always gets one.
	MaxAttempts int `json:"maxAttempts,omitempty"`
	// Within bounds all of RunModel's attempts together.
	Within time.Duration `json:"within,omitempty"`
}

// BuiltInTool names a tool the session itself runs, under every runner.
type BuiltInTool string

// Built-in tools.
const (
	// BuiltInAskUser asks the user a question and waits for the answer.
	BuiltInAskUser BuiltInTool = "ask_user"
	// BuiltInDurableWait waits on the engine's timer; no worker holds the wait.
	BuiltInDurableWait BuiltInTool = "durable_wait"
	// BuiltInWriteTodos replaces the session's plan.
	BuiltInWriteTodos BuiltInTool = "write_todos"
)
