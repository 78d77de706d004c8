package mcp

import (
	"github.com/stepwise-run/stepwise/pkg/agent"
)

// Keys of the Dex MCP conventions, under the prefix servers built for them
// already use.
const (
	EffectMetaKey         = "io.superdurable.dex/effect"
	ApprovalMetaKey       = "io.superdurable.dex/approval"
	OutcomeMetaKey        = "io.superdurable.dex/outcome"
	IdempotencyKeyMetaKey = "io.superdurable.dex/idempotencyKey"
)

// Annotations are what a listed tool says of its own effect.
type Annotations struct {
	ReadOnly   bool
	Idempotent bool
	// Meta is the tool definition's _meta.
	Meta map[string]any
}

// ToolPolicy is the effect class and approval of a listed tool: what the
// tool declares under the Dex conventions, else the session's policy for
// it, else its annotations, else the default effect. A session policy may
// only raise a declared tool's safety. trusted is false for a server whose
// hints are not trusted: its tools keep the default unless a policy names
// them.
func ToolPolicy(a Annotations, trusted bool, defaultEffect agent.Effect, policy *agent.Policy) agent.Policy {
	if !trusted {
		if policy != nil {
			return *policy
		}
		return agent.Policy{Effect: defaultEffect}
	}
	if declared, asks, ok := declaration(a.Meta); ok {
		return mergeDeclared(declared, asks, policy)
	}
	if policy != nil {
		return *policy
	}
	if _, present := a.Meta[EffectMetaKey]; present {
		// An effect outside the declared ones: the default, with the
		// annotations ignored.
		return agent.Policy{Effect: defaultEffect}
	}
	if effect, ok := hintedEffect(a); ok {
		return agent.Policy{Effect: effect}
	}
	return agent.Policy{Effect: defaultEffect}
}

// hintedEffect is the effect a tool's MCP hints give it; ok is false when
// they give none. readOnlyHint makes a read: the MCP specification gives
// idempotentHint (and destructiveHint) a meaning only for a tool that is
// not read-only, so a read that also says idempotent stays a read and its
// exhausted retries record failed, not outcome_unknown. idempotentHint on
// a tool that is not read-only makes an idempotent write whatever
// destructiveHint says.
func hintedEffect(a Annotations) (effect agent.Effect, ok bool) {
	switch {
	case a.ReadOnly:
		return agent.EffectRead, true
	case a.Idempotent:
		return agent.EffectIdempotentWrite, true
	}
	return "", false
}

// declaration reads the Dex effect and approval keys; ok is false without a
// valid declared effect. Any approval value asks, so an unknown one fails
// closed; without the key, a declared tool does not ask.
func declaration(meta map[string]any) (effect agent.Effect, asks bool, ok bool) {
	value, _ := meta[EffectMetaKey].(string)
	switch agent.Effect(value) {
	case agent.EffectRead, agent.EffectIdempotentWrite, agent.EffectNonIdempotentWrite:
		effect = agent.Effect(value)
	default:
		return "", false, false
	}
	_, asks = meta[ApprovalMetaKey]
	return effect, asks, true
}

// effectRank orders effects from the least to the most conservative.
var effectRank = map[agent.Effect]int{
	agent.EffectRead: 0, agent.EffectIdempotentWrite: 1, agent.EffectNonIdempotentWrite: 2, agent.EffectUnclassified: 3,
}

// mergeDeclared applies a session policy to a declared tool: the policy
// may keep or raise its safety, never lower it. The policy's approval wins
// when set; otherwise the call asks when the tool recommends it or the
// effect asks by default.
func mergeDeclared(declared agent.Effect, asks bool, policy *agent.Policy) agent.Policy {
	effect := declared
	var approval *bool
	if policy != nil {
		if effectRank[policy.Effect] > effectRank[effect] {
			effect = policy.Effect
		}
		approval = policy.RequiresApproval
	}
	if approval == nil {
		ask := asks || (policy != nil && policy.Effect.ApprovalByDefault())
		approval = &ask
	}
	return agent.Policy{Effect: effect, RequiresApproval: approval}
}
