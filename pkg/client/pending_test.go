package client_test

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stepwise-run/stepwise/internal/engine"
	"github.com/stepwise-run/stepwise/internal/enginetest"
	"github.com/stepwise-run/stepwise/internal/loop"
	"github.com/stepwise-run/stepwise/internal/tenancy"
	"github.com/stepwise-run/stepwise/pkg/agent"
	"github.com/stepwise-run/stepwise/pkg/client"
)

// TestARequestSentWhileNoWorkerRunsWaitsAndARetryLearnsItsOutcome sends a
// start and an approval while no worker runs: each is pending, neither
// refused nor failed, and waits for a worker. Once one runs, sending each
// again under its request ID answers the first call's outcome, and the
// approval took effect once.
func TestARequestSentWhileNoWorkerRunsWaitsAndARetryLearnsItsOutcome(t *testing.T) {
	server := enginetest.StartDevServer(t)
	c := server.Client()
	var refunds atomic.Int32
	refund, model := refundAgent(&refunds)
	startWorker := func() func() {
		runner, err := loop.New(agent.Definition{Name: "pending", Model: model, Tools: []agent.Tool{refund}})
		if err != nil {
			t.Fatal(err)
		}
		w := engine.NewWorker(c, engine.WorkerOptions{FlowType: "Pending", TaskQueue: tenancy.Tenant("test", "Pending").TaskQueue(), TaskSlots: 4, Runner: runner})
		if err := w.Start(); err != nil {
			t.Fatal(err)
		}
		return w.Stop
	}
	s := client.New(c, testAgent("Pending"))
	// wait is the caller's wait for an answer: past the time a session's
	// task may wait for the worker that ran it last.
	const wait = 15 * time.Second
	waiting := func(what string, call func(ctx context.Context) (bool, error)) *client.PendingError {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), wait)
		defer cancel()
		ok, err := call(ctx)
		var pending *client.PendingError
		if ok || !errors.As(err, &pending) || !errors.Is(err, client.ErrWaitingForWorker) {
			t.Fatalf("%s without a worker = %v, %v; want a PendingError waiting for a worker", what, ok, err)
		}
		return pending
	}

	// A start on a Flow type no worker polls names the task queue.
	pending := waiting("Start", func(ctx context.Context) (bool, error) {
		return s.Start(ctx, "s1", "refund please", client.WithRequestID("start-1"))
	})
	if pending.RequestID != "start-1" || pending.TaskQueue != "stepwise/test/Pending" ||
		!strings.Contains(pending.Error(), "no worker polls task queue stepwise/test/Pending") ||
		!strings.Contains(pending.Error(), "send it again with request ID start-1") {
		t.Errorf("the pending start says %q (request %q, task queue %q)", pending.Error(), pending.RequestID, pending.TaskQueue)
	}

	stop := startWorker()
	ctx := context.Background()
	if ok, err := s.Start(ctx, "s1", "refund please", client.WithRequestID("start-1")); !ok || err != nil {
		t.Fatalf("Start sent again with its request ID = %v, %v; want true: the first call started the session", ok, err)
	}
	enginetest.Eventually(t, time.Minute, "the approval", func() (bool, error) {
		snap, err := s.Snapshot(ctx, "s1")
		return err == nil && len(snap.PendingInterrupts) == 1, err
	})
	stop()

	// An approval while no worker runs is sent, not refused.
	pending = waiting("Approve", func(ctx context.Context) (bool, error) {
		return s.Approve(ctx, "s1", "r1", client.WithRequestID("approve-1"))
	})
	if pending.RequestID != "approve-1" || !strings.Contains(pending.Error(), "resolve_interrupt on session s1 was sent and waits for a worker") {
		t.Errorf("the pending approval says %q", pending.Error())
	}
	// Without a request ID the error names the random one it sent.
	pending = waiting("Send", func(ctx context.Context) (bool, error) { return s.Send(ctx, "s1", "and another") })
	if len(pending.RequestID) != 32 {
		t.Errorf("the pending send names request ID %q, want the random one it sent", pending.RequestID)
	}
	if n := refunds.Load(); n != 0 {
		t.Fatalf("refund_order ran %d times without a worker", n)
	}

	stop = startWorker()
	defer stop()
	if ok, err := s.Approve(ctx, "s1", "r1", client.WithRequestID("approve-1")); !ok || err != nil {
		t.Fatalf("Approve sent again with its request ID = %v, %v; want true", ok, err)
	}
	if ok, err := s.Approve(ctx, "s1", "r1", client.WithRequestID("approve-2")); ok || err != nil {
		t.Errorf("another approval of the same call = %v, %v; want false: it was approved", ok, err)
	}
	enginetest.Eventually(t, time.Minute, "the turn and the sent message", func() (bool, error) {
		snap, err := s.Snapshot(ctx, "s1")
		return err == nil && snap.State.TurnCount == 2 && snap.State.ActiveTurnID == "", err
	})
	if n := refunds.Load(); n != 1 {
		t.Errorf("refund_order ran %d times, want once", n)
	}
}
