// Command support-worker is an example of a worker built on the public Go
// API: the stock worker plus two function tools of a support agent.
// lookup_order is a read, so it runs without approval and may run again
// after a crash; refund_order is a non-idempotent write, so it waits for a
// person's approval, runs in a single attempt, and passes the idempotency
// key to the payment system. Build an image from it and name the image in
// the Agent's spec.workers.image; the Agent's tool policies apply to these
// tools as to any other.
//
// With the scripted model "support-demo" it runs the demo without a model
// key: "refund order 7" looks the order up, asks to refund it, and reports.
package main

import (
	"context"
	"encoding/json"
	"fmt"
	"regexp"
	"sync"

	"github.com/stepwise-run/stepwise/pkg/agent"
	"github.com/stepwise-run/stepwise/pkg/worker"
)

// order is what lookup_order returns.
type order struct {
	OrderID    string `json:"order_id"`
	Status     string `json:"status"`
	TotalCents int    `json:"total_cents"`
}

type lookupArgs struct {
	OrderID string `json:"order_id" jsonschema:"The order's ID."`
}

type refundArgs struct {
	OrderID     string `json:"order_id" jsonschema:"The order's ID."`
	AmountCents int    `json:"amount_cents" jsonschema:"How much to refund, in cents."`
}

// payments stands in for a payment system that drops a repeated request
// with the same idempotency key.
type payments struct {
	mu      sync.Mutex
	refunds map[string]string
}

func (p *payments) refund(key string, a refundArgs) string {
	p.mu.Lock()
	defer p.mu.Unlock()
	if id, ok := p.refunds[key]; ok {
		return id
	}
	id := fmt.Sprintf("rf-%d-%s", len(p.refunds)+1, a.OrderID)
	p.refunds[key] = id
	return id
}

var orders = map[string]order{
	"7": {OrderID: "7", Status: "delivered", TotalCents: 4200},
	"8": {OrderID: "8", Status: "shipped", TotalCents: 1999},
}

// Tools returns the support agent's function tools.
func Tools() []agent.Tool {
	pay := &payments{refunds: map[string]string{}}
	lookup := agent.MustTool("lookup_order", "Look up an order by its ID.", agent.EffectRead,
		func(_ context.Context, _ agent.ToolContext, a lookupArgs) (order, error) {
			o, ok := orders[a.OrderID]
			if !ok {
				return order{}, agent.Failed("no order %s", a.OrderID)
			}
			return o, nil
		})
	refund := agent.MustTool("refund_order", "Refund part or all of an order.", agent.EffectNonIdempotentWrite,
		func(_ context.Context, call agent.ToolContext, a refundArgs) (string, error) {
			if _, ok := orders[a.OrderID]; !ok {
				return "", agent.Failed("no order %s", a.OrderID)
			}
			id := pay.refund(call.IdempotencyKey, a)
			return fmt.Sprintf("refund %s of %d cents for order %s", id, a.AmountCents, a.OrderID), nil
		})
	return []agent.Tool{lookup, refund}
}

var refundRequest = regexp.MustCompile(`(?i)refund order (\w+)`)

// SupportDemo is the scripted support model: it looks an order up, refunds
// its total, and reports what happened.
func SupportDemo(req agent.ModelRequest) (agent.ScriptedReply, error) {
	if results := agent.ToolResults(req); len(results) > 0 {
		last := results[len(results)-1]
		if last.ToolName == "lookup_order" {
			var o order
			if err := json.Unmarshal([]byte(last.Output), &o); err != nil {
				return agent.ScriptedReply{Text: "I could not look the order up: " + last.Output}, nil
			}
			return agent.ScriptedReply{
				Text:      fmt.Sprintf("Order %s is %s; I will refund %d cents.", o.OrderID, o.Status, o.TotalCents),
				ToolCalls: []agent.ScriptedToolCall{{Name: "refund_order", Arguments: refundArgs{OrderID: o.OrderID, AmountCents: o.TotalCents}}},
			}, nil
		}
		return agent.ScriptedReply{Text: "Refund result: " + last.Output}, nil
	}
	texts := agent.UserTexts(req)
	if len(texts) == 0 {
		return agent.DemoScript(req)
	}
	if m := refundRequest.FindStringSubmatch(texts[len(texts)-1]); m != nil {
		return agent.ScriptedReply{ToolCalls: []agent.ScriptedToolCall{{Name: "lookup_order", Arguments: lookupArgs{OrderID: m[1]}}}}, nil
	}
	return agent.DemoScript(req)
}

func main() {
	worker.Main(worker.Options{
		Tools:   Tools(),
		Scripts: map[string]agent.Script{"support-demo": SupportDemo},
	})
}
