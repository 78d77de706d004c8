package session

import (
	"encoding/json"
	"testing"
)

func TestActivationsCarryTheirTraceContextToTheRecordsTheyDeferOrApprove(t *testing.T) {
	const first, second, third = "00-aa-01", "00-bb-01", "00-cc-01"
	s := inTurn(t, "Refund order 7")
	if prev := s.TraceActivation(first, ""); prev != "" {
		t.Errorf("the first activation links %q", prev)
	}
	if key, text := s.TurnInput(); key != 1 || text != "Refund order 7" {
		t.Errorf("TurnInput = %d %q", key, text)
	}
	records, _ := s.ApplyModelOutcome(requested(TurnOptions{}, call("c1", "refund", "{}", writePolicy), call("c2", "refund", "{}", writePolicy)), testNow)
	if len(records) != 2 {
		t.Fatalf("%d records", len(records))
	}
	tc, err := s.TurnContext(s.Turn.ID)
	if err == nil {
		t.Fatalf("the turn is still running a model call: %+v", tc)
	}
	for _, r := range records {
		if r.TraceContext != first {
			t.Errorf("%s carries %q, want the deferring activation's %q", r.ID, r.TraceContext, first)
		}
	}
	// Two approvals, each its own activation: each call runs in the trace
	// of the approval that let it run.
	cases := []struct {
		traceparent, call, previous string
	}{
		{second, "c2", first},
		{third, "c1", second},
	}
	for i, c := range cases {
		if prev := s.TraceActivation(c.traceparent, c.call); prev != c.previous {
			t.Errorf("activation %d links %q, want %q", i+2, prev, c.previous)
		}
	}
	if c1, c2 := s.Turn.ToolCall("c1"), s.Turn.ToolCall("c2"); c1.TraceContext != third || c2.TraceContext != second {
		t.Errorf("records carry %q and %q, want %q and %q", c1.TraceContext, c2.TraceContext, third, second)
	}
	// A worker that traces nothing deletes the stored context.
	if prev := s.TraceActivation("", ""); prev != third || s.TraceContext != "" {
		t.Errorf("an untraced activation left %q (previous %q)", s.TraceContext, prev)
	}
	// The records' contexts travel with the state into a new run.
	doc, err := json.Marshal(s)
	if err != nil {
		t.Fatal(err)
	}
	var carried State
	if err := json.Unmarshal(doc, &carried); err != nil {
		t.Fatal(err)
	}
	if got := carried.Turn.ToolCall("c1").TraceContext; got != third {
		t.Errorf("carried c1 %q, want %q", got, third)
	}
}

func TestAModelCallReadsTheActivationsTraceContext(t *testing.T) {
	s := inTurn(t, "hi")
	s.TraceActivation("00-aa-01", "")
	tc, err := s.TurnContext(s.Turn.ID)
	if err != nil {
		t.Fatal(err)
	}
	if tc.TraceContext != "00-aa-01" {
		t.Errorf("the turn context carries %q", tc.TraceContext)
	}
}
