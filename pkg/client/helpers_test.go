package client_test

import (
	"context"
	"strings"
	"sync/atomic"

	"github.com/stepwise-run/stepwise/pkg/agent"
	"github.com/stepwise-run/stepwise/pkg/client"
)

// refundAgent is a refund_order tool that counts its runs, and a model that
// calls it, as call r1, for a message starting "refund" and echoes the
// last message otherwise.
func refundAgent(refunds *atomic.Int32) (agent.Tool, *agent.ScriptedModel) {
	refund := agent.MustTool("refund_order", "Refunds an order.", agent.EffectNonIdempotentWrite,
		func(context.Context, agent.ToolContext, struct{}) (string, error) {
			refunds.Add(1)
			return "refunded", nil
		})
	model := agent.NewScriptedModel(func(req agent.ModelRequest) (agent.ScriptedReply, error) {
		texts := agent.UserTexts(req)
		if len(agent.ToolResults(req)) > 0 || !strings.HasPrefix(texts[len(texts)-1], "refund") {
			return agent.ScriptedReply{Text: "echo " + texts[len(texts)-1]}, nil
		}
		return agent.ScriptedReply{ToolCalls: []agent.ScriptedToolCall{{ID: "r1", Name: "refund_order", Arguments: map[string]any{}}}}, nil
	})
	return refund, model
}

// testAgent is an Agent of the tests' namespace, whose workers poll its
// own task queue.
func testAgent(flowType string) client.Agent {
	return client.Agent{Namespace: "test", Name: strings.ToLower(flowType), UID: "uid-" + flowType, FlowType: flowType}
}
