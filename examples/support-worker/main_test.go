package main

import (
	"context"
	"encoding/json"
	"reflect"
	"testing"
	"time"

	"github.com/stepwise-run/stepwise/internal/engine"
	"github.com/stepwise-run/stepwise/internal/enginetest"
	"github.com/stepwise-run/stepwise/internal/loop"
	"github.com/stepwise-run/stepwise/internal/tenancy"
	"github.com/stepwise-run/stepwise/internal/version"
	"github.com/stepwise-run/stepwise/pkg/agent"
	"github.com/stepwise-run/stepwise/pkg/client"
	"github.com/stepwise-run/stepwise/pkg/worker"
	"github.com/stepwise-run/stepwise/pkg/workerconfig"
)

const waitLong = 30 * time.Second

// conversation builds a model request from messages in order.
func conversation(messages ...agent.Message) agent.ModelRequest {
	for i := range messages {
		messages[i].Sequence = int64(i + 1)
	}
	return agent.ModelRequest{Input: messages}
}

func user(text string) agent.Message { return agent.Message{Role: agent.RoleUser, Text: text} }

func calls(id, name, args string) agent.Message {
	return agent.Message{Role: agent.RoleAssistant, ToolCalls: []agent.ToolCall{{ID: id, Name: name, Arguments: args}}}
}

func result(id, name, output string) agent.Message {
	return agent.Message{Role: agent.RoleTool, ToolCallID: id, ToolName: name, Text: output}
}

func answer(text string) agent.Message { return agent.Message{Role: agent.RoleAssistant, Text: text} }

const order7 = `{"order_id":"7","status":"delivered","total_cents":4200}`

func TestSupportDemo(t *testing.T) {
	tests := []struct {
		name string
		req  agent.ModelRequest
		want agent.ScriptedReply
	}{
		{
			name: "a refund request looks the order up",
			req:  conversation(user("Please refund order 7")),
			want: agent.ScriptedReply{ToolCalls: []agent.ScriptedToolCall{{Name: "lookup_order", Arguments: lookupArgs{OrderID: "7"}}}},
		},
		{
			name: "a refund request in capitals looks the order up",
			req:  conversation(user("REFUND ORDER 8 today")),
			want: agent.ScriptedReply{ToolCalls: []agent.ScriptedToolCall{{Name: "lookup_order", Arguments: lookupArgs{OrderID: "8"}}}},
		},
		{
			name: "another message gets the stock demo reply",
			req:  conversation(user("hello")),
			want: agent.ScriptedReply{Text: "Demo reply: hello"},
		},
		{
			name: "a looked-up order is refunded in full",
			req: conversation(user("Please refund order 7"),
				calls("c1", "lookup_order", `{"order_id":"7"}`), result("c1", "lookup_order", order7)),
			want: agent.ScriptedReply{
				Text:      "Order 7 is delivered; I will refund 4200 cents.",
				ToolCalls: []agent.ScriptedToolCall{{Name: "refund_order", Arguments: refundArgs{OrderID: "7", AmountCents: 4200}}},
			},
		},
		{
			name: "a lookup that returned no order is reported",
			req: conversation(user("Please refund order 9"),
				calls("c1", "lookup_order", `{"order_id":"9"}`), result("c1", "lookup_order", "The tool call failed: no order 9")),
			want: agent.ScriptedReply{Text: "I could not look the order up: The tool call failed: no order 9"},
		},
		{
			name: "a refund result is reported",
			req: conversation(user("Please refund order 7"),
				calls("c1", "lookup_order", `{"order_id":"7"}`), result("c1", "lookup_order", order7),
				calls("c2", "refund_order", `{"order_id":"7","amount_cents":4200}`),
				result("c2", "refund_order", "refund rf-1-7 of 4200 cents for order 7")),
			want: agent.ScriptedReply{Text: "Refund result: refund rf-1-7 of 4200 cents for order 7"},
		},
		{
			name: "a rejected refund is reported",
			req: conversation(user("Please refund order 7"),
				calls("c1", "lookup_order", `{"order_id":"7"}`), result("c1", "lookup_order", order7),
				calls("c2", "refund_order", `{"order_id":"7","amount_cents":4200}`),
				result("c2", "refund_order", "The user rejected the tool call: not today")),
			want: agent.ScriptedReply{Text: "Refund result: The user rejected the tool call: not today"},
		},
		{
			name: "a later message ignores the earlier turn's tool results",
			req: conversation(user("Please refund order 7"),
				calls("c1", "lookup_order", `{"order_id":"7"}`), result("c1", "lookup_order", order7),
				answer("Order 7 is delivered."), user("thanks")),
			want: agent.ScriptedReply{Text: "Demo reply: thanks"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := SupportDemo(tt.req)
			if err != nil {
				t.Fatalf("SupportDemo() = %v", err)
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("SupportDemo() = %+v, want %+v", got, tt.want)
			}
		})
	}
}

