package enginetest

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"

	"github.com/stepwise-run/stepwise/internal/engine"
	"github.com/stepwise-run/stepwise/internal/loop"
	"github.com/stepwise-run/stepwise/pkg/agent"
	sessions "github.com/stepwise-run/stepwise/pkg/client"
)

// The benchmarks run one in-process worker against a real dev server. Run
// them with a fixed count, since a turn's history grows with its model
// calls:
//
//	make bench
//
// BenchmarkRawActivity is Temporal's own cost: one no-op activity round
// trip from workflow code. BenchmarkModelStep is one RunModel Step with
// the scripted model (its request for an invalid ask_user call fails in
// workflow code, so no tool Step runs). BenchmarkModelAndToolStep adds one
// CallTool Step of a no-op read tool. BenchmarkTurns is whole one-call turns
// across concurrent sessions on one worker.

func noop(context.Context) error { return nil }

func rawActivities(ctx workflow.Context, n int) error {
	ctx = workflow.WithActivityOptions(ctx, workflow.ActivityOptions{StartToCloseTimeout: time.Minute})
	for range n {
		if err := workflow.ExecuteActivity(ctx, "Noop").Get(ctx, nil); err != nil {
			return err
		}
	}
	return nil
}

func BenchmarkRawActivity(b *testing.B) {
	server := StartDevServer(b)
	c := server.Client()
	w := worker.New(c, "raw", worker.Options{})
	w.RegisterWorkflowWithOptions(rawActivities, workflow.RegisterOptions{Name: "Raw"})
	w.RegisterActivityWithOptions(noop, activity.RegisterOptions{Name: "Noop"})
	if err := w.Start(); err != nil {
		b.Fatal(err)
	}
	defer w.Stop()
	ctx := context.Background()
	b.ResetTimer()
	run, err := c.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: "raw", TaskQueue: "raw"}, "Raw", b.N)
	if err == nil {
		err = run.Get(ctx, nil)
	}
	if err != nil {
		b.Fatal(err)
	}
}

type noteArgs struct {
	Note string `json:"note"`
}

// benchWorker starts an in-process session worker whose scripted model
// makes iterations model calls per turn, each asking for call, then answers.
func benchWorker(b *testing.B, flowType string, iterations int, call agent.ScriptedToolCall) *sessions.Sessions {
	server := StartDevServer(b)
	c := server.Client()
	read := agent.MustTool("noop_read", "Does nothing.", agent.EffectRead,
		func(context.Context, agent.ToolContext, noteArgs) (string, error) { return "ok", nil })
	model := agent.NewScriptedModel(func(req agent.ModelRequest) (agent.ScriptedReply, error) {
		answered := 0
		for _, m := range req.Input {
			if m.Role == agent.RoleAssistant && m.TurnID == req.Input[len(req.Input)-1].TurnID {
				answered++
			}
		}
		if answered < iterations-1 {
			return agent.ScriptedReply{ToolCalls: []agent.ScriptedToolCall{call}}, nil
		}
		return agent.ScriptedReply{Text: "done"}, nil
	})
	runner, err := loop.New(agent.Definition{
		Name: "bench", Model: model, Tools: []agent.Tool{read},
		BuiltInTools: []agent.BuiltInTool{agent.BuiltInAskUser}, MaxModelCallsPerTurn: 1 << 30,
	})
	if err != nil {
		b.Fatal(err)
	}
	w := engine.NewWorker(c, engine.WorkerOptions{FlowType: flowType, TaskQueue: sessions.TaskQueue(flowType), TaskSlots: 100, Runner: runner})
	if err := w.Start(); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(w.Stop)
	return sessions.New(c, flowType, "")
}

// waitForTurns polls until a session has finished turns turns.
func waitForTurns(b *testing.B, s *sessions.Sessions, id string, turns int) {
	ctx := context.Background()
	for {
		snap, err := s.Snapshot(ctx, id)
		if err == nil && snap.State != nil && snap.State.TurnCount >= turns && snap.State.ActiveTurnID == "" {
			if snap.State.LastTurnError != "" {
				b.Fatalf("turn failed: %s", snap.State.LastTurnError)
			}
			return
		}
		time.Sleep(time.Millisecond)
	}
}

func benchOneTurn(b *testing.B, call agent.ScriptedToolCall) {
	s := benchWorker(b, "Bench", b.N, call)
	b.ResetTimer()
	if ok, err := s.Start(context.Background(), "bench", "go"); !ok || err != nil {
		b.Fatalf("Start = %v, %v", ok, err)
	}
	waitForTurns(b, s, "bench", 1)
}

func BenchmarkModelStep(b *testing.B) {
	benchOneTurn(b, agent.ScriptedToolCall{Name: "ask_user", Arguments: map[string]any{}})
}

func BenchmarkModelAndToolStep(b *testing.B) {
	benchOneTurn(b, agent.ScriptedToolCall{Name: "noop_read", Arguments: noteArgs{Note: "x"}})
}

func BenchmarkTurns(b *testing.B) {
	s := benchWorker(b, "Turns", 1, agent.ScriptedToolCall{})
	const concurrency = 16
	b.ResetTimer()
	start := time.Now()
	var wg sync.WaitGroup
	next := make(chan int)
	for range concurrency {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				id := fmt.Sprintf("turn-%d", i)
				if ok, err := s.Start(context.Background(), id, "hello"); !ok || err != nil {
					b.Errorf("Start = %v, %v", ok, err)
					return
				}
				waitForTurns(b, s, id, 1)
			}
		}()
	}
	for i := range b.N {
		next <- i
	}
	close(next)
	wg.Wait()
	b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "turns/s")
}
