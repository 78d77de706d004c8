package worker

import (
	"context"
	"fmt"

	"go.temporal.io/sdk/client"

	"github.com/stepwise-run/stepwise/internal/engine"
	"github.com/stepwise-run/stepwise/internal/spend"
	"github.com/stepwise-run/stepwise/internal/tenancy"
	"github.com/stepwise-run/stepwise/pkg/agent"
	"github.com/stepwise-run/stepwise/pkg/workerconfig"
)

// spendLimits is the Agent's configured budget followed by the image's
// own spend limit, either of which may be absent; nil when both are.
func spendLimits(cfg workerconfig.Config, c client.Client, t engine.Timings, own agent.SpendLimit) agent.SpendLimit {
	var all chainedSpendLimits
	if l := cfg.SpendLimit; l != nil {
		budget := &engine.Budget{
			Client: c, Names: names(cfg),
			Limits: spend.Limits{
				Window:        l.Window.Duration,
				Agent:         spend.Amount{Tokens: l.AgentTokens, MicroCost: l.AgentMicroCost},
				SessionTokens: l.SessionTokens,
			},
			Prices:       map[string]spend.Price{},
			DefaultModel: cfg.Definition.Model.Name,
			// An admitted call holds budget for as long as its attempt
			// may run.
			Hold: t.ModelAttempt,
		}
		for _, p := range l.Prices {
			budget.Prices[p.Model] = spend.Price{
				InputMicroPerMillion: p.InputMicroPerMillion, CachedInputMicroPerMillion: p.CachedInputMicroPerMillion,
				OutputMicroPerMillion: p.OutputMicroPerMillion,
			}
		}
		all = append(all, budget)
	}
	if own != nil {
		all = append(all, own)
	}
	switch len(all) {
	case 0:
		return nil
	case 1:
		return all[0]
	}
	return all
}

// chainedSpendLimits asks each limit in turn; a call is admitted only when
// all admit it, and each that admitted it is told what it used.
type chainedSpendLimits []agent.SpendLimit

func (l chainedSpendLimits) Admit(ctx context.Context, call agent.SpendCall) error {
	for i, limit := range l {
		if err := limit.Admit(ctx, call); err != nil {
			// The limits that admitted the call free what it held.
			for _, admitted := range l[:i] {
				_ = admitted.Record(context.WithoutCancel(ctx), call, agent.SpendUsage{})
			}
			return err
		}
	}
	return nil
}

func (l chainedSpendLimits) Record(ctx context.Context, call agent.SpendCall, used agent.SpendUsage) error {
	var first error
	for _, limit := range l {
		if err := limit.Record(ctx, call, used); err != nil && first == nil {
			first = err
		}
	}
	return first
}

// checkNames refuses task queues that are not the Agent's: its own, or,
// for workers of engine 0.7.0 and earlier, the shared one of its Flow type;
// and a shared task queue to move sessions from that is not the shared one
// or comes with no own task queue to move them to.
func checkNames(cfg workerconfig.Config) error {
	own, shared := tenancy.Tenant(cfg.Agent.Namespace, cfg.FlowType), tenancy.Shared(cfg.FlowType)
	switch q := cfg.Engine.TaskQueue; {
	case q != own.TaskQueue() && q != shared.TaskQueue():
		return fmt.Errorf("engine.taskQueue %q is not the Agent's: %s, or %s for workers of engine 0.7.0 and earlier", q, own.TaskQueue(), shared.TaskQueue())
	case cfg.Engine.SharedTaskQueue == "":
	case cfg.Engine.SharedTaskQueue != shared.TaskQueue() || q != own.TaskQueue():
		return fmt.Errorf("engine.sharedTaskQueue %q: sessions move from %s to %s only", cfg.Engine.SharedTaskQueue, shared.TaskQueue(), own.TaskQueue())
	}
	return nil
}

// names are the Agent's names on the engine, as its task queue shows: the
// operator renders the shared task queue only for workers of an engine
// version that knows no other names.
func names(cfg workerconfig.Config) tenancy.Names {
	if shared := tenancy.Shared(cfg.FlowType); cfg.Engine.TaskQueue == shared.TaskQueue() {
		return shared
	}
	return tenancy.Tenant(cfg.Agent.Namespace, cfg.FlowType)
}
