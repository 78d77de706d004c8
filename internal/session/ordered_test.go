package session

import (
	"maps"
	"testing"
	"time"

	"github.com/stepwise-run/stepwise/pkg/agent"
)

func ordered(id string, p agent.Policy) DeferredToolCall {
	c := call(id, "ledger__"+id, "{}", p)
	c.Ordered = true
	return c
}

func TestOrderedWritesRunOneAtATimeInModelOrder(t *testing.T) {
	now := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	write := agent.Policy{Effect: agent.EffectNonIdempotentWrite}
	noApproval := false
	read := agent.Policy{Effect: agent.EffectRead, RequiresApproval: &noApproval}
	s := inTurn(t, "pay")
	records, _ := s.ApplyModelOutcome(requested(TurnOptions{},
		ordered("w1", agent.Policy{Effect: agent.EffectIdempotentWrite, RequiresApproval: &noApproval}),
		call("r1", "ledger__read", "{}", read),
		ordered("w2", write),
		ordered("w3", write),
	), now)
	status := func() map[string]ToolCallStatus {
		out := map[string]ToolCallStatus{}
		for _, r := range records {
			out[r.ID] = r.Status
		}
		return out
	}
	want := map[string]ToolCallStatus{"w1": ToolCallApproved, "r1": ToolCallApproved, "w2": ToolCallWriteQueued, "w3": ToolCallWriteQueued}
	if got := status(); !maps.Equal(got, want) {
		t.Fatalf("statuses = %v, want %v", got, want)
	}
	if len(s.Interrupts) != 0 {
		t.Errorf("a queued write asked for approval before its turn: %v", s.Interrupts)
	}
	if s.WriteReleasable("w2") || s.ReleaseWrite("w2", now) != nil {
		t.Error("w2 was released while w1 runs")
	}
	// w1 succeeds: w2 is admitted and asks for approval only now; w3 waits.
	s.RecordToolOutcome("w1", ToolOutcome{Kind: ToolResultSucceeded, Output: "ok"})
	if !s.WriteReleasable("w2") || s.WriteReleasable("w3") {
		t.Fatal("w2 is not releasable after w1, or w3 is before w2")
	}
	wantEvents(t, s.ReleaseWrite("w2", now), EventInterruptRaised)
	if records[2].Status != ToolCallAwaitingApproval {
		t.Errorf("w2 = %s, want awaiting_approval", records[2].Status)
	}
	// w2 is rejected: w3 is skipped as not run.
	if _, err := s.Resolve(ResolveRequest{InterruptID: "w2", Approved: false}, now); err != nil {
		t.Fatal(err)
	}
	wantEvents(t, s.ReleaseWrite("w3", now), EventToolCallFinished)
	if r := records[3]; r.Status != ToolCallFailed || r.Error != ToolCallNotRunPrefix+": "+SkippedAfterWriteDetail {
		t.Errorf("w3 = %s %q, want failed as skipped", r.Status, r.Error)
	}
}

func TestASteerSettlesQueuedWrites(t *testing.T) {
	now := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	noApproval := false
	write := agent.Policy{Effect: agent.EffectNonIdempotentWrite, RequiresApproval: &noApproval}
	s := inTurn(t, "pay")
	records, _ := s.ApplyModelOutcome(requested(TurnOptions{}, ordered("w1", write), ordered("w2", write)), now)
	if _, err := s.CancelTurn(CancelRequest{TurnID: s.Turn.ID}, now); err != nil {
		t.Fatal(err)
	}
	if r := records[1]; r.Status != ToolCallRejected || r.CancellationReason != CancelledByUser {
		t.Errorf("the queued write = %s (%s), want rejected as cancelled", r.Status, r.CancellationReason)
	}
	if records[0].Status != ToolCallApproved {
		t.Errorf("the running write = %s, want it left to its Step", records[0].Status)
	}
}
