package controller

import (
	"context"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/log"

	agentsv1 "github.com/stepwise-run/stepwise/api/v1alpha1"
	"github.com/stepwise-run/stepwise/internal/spend"
)

// SpendCounters reads an Agent's spend counter on its engine, for the
// Agent's status.
type SpendCounters interface {
	SpendCounter(ctx context.Context, target EngineTarget) (spend.Counter, error)
}

// DefaultSpendRecheck is how often the status of an Agent with an agent
// budget is refreshed from its counter: nothing on the cluster tells when
// a session spends.
const DefaultSpendRecheck = 30 * time.Second

// SpendCounter implements SpendCounters.
func (e *Engines) SpendCounter(ctx context.Context, target EngineTarget) (spend.Counter, error) {
	conn, err := e.connection(target)
	if err != nil {
		return spend.Counter{}, err
	}
	return e.Client.SpendCounter(ctx, conn, target.Resolved.Names)
}

// observeSpend reads the agent budget's counter for status. A failed read
// is logged and leaves status.spend as it was: the budget itself is kept
// by the engine, not by the operator.
func (r *AgentReconciler) observeSpend(ctx context.Context, agent *agentsv1.Agent, target EngineTarget, pass *agentPass) {
	l := agent.Spec.SpendLimit
	if !l.HasAgentBudget() || r.Spend == nil {
		pass.spend, pass.observed.spend = nil, true
		return
	}
	counter, err := r.Spend.SpendCounter(ctx, target)
	if err != nil {
		log.FromContext(ctx).Info("the spend counter could not be read; status.spend keeps its last value", "error", err.Error())
		return
	}
	pass.spend, pass.observed.spend = spendStatus(l, counter, r.now()), true
}

// spendStatus is the agent budget's spend in the window that holds now.
func spendStatus(l *agentsv1.SpendLimitSpec, c spend.Counter, now time.Time) *agentsv1.SpendStatus {
	u := c.Usage(l.WindowLength(), now)
	out := &agentsv1.SpendStatus{
		WindowStart: metav1.NewTime(u.WindowStart.UTC()), WindowEnd: metav1.NewTime(u.WindowEnd.UTC()),
		Tokens: u.Spent.Tokens, ModelCalls: u.Calls,
	}
	if b := l.Agent.Tokens; b != nil {
		out.TokenBudget = b
		out.Reached = u.Spent.Tokens >= *b
	}
	if b := l.Agent.Cost; b != nil {
		out.CostBudget = *b
		out.Cost = spend.FormatMicro(u.Spent.MicroCost)
		if limit, err := spend.ParseMicro(*b); err == nil && u.Spent.MicroCost >= limit {
			out.Reached = true
		}
	}
	return out
}

// spendRecheck is how soon the Agent's spend is read again; zero when it
// has no agent budget.
func (r *AgentReconciler) spendRecheck(agent *agentsv1.Agent) time.Duration {
	if !agent.Spec.SpendLimit.HasAgentBudget() || r.Spend == nil {
		return 0
	}
	if r.SpendRecheck > 0 {
		return r.SpendRecheck
	}
	return DefaultSpendRecheck
}

func (r *AgentReconciler) now() time.Time {
	if r.Clock != nil {
		return r.Clock()
	}
	return time.Now()
}