func tool(t *testing.T, tools []agent.Tool, name string) agent.Tool {
	t.Helper()
	for _, tl := range tools {
		if tl.Name == name {
			return tl
		}
	}
	t.Fatalf("Tools() has no %s", name)
	return agent.Tool{}
}

func TestLookupOrderReadsAndFailsForAnUnknownOrder(t *testing.T) {
	lookup := tool(t, Tools(), "lookup_order")
	if lookup.Policy.Effect != agent.EffectRead || lookup.Policy.ApprovalRequired() {
		t.Errorf("lookup_order policy = %+v, want a read without approval", lookup.Policy)
	}
	out, err := lookup.Call(context.Background(), agent.ToolContext{}, `{"order_id":"7"}`)
	if err != nil || out.Output != order7 {
		t.Errorf("lookup_order(7) = %q, %v; want %s", out.Output, err, order7)
	}
	_, err = lookup.Call(context.Background(), agent.ToolContext{}, `{"order_id":"9"}`)
	if e, ok := agent.IsExecutionError(err); !ok || e.Message != "no order 9" {
		t.Errorf("lookup_order(9) = %v, want the failure %q", err, "no order 9")
	}
}

func TestRefundOrderRefundsOncePerIdempotencyKey(t *testing.T) {
	refund := tool(t, Tools(), "refund_order")
	if refund.Policy.Effect != agent.EffectNonIdempotentWrite || !refund.Policy.ApprovalRequired() {
		t.Errorf("refund_order policy = %+v, want a non-idempotent write that waits for approval", refund.Policy)
	}
	call := func(key, args string) (string, error) {
		out, err := refund.Call(context.Background(), agent.ToolContext{IdempotencyKey: key}, args)
		return out.Output, err
	}
	args := `{"order_id":"7","amount_cents":4200}`
	first, err := call("s1/turn-1/c2", args)
	if err != nil || first != "refund rf-1-7 of 4200 cents for order 7" {
		t.Fatalf("the first refund = %q, %v", first, err)
	}
	if again, err := call("s1/turn-1/c2", args); err != nil || again != first {
		t.Errorf("a repeat with the same key = %q, %v; want the same refund %q", again, err, first)
	}
	if other, err := call("s2/turn-1/c2", args); err != nil || other != "refund rf-2-7 of 4200 cents for order 7" {
		t.Errorf("a refund with another key = %q, %v; want a new refund", other, err)
	}
	if _, err := call("s3/turn-1/c2", `{"order_id":"9","amount_cents":1}`); err == nil {
		t.Error("a refund of an unknown order succeeded")
	} else if e, ok := agent.IsExecutionError(err); !ok || e.Message != "no order 9" {
		t.Errorf("a refund of an unknown order = %v, want the failure %q", err, "no order 9")
	}
}

// startSupportWorker runs the example's agent, built from a worker
// configuration whose model is the "support-demo" script, on a dev server.
func startSupportWorker(t *testing.T, flowType string) *client.Sessions {
	t.Helper()
	server := enginetest.StartDevServer(t)
	cfg := workerconfig.Config{
		APIVersion: workerconfig.APIVersion, Kind: workerconfig.Kind,
		Agent:    workerconfig.AgentRef{Namespace: "team", Name: "support"},
		FlowType: flowType, EngineVersion: version.EngineVersion, TaskSlots: 10,
		Engine: workerconfig.Engine{Address: server.FrontendHostPort(), Namespace: "default", TaskQueue: tenancy.Tenant("team", flowType).TaskQueue()},
		Definition: workerconfig.Definition{
			Name: "support", Instructions: "You help customers with their orders.",
			Model:             workerconfig.Model{Provider: agent.ScriptedProvider, Name: "support-demo"},
			DefaultToolEffect: "unclassified",
			Limits:            workerconfig.Limits{MaxModelCallsPerTurn: 10},
		},
	}
	def, err := worker.Definition(cfg, worker.Options{Tools: Tools(), Scripts: map[string]agent.Script{"support-demo": SupportDemo}})
	if err != nil {
		t.Fatalf("worker.Definition() = %v", err)
	}
	runner, err := loop.New(def)
	if err != nil {
		t.Fatal(err)
	}
	w := engine.NewWorker(server.Client(), engine.WorkerOptions{
		FlowType: flowType, TaskQueue: cfg.Engine.TaskQueue, TaskSlots: int(cfg.TaskSlots), Runner: runner,
	})
	if err := w.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(w.Stop)
	return client.New(server.Client(), client.Agent{Namespace: "team", Name: "support", FlowType: flowType})
}

