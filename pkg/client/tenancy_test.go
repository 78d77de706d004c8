package client_test

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	tclient "go.temporal.io/sdk/client"

	"github.com/stepwise-run/stepwise/internal/engine"
	"github.com/stepwise-run/stepwise/internal/enginetest"
	"github.com/stepwise-run/stepwise/internal/loop"
	"github.com/stepwise-run/stepwise/internal/session"
	"github.com/stepwise-run/stepwise/internal/sessionrpc"
	"github.com/stepwise-run/stepwise/internal/tenancy"
	"github.com/stepwise-run/stepwise/pkg/agent"
	"github.com/stepwise-run/stepwise/pkg/client"
)

// TestTwoNamespacesWithOneFlowTypeNeverMeet runs the Agents of two
// namespaces with the same Flow type on one Temporal namespace, as two
// tenants of one engine do. Each starts a session of the same ID as its
// own; neither reads, sends to, approves or lists the other's, which it
// finds exactly as a session that does not exist; and a session the other
// tenant started around the client, on this tenant's task queue, is not
// taken for this tenant's.
func TestTwoNamespacesWithOneFlowTypeNeverMeet(t *testing.T) {
	server := enginetest.StartDevServer(t)
	c := server.Client()
	var refunds [2]atomic.Int32
	var calls [2]atomic.Value // the ToolContext of each tenant's refund
	tenants := [2]client.Agent{
		{Namespace: "team-a", Name: "support", UID: "uid-a", FlowType: "SupportAgent"},
		{Namespace: "team-b", Name: "support", UID: "uid-b", FlowType: "SupportAgent"},
	}
	var s [2]*client.Sessions
	for i, a := range tenants {
		_, model := refundAgent(&refunds[i])
		refund := agent.MustTool("refund_order", "Refunds an order.", agent.EffectNonIdempotentWrite,
			func(_ context.Context, tc agent.ToolContext, _ struct{}) (string, error) {
				refunds[i].Add(1)
				calls[i].Store(tc)
				return "refunded", nil
			})
		runner, err := loop.New(agent.Definition{Name: a.Namespace, Model: model, Tools: []agent.Tool{refund}})
		if err != nil {
			t.Fatal(err)
		}
		w := engine.NewWorker(c, engine.WorkerOptions{FlowType: a.FlowType, TaskQueue: tenancy.Tenant(a.Namespace, a.FlowType).TaskQueue(),
			TaskSlots: 4, Runner: runner})
		if err := w.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(w.Stop)
		s[i] = client.New(c, a)
	}
	a, b := s[0], s[1]
	ctx := context.Background()

	// One session ID, two sessions: no existence oracle.
	for i, sessions := range s {
		if ok, err := sessions.Start(ctx, "s1", "refund please"); !ok || err != nil {
			t.Fatalf("%s: Start(s1) = %v, %v; want its own new session", tenants[i], ok, err)
		}
	}
	var interruptA string
	enginetest.Eventually(t, time.Minute, "team-a's refund to wait for approval", func() (bool, error) {
		snap, err := a.Snapshot(ctx, "s1")
		if err != nil || len(snap.PendingInterrupts) == 0 {
			return false, err
		}
		interruptA = snap.PendingInterrupts[0].ID
		return true, nil
	})
	if ok, err := a.Start(ctx, "a-only", "hello"); !ok || err != nil {
		t.Fatalf("Start(a-only) = %v, %v", ok, err)
	}

	// team-b reaches nothing of team-a's: not a session only team-a has,
	// and on s1, only its own.
	for _, id := range []string{"a-only", "never"} {
		_, err := b.Snapshot(ctx, id)
		if !errors.Is(err, client.ErrSessionNotFound) {
			t.Errorf("team-b's Snapshot(%s) = %v, want ErrSessionNotFound", id, err)
		}
		if err != nil && strings.Contains(err.Error(), "team-a") {
			t.Errorf("team-b's refusal names team-a: %v", err)
		}
		if ok, err := b.Send(ctx, id, "hi"); ok || !errors.Is(err, client.ErrSessionNotFound) {
			t.Errorf("team-b's Send(%s) = %v, %v; want ErrSessionNotFound", id, ok, err)
		}
	}
	if ok, err := b.Approve(ctx, "a-only", interruptA); ok || !errors.Is(err, client.ErrSessionNotFound) {
		t.Errorf("team-b's Approve of team-a's session = %v, %v", ok, err)
	}
	// team-b approving an interrupt of its own s1 approves only its own.
	var interruptB string
	enginetest.Eventually(t, time.Minute, "team-b's refund to wait for approval", func() (bool, error) {
		snap, err := b.Snapshot(ctx, "s1")
		if err != nil || len(snap.PendingInterrupts) == 0 {
			return false, err
		}
		interruptB = snap.PendingInterrupts[0].ID
		return true, nil
	})
	if ok, err := b.Approve(ctx, "s1", interruptB); !ok || err != nil {
		t.Fatalf("team-b's Approve(s1) = %v, %v", ok, err)
	}
	enginetest.Eventually(t, time.Minute, "team-b's refund to run", func() (bool, error) { return refunds[1].Load() == 1, nil })
	snapA, err := a.Snapshot(ctx, "s1")
	if err != nil || len(snapA.PendingInterrupts) != 1 || refunds[0].Load() != 0 {
		t.Errorf("team-a's s1 after team-b's approval: %v pending, %d refunds, %v; want still waiting", len(snapA.PendingInterrupts), refunds[0].Load(), err)
	}

	// Each lists its own waiting sessions only.
	enginetest.Eventually(t, time.Minute, "team-a's s1 among the sessions waiting", func() (bool, error) {
		found, _, err := a.Waiting(ctx, client.WaitingQuery{})
		return err == nil && len(found) == 1 && found[0].SessionID == "s1", err
	})
	if found, _, err := b.Waiting(ctx, client.WaitingQuery{}); err != nil || len(found) != 0 {
		t.Errorf("team-b's waiting sessions = %+v, %v; want none: team-a's waits, not team-b's", found, err)
	}
	// The shared names of engine 0.7.0 and earlier reach neither.
	shared := client.New(c, client.Agent{FlowType: "SupportAgent"})
	if _, err := shared.Snapshot(ctx, "s1"); !errors.Is(err, client.ErrSessionNotFound) {
		t.Errorf("the shared names' Snapshot(s1) = %v, want ErrSessionNotFound", err)
	}

	// A session recorded under team-a's owner but started around the
	// client, under a bare ID, on team-b's task queue: team-a does not
	// take it, nor does team-b, whose owner it does not record.
	forged := tclient.StartWorkflowOptions{ID: "forged", TaskQueue: tenancy.Tenant("team-b", "SupportAgent").TaskQueue(),
		TypedSearchAttributes: sessionrpc.OwnerAttributes(tenancy.Owner{Namespace: "team-a", Agent: "support"})}
	if _, err := c.ExecuteWorkflow(ctx, forged, "SupportAgent", sessionrpc.SessionInput{Start: session.StartInput{RequestID: "r"}}); err != nil {
		t.Fatal(err)
	}
	for i, sessions := range s {
		if _, err := sessions.Describe(ctx, "forged"); !errors.Is(err, client.ErrSessionNotFound) {
			t.Errorf("%s: Describe(forged) = %v, want ErrSessionNotFound", tenants[i], err)
		}
	}

	// A session records its owner.
	desc, err := c.DescribeWorkflow(ctx, tenancy.Tenant("team-a", "SupportAgent").WorkflowID("s1"), "")
	if err != nil {
		t.Fatal(err)
	}
	if owner, ok := sessionrpc.RecordedOwner(desc.TypedSearchAttributes); !ok || owner != (tenancy.Owner{Namespace: "team-a", Agent: "support", AgentUID: "uid-a"}) {
		t.Errorf("team-a's s1 records owner %+v (%v)", owner, ok)
	}

	// The tools of both see session s1, under keys no other tenant's call
	// shares, so a payment service never takes one tenant's refund for
	// another's.
	if ok, err := a.Approve(ctx, "s1", interruptA); !ok || err != nil {
		t.Fatalf("team-a's Approve(s1) = %v, %v", ok, err)
	}
	enginetest.Eventually(t, time.Minute, "team-a's refund to run", func() (bool, error) { return refunds[0].Load() == 1, nil })
	ca, cb := calls[0].Load().(agent.ToolContext), calls[1].Load().(agent.ToolContext)
	if ca.SessionID != "s1" || cb.SessionID != "s1" || ca.IdempotencyKey == cb.IdempotencyKey {
		t.Errorf("the refunds ran for sessions %q and %q with keys %q and %q; want s1 twice under two keys",
			ca.SessionID, cb.SessionID, ca.IdempotencyKey, cb.IdempotencyKey)
	}
}
