package enginetest

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"go.temporal.io/sdk/worker"

	"github.com/stepwise-run/stepwise/internal/engine"
	"github.com/stepwise-run/stepwise/internal/loop"
	"github.com/stepwise-run/stepwise/internal/session"
	"github.com/stepwise-run/stepwise/internal/tenancy"
	"github.com/stepwise-run/stepwise/pkg/agent"
	sessions "github.com/stepwise-run/stepwise/pkg/client"
)

// TestAToolStepNoWorkerTookRecordsThatTheToolDidNotRun approves an
// idempotent write while only a worker that takes no activity tasks runs:
// the tool Step waits in the queue until its queue timeout and never reaches
// a worker, so the call records failed with the "did not run" prefix rather
// than outcome_unknown, and the model may call it again.
func TestAToolStepNoWorkerTookRecordsThatTheToolDidNotRun(t *testing.T) {
	server := StartDevServer(t)
	c := server.Client()
	var ran atomic.Int32
	write := agent.MustTool("save_note", "Saves a note.", agent.EffectIdempotentWrite,
		func(context.Context, agent.ToolContext, noteArgs) (string, error) {
			ran.Add(1)
			return "saved", nil
		}, agent.WithApproval(true))
	model := agent.NewScriptedModel(func(req agent.ModelRequest) (agent.ScriptedReply, error) {
		if results := agent.ToolResults(req); len(results) > 0 {
			return agent.ScriptedReply{Text: "result: " + results[0].Output}, nil
		}
		return agent.ScriptedReply{ToolCalls: []agent.ScriptedToolCall{{ID: "c1", Name: "save_note", Arguments: noteArgs{Note: "x"}}}}, nil
	})
	runner, err := loop.New(agent.Definition{Name: "notrun", Model: model, Tools: []agent.Tool{write}})
	if err != nil {
		t.Fatal(err)
	}
	const flowType = "NotRun"
	timings := engine.DefaultTimings()
	timings.ToolQueueTimeout = 2 * time.Second
	newWorker := func(workflowsOnly bool) worker.Worker {
		w := engine.NewWorker(c, engine.WorkerOptions{
			FlowType: flowType, TaskQueue: tenancy.Shared(flowType).TaskQueue(), TaskSlots: 10, Runner: runner, Timings: timings,
			Options: worker.Options{LocalActivityWorkerOnly: workflowsOnly},
		})
		if err := w.Start(); err != nil {
			t.Fatal(err)
		}
		return w
	}
	full := newWorker(false)
	s := sessions.New(c, sessions.Agent{FlowType: flowType})
	ctx := context.Background()
	if ok, err := s.Start(ctx, "s1", "save a note"); !ok || err != nil {
		t.Fatalf("Start = %v, %v", ok, err)
	}
	Eventually(t, waitLong, "an approval", func() (bool, error) {
		snap, err := s.Snapshot(ctx, "s1")
		return err == nil && len(snap.PendingInterrupts) == 1, err
	})
	full.Stop()
	workflowsOnly := newWorker(true)
	defer workflowsOnly.Stop()
	if ok, err := s.Approve(ctx, "s1", "c1"); !ok || err != nil {
		t.Fatalf("Approve = %v, %v", ok, err)
	}
	Eventually(t, waitLong, "the call to be recorded", func() (bool, error) {
		snap, err := s.Snapshot(ctx, "s1")
		if err != nil || len(snap.ToolCalls) == 0 {
			return false, err
		}
		return snap.ToolCalls[0].Status.Final(), nil
	})
	snap, err := s.Snapshot(ctx, "s1")
	if err != nil {
		t.Fatal(err)
	}
	call := snap.ToolCalls[0]
	if call.Status != sessions.ToolCallFailed || !strings.HasPrefix(call.Error, session.ToolCallNotRunPrefix+": ") {
		t.Fatalf("record = %s %q, want failed with the did-not-run prefix", call.Status, call.Error)
	}
	// A worker that takes activity tasks finishes the turn.
	workflowsOnly.Stop()
	defer newWorker(false).Stop()
	Eventually(t, waitLong, "the turn to end", func() (bool, error) {
		snap, err := s.Snapshot(ctx, "s1")
		return err == nil && snap.State.TurnCount == 1 && snap.State.ActiveTurnID == "", err
	})
	if ran.Load() != 0 {
		t.Errorf("the tool ran %d times, want never", ran.Load())
	}
}
