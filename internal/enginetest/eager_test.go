package enginetest

import (
	"context"
	"sync"
	"testing"

	sdkworker "go.temporal.io/sdk/worker"

	"github.com/stepwise-run/stepwise/internal/engine"
	"github.com/stepwise-run/stepwise/internal/loop"
	"github.com/stepwise-run/stepwise/pkg/agent"
	sessions "github.com/stepwise-run/stepwise/pkg/client"
)

// ranOn records which worker ran each Step.
type ranOn struct {
	mu    sync.Mutex
	steps []string
}

func (r *ranOn) add(step string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.steps = append(r.steps, step)
}

func (r *ranOn) list() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.steps...)
}

// stepWorker starts an in-process session worker whose model asks for two
// reads per call for calls model calls, then answers; every Step it runs is
// recorded under its name. An activities-only worker runs Steps and no
// workflow code.
func stepWorker(t *testing.T, s *Stack, name string, calls int, log *ranOn, activitiesOnly bool) {
	t.Helper()
	read := agent.MustTool("noop_read", "Does nothing.", agent.EffectRead,
		func(context.Context, agent.ToolContext, noteArgs) (string, error) {
			log.add(name + " CallTool")
			return "ok", nil
		})
	model := agent.NewScriptedModel(func(req agent.ModelRequest) (agent.ScriptedReply, error) {
		log.add(name + " RunModel")
		if req.ModelCall <= calls {
			args := noteArgs{Note: "x"}
			return agent.ScriptedReply{ToolCalls: []agent.ScriptedToolCall{
				{Name: "noop_read", Arguments: args}, {Name: "noop_read", Arguments: args},
			}}, nil
		}
		return agent.ScriptedReply{Text: "done"}, nil
	})
	runner, err := loop.New(agent.Definition{Name: "eager", Model: model, Tools: []agent.Tool{read}, MaxModelCallsPerTurn: 100})
	if err != nil {
		t.Fatal(err)
	}
	var w sdkworker.Worker
	if activitiesOnly {
		w = sdkworker.New(s.Client, s.Names().TaskQueue(), sdkworker.Options{DisableWorkflowWorker: true})
		(&engine.Activities{Runner: runner, State: engine.QueryLoader{Client: s.Client}}).Register(w)
	} else {
		w = engine.NewWorker(s.Client, engine.WorkerOptions{
			FlowType: s.FlowType, TaskQueue: s.Names().TaskQueue(), TaskSlots: 10, Runner: runner,
		})
	}
	if err := w.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(w.Stop)
}

// With the server's eager activity dispatch on, as the tests' and the
// local dev server have it, the worker that completes a workflow task
// starts the Steps it schedules itself: a second worker that polls the
// same task queue for activities only never gets one, where without eager
// dispatch the two would share them.
func TestTheWorkerThatSchedulesAStepRunsItEagerly(t *testing.T) {
	s := NewStack(t, "Eager")
	log := &ranOn{}
	const calls = 10
	stepWorker(t, s, "sessions", calls, log, false)
	stepWorker(t, s, "activities-only", calls, log, true)
	c := sessions.New(s.Client, s.Agent())
	if ok, err := c.Start(context.Background(), "s1", "go"); !ok || err != nil {
		t.Fatalf("Start = %v, %v", ok, err)
	}
	if answer := lastAnswer(t, c, "s1", 1); answer != "done" {
		t.Fatalf("answer = %q", answer)
	}
	steps := log.list()
	if want := (calls + 1) + 2*calls; len(steps) != want {
		t.Errorf("%d Steps ran, want %d: %v", len(steps), want, steps)
	}
	for i, step := range steps {
		if step != "sessions RunModel" && step != "sessions CallTool" {
			t.Errorf("Step %d ran on another worker than the one that scheduled it: %s", i+1, step)
		}
	}
}
