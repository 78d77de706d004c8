package client_test

import (
	"context"
	"testing"
	"time"

	"github.com/stepwise-run/stepwise/internal/engine"
	"github.com/stepwise-run/stepwise/internal/enginetest"
	"github.com/stepwise-run/stepwise/internal/loop"
	"github.com/stepwise-run/stepwise/pkg/agent"
	"github.com/stepwise-run/stepwise/pkg/client"
)

func TestStartIsTrueOnlyForTheCallThatStartedTheSession(t *testing.T) {
	server := enginetest.StartDevServer(t)
	c := server.Client()
	runner, err := loop.New(agent.Definition{Name: "demo", Model: agent.NewScriptedModel(agent.DemoScript)})
	if err != nil {
		t.Fatal(err)
	}
	w := engine.NewWorker(c, engine.WorkerOptions{FlowType: "Demo", TaskQueue: client.TaskQueue("Demo"), TaskSlots: 4, Runner: runner})
	if err := w.Start(); err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	s := client.New(c, "Demo", "")
	ctx := context.Background()

	for i, tc := range []struct {
		what string
		opts []client.StartOption
		want bool
	}{
		{"the first start", []client.StartOption{client.WithRequestID("req-1")}, true},
		{"a retry of the same call", []client.StartOption{client.WithRequestID("req-1")}, true},
		{"another call", []client.StartOption{client.WithRequestID("req-2")}, false},
		{"a call without a request ID", nil, false},
	} {
		got, err := s.Start(ctx, "s1", "hello", tc.opts...)
		if err != nil || got != tc.want {
			t.Errorf("%d: %s: Start = %v, %v; want %v", i, tc.what, got, err, tc.want)
		}
	}
	enginetest.Eventually(t, time.Minute, "the first turn", func() (bool, error) {
		snap, err := s.Snapshot(ctx, "s1")
		return err == nil && snap.State.TurnCount == 1 && snap.State.ActiveTurnID == "", err
	})
	snap, err := s.Snapshot(ctx, "s1")
	if err != nil {
		t.Fatal(err)
	}
	if len(snap.Messages) != 2 || snap.Messages[1].Text != "Demo reply: hello" {
		t.Errorf("messages = %+v, want one turn: the retried and refused starts add nothing", snap.Messages)
	}

	if desc, err := c.DescribeWorkflow(ctx, "s1", ""); err != nil ||
		desc.RawResponse.GetWorkflowExecutionInfo().GetSearchAttributes().GetIndexedFields()[engine.ActiveStepsAttribute] == nil {
		t.Fatalf("a session with step search has no %s (%v)", engine.ActiveStepsAttribute, err)
	}

	// A session that ended is never started again under its ID.
	if err := c.TerminateWorkflow(ctx, "s1", "", "test"); err != nil {
		t.Fatal(err)
	}
	if got, err := s.Start(ctx, "s1", "again"); got || err != nil {
		t.Errorf("Start of an ended session's ID = %v, %v; want false", got, err)
	}

	// A session without the step search runs as any other.
	if got, err := s.Start(ctx, "s2", "hi", client.WithoutStepSearch()); !got || err != nil {
		t.Fatalf("Start without step search = %v, %v", got, err)
	}
	enginetest.Eventually(t, time.Minute, "the reply", func() (bool, error) {
		snap, err := s.Snapshot(ctx, "s2")
		return err == nil && len(snap.Messages) == 2 && snap.Messages[1].Text == "Demo reply: hi", err
	})
	desc, err := c.DescribeWorkflow(ctx, "s2", "")
	if err != nil {
		t.Fatal(err)
	}
	if fields := desc.RawResponse.GetWorkflowExecutionInfo().GetSearchAttributes().GetIndexedFields(); fields[engine.ActiveStepsAttribute] != nil {
		t.Errorf("a session started without step search has %s = %v", engine.ActiveStepsAttribute, fields[engine.ActiveStepsAttribute])
	}
}
