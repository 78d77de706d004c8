package enginetest

import (
	"context"
	"errors"
	"testing"

	"github.com/stepwise-run/stepwise/internal/contract"
	"github.com/stepwise-run/stepwise/internal/sessionrpc"
	"github.com/stepwise-run/stepwise/internal/tenancy"
	"github.com/stepwise-run/stepwise/pkg/client"
)

// TestSessionsMoveFromTheSharedNamesToTheirAgentsOwn starts sessions as
// workers of engine 0.7.0 and earlier keep them, under the names a Flow
// type shares across the Temporal namespace and with no owner recorded:
// one waits for an approval in the middle of its turn, one is idle. The
// workers are then replaced by workers that poll the Agent's own task
// queue and the shared one, as the operator runs them during the move. The
// approval reaches the waiting session where it runs, its call runs once,
// and at its turn's end it moves to the Agent's own task queue with its
// owner recorded; the idle one moves when woken; both keep answering under
// their session IDs, and another namespace's Agent reaches neither.
func TestSessionsMoveFromTheSharedNamesToTheirAgentsOwn(t *testing.T) {
	s := NewStack(t, "MovingNames")
	shared, own := tenancy.Shared(s.FlowType), tenancy.Tenant(s.Config.Agent.Namespace, s.FlowType)
	s.Config.Engine.TaskQueue = shared.TaskQueue()
	old := s.StartWorker()
	ctx := context.Background()
	// What an earlier client started: shared names, no owner.
	earlier := client.New(s.Client, client.Agent{FlowType: s.FlowType})
	if ok, err := earlier.Start(ctx, "busy", "tools: write_approved"); !ok || err != nil {
		t.Fatalf("Start(busy) = %v, %v", ok, err)
	}
	interrupt := firstInterrupt(t, earlier, "busy").ID
	if ok, err := earlier.Start(ctx, "idle", "hello"); !ok || err != nil {
		t.Fatalf("Start(idle) = %v, %v", ok, err)
	}
	lastAnswer(t, earlier, "idle", 1)
	// The Agent finds them while its workers keep the shared names, as its
	// status then names the shared task queue as its own.
	keeping := client.New(s.Client, client.Agent{Namespace: s.Config.Agent.Namespace, Name: s.Config.Agent.Name,
		UID: s.Config.Agent.UID, FlowType: s.FlowType, TaskQueue: shared.TaskQueue()})
	for _, id := range []string{"busy", "idle"} {
		if found, err := keeping.Describe(ctx, id); err != nil || found.WorkflowID != id || found.TaskQueue != shared.TaskQueue() {
			t.Fatalf("the Agent keeping the shared names: Describe(%s) = %+v, %v", id, found, err)
		}
	}
	old.Kill()

	s.Config.Engine.TaskQueue, s.Config.Engine.SharedTaskQueue = own.TaskQueue(), shared.TaskQueue()
	s.StartWorker()
	sessions := client.New(s.Client, client.Agent{Namespace: s.Config.Agent.Namespace, Name: s.Config.Agent.Name,
		UID: s.Config.Agent.UID, FlowType: s.FlowType, TaskQueue: own.TaskQueue(), SharedTaskQueue: shared.TaskQueue()})
	if ok, err := sessions.Approve(ctx, "busy", interrupt); !ok || err != nil {
		t.Fatalf("Approve(busy) = %v, %v", ok, err)
	}
	if answer := lastAnswer(t, sessions, "busy", 1); answer != "results: write_approved=write_approved done: n1" {
		t.Errorf("busy's answer = %q", answer)
	}
	if calls := callsOf(s, "write_approved"); len(calls) != 1 {
		t.Errorf("write_approved ran %d times, want once", len(calls))
	}
	moved := func(id string) {
		t.Helper()
		Eventually(t, waitLong, id+" to move to its Agent's own task queue", func() (bool, error) {
			desc, err := s.Client.DescribeWorkflow(ctx, id, "")
			if err != nil {
				return false, err
			}
			owner, recorded := sessionrpc.RecordedOwner(desc.TypedSearchAttributes)
			return desc.TaskQueueName == own.TaskQueue() && recorded && owner.Namespace == s.Config.Agent.Namespace &&
				owner.Agent == s.Config.Agent.Name && owner.AgentUID == s.Config.Agent.UID, nil
		})
	}
	moved("busy")
	// An idle session moves when woken, as the operator wakes it.
	if err := s.Client.SignalWorkflow(ctx, "idle", "", contract.SignalMoveToCurrentVersion, nil); err != nil {
		t.Fatal(err)
	}
	moved("idle")

	// Without the shared task queue, the Agent still finds them: they
	// record it as their owner, on its own task queue.
	after := client.New(s.Client, client.Agent{Namespace: s.Config.Agent.Namespace, Name: s.Config.Agent.Name, FlowType: s.FlowType})
	for _, id := range []string{"busy", "idle"} {
		if ok, err := after.Send(ctx, id, "again"); !ok || err != nil {
			t.Fatalf("Send(%s) = %v, %v", id, ok, err)
		}
		lastAnswer(t, after, id, 2)
	}
	// The shared names and another namespace's Agent reach neither.
	for _, other := range []*client.Sessions{earlier, client.New(s.Client, client.Agent{Namespace: "team-b", Name: s.Config.Agent.Name,
		FlowType: s.FlowType, SharedTaskQueue: shared.TaskQueue()})} {
		if _, err := other.Describe(ctx, "busy"); !errors.Is(err, client.ErrSessionNotFound) {
			t.Errorf("%s found busy: %v", other.Agent(), err)
		}
	}
}
