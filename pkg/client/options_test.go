package client_test

import (
	"context"
	"fmt"
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

// TestABadRequestIDIsRefusedBeforeAnythingIsSent needs no engine: a blank
// request ID is refused by name.
func TestABadRequestIDIsRefusedBeforeAnythingIsSent(t *testing.T) {
	s := client.New(nil, testAgent("F"))
	for _, id := range []string{" ", strings.Repeat("x", 201)} {
		if ok, err := s.Approve(context.Background(), "s1", "r1", client.WithRequestID(id)); ok || err == nil ||
			!strings.Contains(err.Error(), "a request ID must not be blank and must be at most 200 bytes") {
			t.Errorf("Approve with request ID %q = %v, %v; want an error naming the request ID", id, ok, err)
		}
	}
}

// TestARequestSentAgainAfterTheSessionContinuedAsNewIsTheSameRequest: the
// engine forgets update IDs when a session continues in a new run, so the
// session remembers the requests it accepted: a message and an approval
// sent again under their request IDs answer true and change nothing.
func TestARequestSentAgainAfterTheSessionContinuedAsNewIsTheSameRequest(t *testing.T) {
	server := enginetest.StartDevServer(t)
	c := server.Client()
	var refunds atomic.Int32
	refund, model := refundAgent(&refunds)
	runner, err := loop.New(agent.Definition{Name: "again", Model: model, Tools: []agent.Tool{refund}})
	if err != nil {
		t.Fatal(err)
	}
	w := engine.NewWorker(c, engine.WorkerOptions{FlowType: "Again", TaskQueue: tenancy.Tenant("test", "Again").TaskQueue(), TaskSlots: 4, Runner: runner,
		ContinueAsNewThreshold: engine.ContinueAsNewThreshold{Events: 40, Bytes: 1 << 20}})
	if err := w.Start(); err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	s := client.New(c, testAgent("Again"))
	ctx := context.Background()
	turnDone := func(turns int) {
		t.Helper()
		enginetest.Eventually(t, time.Minute, fmt.Sprintf("turn %d", turns), func() (bool, error) {
			snap, err := s.Snapshot(ctx, "s1")
			return err == nil && snap.State.TurnCount == turns && snap.State.ActiveTurnID == "", err
		})
	}
	runID := func() string {
		d, err := c.DescribeWorkflow(ctx, s.WorkflowIDOf("s1"), "")
		if err != nil {
			t.Fatal(err)
		}
		return d.RawResponse.GetWorkflowExecutionInfo().GetExecution().GetRunId()
	}
	if ok, err := s.Start(ctx, "s1", "refund order 7"); !ok || err != nil {
		t.Fatalf("Start = %v, %v", ok, err)
	}
	enginetest.Eventually(t, time.Minute, "the approval", func() (bool, error) {
		snap, err := s.Snapshot(ctx, "s1")
		return err == nil && len(snap.PendingInterrupts) == 1, err
	})
	if ok, err := s.Approve(ctx, "s1", "r1", client.WithRequestID("approve-1")); !ok || err != nil {
		t.Fatalf("Approve = %v, %v", ok, err)
	}
	turnDone(1)
	if ok, err := s.Send(ctx, "s1", "only once", client.WithRequestID("send-1")); !ok || err != nil {
		t.Fatalf("Send = %v, %v", ok, err)
	}
	turnDone(2)
	first := runID()
	turns := 2
	for runID() == first {
		if turns > 30 {
			t.Fatal("the session never continued as new")
		}
		if ok, err := s.Send(ctx, "s1", fmt.Sprintf("filler %d", turns)); !ok || err != nil {
			t.Fatalf("Send = %v, %v", ok, err)
		}
		turns++
		turnDone(turns)
	}

	if ok, err := s.Send(ctx, "s1", "only once", client.WithRequestID("send-1")); !ok || err != nil {
		t.Errorf("the message sent again in a new run = %v, %v; want true, as the first time", ok, err)
	}
	if ok, err := s.Approve(ctx, "s1", "r1", client.WithRequestID("approve-1")); !ok || err != nil {
		t.Errorf("the approval sent again in a new run = %v, %v; want true, as the first time", ok, err)
	}
	if ok, err := s.Send(ctx, "s1", "the last one"); !ok || err != nil {
		t.Fatalf("Send = %v, %v", ok, err)
	}
	turnDone(turns + 1)
	snap, err := s.Snapshot(ctx, "s1")
	if err != nil {
		t.Fatal(err)
	}
	sent := 0
	for _, m := range snap.Messages {
		if m.Role == client.RoleUser && m.Text == "only once" {
			sent++
		}
	}
	if sent != 1 || refunds.Load() != 1 {
		t.Errorf("the message was stored %d times and the refund ran %d times; want each once", sent, refunds.Load())
	}
}