// waitForRefundApproval waits until the session asks to approve
// refund_order and returns that interrupt and the snapshot.
func waitForRefundApproval(t *testing.T, sessions *client.Sessions, id string) (client.Interrupt, client.Snapshot) {
	t.Helper()
	var (
		found client.Interrupt
		snap  client.Snapshot
	)
	enginetest.Eventually(t, waitLong, "the refund to wait for approval", func() (bool, error) {
		var err error
		snap, err = sessions.Snapshot(context.Background(), id)
		if err != nil {
			return false, err
		}
		for _, in := range snap.PendingInterrupts {
			if in.Kind == client.InterruptApproval && in.ToolName == "refund_order" {
				found = in
				return true, nil
			}
		}
		return false, nil
	})
	return found, snap
}

// lastMessage waits until the session's first turn ends and returns its
// last message.
func lastMessage(t *testing.T, sessions *client.Sessions, id string) string {
	t.Helper()
	var last string
	enginetest.Eventually(t, waitLong, "the turn to end", func() (bool, error) {
		snap, err := sessions.Snapshot(context.Background(), id)
		if err != nil || snap.State == nil || snap.State.TurnCount < 1 || snap.State.ActiveTurnID != "" {
			return false, err
		}
		if snap.State.LastTurnError != "" {
			t.Fatalf("the turn failed: %s", snap.State.LastTurnError)
		}
		last = snap.Messages[len(snap.Messages)-1].Text
		return true, nil
	})
	return last
}

func TestARefundLooksTheOrderUpWithoutApprovalAndRefundsOnceApproved(t *testing.T) {
	sessions := startSupportWorker(t, "SupportRefundApproved")
	ctx := context.Background()
	if ok, err := sessions.Start(ctx, "refund-approved", "Please refund order 7"); !ok || err != nil {
		t.Fatalf("Start() = %v, %v", ok, err)
	}
	in, snap := waitForRefundApproval(t, sessions, "refund-approved")
	var args map[string]any
	if err := json.Unmarshal([]byte(in.Arguments), &args); err != nil {
		t.Fatalf("the approval's arguments %q are not JSON: %v", in.Arguments, err)
	}
	if want := map[string]any{"order_id": "7", "amount_cents": float64(4200)}; !reflect.DeepEqual(args, want) {
		t.Errorf("the approval's arguments = %v, want %v", args, want)
	}
	var lookup *client.ToolCall
	for i := range snap.ToolCalls {
		if snap.ToolCalls[i].Name == "lookup_order" {
			lookup = &snap.ToolCalls[i]
		}
	}
	if lookup == nil {
		t.Fatalf("the turn's tool calls %+v have no lookup_order", snap.ToolCalls)
	}
	if lookup.RequiresApproval || lookup.Effect != string(agent.EffectRead) || lookup.Status != "succeeded" || lookup.Output != order7 {
		t.Errorf("lookup_order = %+v, want a read that succeeded without approval with order 7", *lookup)
	}

	if ok, err := sessions.Approve(ctx, "refund-approved", in.ID); !ok || err != nil {
		t.Fatalf("Approve() = %v, %v", ok, err)
	}
	if last := lastMessage(t, sessions, "refund-approved"); last != "Refund result: refund rf-1-7 of 4200 cents for order 7" {
		t.Errorf("the last message is %q, want the refund result", last)
	}
}

func TestARejectedRefundTellsTheModelItWasRejected(t *testing.T) {
	sessions := startSupportWorker(t, "SupportRefundRejected")
	ctx := context.Background()
	if ok, err := sessions.Start(ctx, "refund-rejected", "Please refund order 8"); !ok || err != nil {
		t.Fatalf("Start() = %v, %v", ok, err)
	}
	in, _ := waitForRefundApproval(t, sessions, "refund-rejected")
	if in.Arguments != `{"order_id":"8","amount_cents":1999}` {
		t.Errorf("the approval's arguments = %s, want order 8's total", in.Arguments)
	}
	if ok, err := sessions.Reject(ctx, "refund-rejected", in.ID, "not this one"); !ok || err != nil {
		t.Fatalf("Reject() = %v, %v", ok, err)
	}
	want := "Refund result: The user rejected the tool call: not this one"
	if last := lastMessage(t, sessions, "refund-rejected"); last != want {
		t.Errorf("the last message is %q, want %q", last, want)
	}
}
