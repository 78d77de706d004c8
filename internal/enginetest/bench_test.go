package enginetest

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	historypb "go.temporal.io/api/history/v1"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"

	"github.com/stepwise-run/stepwise/internal/engine"
	"github.com/stepwise-run/stepwise/internal/loop"
	"github.com/stepwise-run/stepwise/internal/tenancy"
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
//
// The first three also report, from the workflow history, each activity
// type's mean schedule-to-start (the time a task waits to reach a worker:
// near zero when the server dispatches it eagerly) and run time (start to
// completion, the worker's own work and the report back), in ms.

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
	b.StopTimer()
	reportStepTimes(b, c, "raw")
}

// stepTimes sums one activity type's waits and runs.
type stepTimes struct {
	count                 int
	scheduleToStart, runs time.Duration
}

// reportStepTimes reads every run of a workflow's history, newest first,
// and reports each activity type's mean schedule-to-start and run time.
func reportStepTimes(b *testing.B, c client.Client, workflowID string) {
	b.Helper()
	ctx := context.Background()
	times := map[string]*stepTimes{}
	for runID := ""; ; {
		scheduled := map[int64]*historypb.HistoryEvent{}
		started := map[int64]*historypb.HistoryEvent{}
		previous := ""
		iter := c.GetWorkflowHistory(ctx, workflowID, runID, false, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
		for iter.HasNext() {
			e, err := iter.Next()
			if err != nil {
				b.Fatalf("reading the history of %s: %v", workflowID, err)
			}
			switch e.GetEventType() {
			case enumspb.EVENT_TYPE_WORKFLOW_EXECUTION_STARTED:
				previous = e.GetWorkflowExecutionStartedEventAttributes().GetContinuedExecutionRunId()
			case enumspb.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
				scheduled[e.GetEventId()] = e
			case enumspb.EVENT_TYPE_ACTIVITY_TASK_STARTED:
				started[e.GetActivityTaskStartedEventAttributes().GetScheduledEventId()] = e
			case enumspb.EVENT_TYPE_ACTIVITY_TASK_COMPLETED:
				id := e.GetActivityTaskCompletedEventAttributes().GetScheduledEventId()
				s, st := scheduled[id], started[id]
				if s == nil || st == nil {
					continue
				}
				name := s.GetActivityTaskScheduledEventAttributes().GetActivityType().GetName()
				t := times[name]
				if t == nil {
					t = &stepTimes{}
					times[name] = t
				}
				t.count++
				t.scheduleToStart += st.GetEventTime().AsTime().Sub(s.GetEventTime().AsTime())
				t.runs += e.GetEventTime().AsTime().Sub(st.GetEventTime().AsTime())
			}
		}
		if previous == "" {
			break
		}
		runID = previous
	}
	ms := func(d time.Duration, n int) float64 { return float64(d) / float64(n) / float64(time.Millisecond) }
	for name, t := range times {
		b.ReportMetric(ms(t.scheduleToStart, t.count), name+"-sched-ms")
		b.ReportMetric(ms(t.runs, t.count), name+"-run-ms")
	}
}

type noteArgs struct {
	Note string `json:"note"`
}

// benchWorker starts an in-process session worker whose scripted model
// makes iterations model calls per turn, each asking for call, then answers.
func benchWorker(b *testing.B, flowType string, iterations int, call agent.ScriptedToolCall) (*sessions.Sessions, client.Client) {
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
	w := engine.NewWorker(c, engine.WorkerOptions{FlowType: flowType, TaskQueue: tenancy.Shared(flowType).TaskQueue(), TaskSlots: 100, Runner: runner})
	if err := w.Start(); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(w.Stop)
	return sessions.New(c, sessions.Agent{FlowType: flowType}), c
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
	s, c := benchWorker(b, "Bench", b.N, call)
	b.ResetTimer()
	if ok, err := s.Start(context.Background(), "bench", "go"); !ok || err != nil {
		b.Fatalf("Start = %v, %v", ok, err)
	}
	waitForTurns(b, s, "bench", 1)
	b.StopTimer()
	reportStepTimes(b, c, "bench")
}

func BenchmarkModelStep(b *testing.B) {
	benchOneTurn(b, agent.ScriptedToolCall{Name: "ask_user", Arguments: map[string]any{}})
}

func BenchmarkModelAndToolStep(b *testing.B) {
	benchOneTurn(b, agent.ScriptedToolCall{Name: "noop_read", Arguments: noteArgs{Note: "x"}})
}

func BenchmarkTurns(b *testing.B) {
	s, _ := benchWorker(b, "Turns", 1, agent.ScriptedToolCall{})
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
