package engine

import (
	"context"
	"fmt"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/workflow"

	"github.com/stepwise-run/stepwise/internal/contract"
	"github.com/stepwise-run/stepwise/internal/spend"
	"github.com/stepwise-run/stepwise/internal/tenancy"
	"github.com/stepwise-run/stepwise/pkg/agent"
)

// The spend counter's updates.
const (
	spendAdmitUpdate  = "admit"
	spendRecordUpdate = "record"
	// spendCounterRunLength is how many calls one run of the counter
	// admits or records before it continues as new, so its history stays
	// short.
	spendCounterRunLength = 2000
)

// SpendCounter is the durable counter of one Agent's budget: every worker
// of the Agent admits and records its model calls through it, one at a
// time, so the budget holds across workers and worker restarts.
func SpendCounter(ctx workflow.Context, c spend.Counter) error {
	handled := 0
	err := workflow.SetUpdateHandlerWithOptions(ctx, spendAdmitUpdate,
		func(ctx workflow.Context, req spend.Request) (spend.Decision, error) {
			handled++
			return c.Admit(req, workflow.Now(ctx)), nil
		},
		workflow.UpdateHandlerOptions{Validator: func(_ workflow.Context, req spend.Request) error { return req.Validate() }})
	if err != nil {
		return err
	}
	err = workflow.SetUpdateHandlerWithOptions(ctx, spendRecordUpdate,
		func(ctx workflow.Context, rec spend.Record) error {
			handled++
			c.Record(rec, workflow.Now(ctx))
			return nil
		},
		workflow.UpdateHandlerOptions{Validator: func(_ workflow.Context, rec spend.Record) error { return rec.Validate() }})
	if err != nil {
		return err
	}
	if err := workflow.SetQueryHandler(ctx, spend.UsageQuery, func() (spend.Counter, error) { return c, nil }); err != nil {
		return err
	}
	err = workflow.Await(ctx, func() bool {
		return handled >= spendCounterRunLength || workflow.GetInfo(ctx).GetContinueAsNewSuggested()
	})
	if err != nil {
		return err
	}
	if err := workflow.Await(ctx, func() bool { return workflow.AllHandlersFinished(ctx) }); err != nil {
		return err
	}
	return workflow.NewContinueAsNewError(ctx, spend.CounterWorkflow, c)
}

// Budget is the built-in spend limit of an Agent: a budget per window
// shared by all its sessions, kept by the Agent's spend counter, and a
// budget per session, checked against the session's own recorded usage.
type Budget struct {
	Client client.Client
	// Names are the Agent's names on the engine: its spend counter runs on
	// its task queue under its spend counter ID.
	Names  tenancy.Names
	Limits spend.Limits
	// Prices are by model name; a cost bound needs every model priced.
	Prices map[string]spend.Price
	// DefaultModel prices a call whose answer named no model, such as a
	// summary.
	DefaultModel string
	// Hold is how long an admitted call holds budget without a record: the
	// model call attempt's timeout.
	Hold time.Duration
}

var _ agent.SpendLimit = (*Budget)(nil)

// Admit refuses a call when the session or the Agent spent its budget.
func (b *Budget) Admit(ctx context.Context, call agent.SpendCall) error {
	if reason := spend.SessionRefusal(b.Limits, call.SessionTokens); reason != "" {
		return &agent.SpendLimitError{Reason: reason}
	}
	if b.Limits.Agent == (spend.Amount{}) {
		return nil
	}
	var d spend.Decision
	req := spend.Request{CallID: call.CallID, Limits: b.Limits, Hold: b.Hold}
	if err := b.update(ctx, spendAdmitUpdate, call.CallID+"/admit", req, &d); err != nil {
		return err
	}
	if !d.Admitted {
		return &agent.SpendLimitError{Reason: d.Reason}
	}
	return nil
}

// Record counts what an admitted call used against the Agent's budget;
// the session's own usage is recorded in the session.
func (b *Budget) Record(ctx context.Context, call agent.SpendCall, used agent.SpendUsage) error {
	if b.Limits.Agent == (spend.Amount{}) {
		return nil
	}
	model := used.Model
	if _, ok := b.Prices[model]; !ok {
		model = b.DefaultModel
	}
	price := b.Prices[model]
	rec := spend.Record{CallID: call.CallID, Used: spend.Amount{
		Tokens:    contract.AddCounts(used.InputTokens, used.OutputTokens),
		MicroCost: price.Cost(used.InputTokens, used.CachedInputTokens, used.OutputTokens),
	}}
	return b.update(ctx, spendRecordUpdate, call.CallID+"/record", rec, nil)
}

// update sends one update to the counter, starting the counter when it is
// not running.
func (b *Budget) update(ctx context.Context, name, id string, arg, out any) error {
	start := b.Client.NewWithStartWorkflowOperation(client.StartWorkflowOptions{
		ID: b.Names.SpendCounterID(), TaskQueue: b.Names.TaskQueue(),
		WorkflowIDConflictPolicy: enumspb.WORKFLOW_ID_CONFLICT_POLICY_USE_EXISTING,
	}, spend.CounterWorkflow, spend.Counter{})
	handle, err := b.Client.UpdateWithStartWorkflow(ctx, client.UpdateWithStartWorkflowOptions{
		StartWorkflowOperation: start,
		UpdateOptions: client.UpdateWorkflowOptions{
			UpdateID: id, UpdateName: name, Args: []any{arg}, WaitForStage: client.WorkflowUpdateStageCompleted,
		},
	})
	if err != nil {
		return fmt.Errorf("asking the spend counter of %s: %w", b.Names.FlowType, err)
	}
	if err := handle.Get(ctx, out); err != nil {
		return fmt.Errorf("asking the spend counter of %s: %w", b.Names.FlowType, err)
	}
	return nil
}
