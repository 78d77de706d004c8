package loop

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"testing"

	"github.com/stepwise-run/stepwise/internal/session"
	"github.com/stepwise-run/stepwise/pkg/agent"
)

func execution(name, args string, effect agent.Effect) session.ToolExecution {
	return session.ToolExecution{
		SessionID: "s1", TurnID: "turn-2",
		Call:           session.ToolCallRecord{ID: "c9", Name: name, Arguments: args, Effect: effect, Status: session.ToolCallApproved},
		IdempotencyKey: session.IdempotencyKey("s1", "turn-2", "c9"), Attempt: 2,
	}
}

func TestExecuteToolCall(t *testing.T) {
	plain := errors.New("connection reset")
	failing := func(err error) func(context.Context, agent.ToolContext, orderArgs) (string, error) {
		return func(context.Context, agent.ToolContext, orderArgs) (string, error) { return "ignored", err }
	}
	cases := []struct {
		name    string
		fn      func(context.Context, agent.ToolContext, orderArgs) (string, error)
		tool    string
		args    string
		want    session.ToolOutcome
		wantErr error
	}{
		{name: "succeeded", tool: "lookup", args: `{"order_id":"7"}`,
			want: session.ToolOutcome{Kind: session.ToolResultSucceeded, Output: "order 7"}},
		{name: "unknown tool", tool: "mystery", args: `{}`,
			want: session.ToolOutcome{Kind: session.ToolResultFailed, Error: "unknown tool mystery"}},
		{name: "arguments not JSON", tool: "lookup", args: `{"order_id"`,
			want: session.ToolOutcome{Kind: session.ToolResultFailed, Error: "invalid arguments for lookup: arguments are not valid JSON"}},
		{name: "tool execution error", tool: "lookup", args: `{"order_id":"7"}`, fn: failing(agent.Failed("order 7 not found")),
			want: session.ToolOutcome{Kind: session.ToolResultFailed, Error: "order 7 not found"}},
		{name: "wrapped tool execution error", tool: "lookup", args: `{"order_id":"7"}`, fn: failing(fmt.Errorf("lookup: %w", agent.Failed("gone"))),
			want: session.ToolOutcome{Kind: session.ToolResultFailed, Error: "gone"}},
		{name: "outcome unknown error", tool: "lookup", args: `{"order_id":"7"}`, fn: failing(agent.OutcomeUnknown("sent, no reply")),
			want: session.ToolOutcome{Kind: session.ToolResultOutcomeUnknown, Error: "sent, no reply"}},
		{name: "other error", tool: "lookup", args: `{"order_id":"7"}`, fn: failing(plain),
			wantErr: plain},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := newRunner(t, agent.Definition{Tools: []agent.Tool{lookupTool(t, c.fn)}})
			out, err := r.ExecuteToolCall(context.Background(), execution(c.tool, c.args, agent.EffectRead))
			if c.wantErr != nil {
				if !errors.Is(err, c.wantErr) || !reflect.DeepEqual(out, session.ToolOutcome{}) {
					t.Errorf("ExecuteToolCall = %+v, %v; want the error %v", out, err, c.wantErr)
				}
				return
			}
			if err != nil || !reflect.DeepEqual(out, c.want) {
				t.Errorf("ExecuteToolCall = %+v, %v; want %+v", out, err, c.want)
			}
		})
	}
}

func TestExecuteToolCallGivesTheToolItsContext(t *testing.T) {
	var seen agent.ToolContext
	tool := lookupTool(t, func(_ context.Context, call agent.ToolContext, a orderArgs) (string, error) {
		seen = call
		call.Heartbeat()
		call.Events.WriteEvent("order_checked", map[string]string{"order_id": a.OrderID})
		return "ok", nil
	})
	r := newRunner(t, agent.Definition{Tools: []agent.Tool{tool}})
	log := &eventLog{}
	exec := execution("lookup", `{"order_id":"7"}`, agent.EffectIdempotentWrite)
	exec.Events = log
	out, err := r.ExecuteToolCall(context.Background(), exec)
	if err != nil || out.Kind != session.ToolResultSucceeded {
		t.Fatalf("ExecuteToolCall = %+v, %v", out, err)
	}
	if seen.SessionID != "s1" || seen.TurnID != "turn-2" || seen.ToolCallID != "c9" || seen.IdempotencyKey != "s1/turn-2/c9" || seen.Attempt != 2 || seen.Effect != agent.EffectIdempotentWrite {
		t.Errorf("tool context = %+v", seen)
	}
	if len(log.events) != 1 || log.events[0].Type != "order_checked" || log.events[0].TurnID != "turn-2" || string(log.events[0].Payload) != `{"order_id":"7"}` {
		t.Errorf("tool events = %+v", log.events)
	}

	// Without an event writer or heartbeat, a tool still runs.
	exec.Events, exec.Heartbeat = nil, nil
	if out, err := r.ExecuteToolCall(context.Background(), exec); err != nil || out.Output != "ok" {
		t.Errorf("ExecuteToolCall without writer = %+v, %v", out, err)
	}
}

func TestExecuteToolCallHeartbeats(t *testing.T) {
	beats := 0
	tool := lookupTool(t, func(_ context.Context, call agent.ToolContext, _ orderArgs) (string, error) {
		call.Heartbeat()
		call.Heartbeat()
		return "ok", nil
	})
	r := newRunner(t, agent.Definition{Tools: []agent.Tool{tool}})
	exec := execution("lookup", `{"order_id":"7"}`, agent.EffectRead)
	exec.Heartbeat = func() { beats++ }
	if _, err := r.ExecuteToolCall(context.Background(), exec); err != nil {
		t.Fatal(err)
	}
	if beats != 2 {
		t.Errorf("heartbeats = %d, want 2", beats)
	}
}
