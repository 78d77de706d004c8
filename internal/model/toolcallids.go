package model

import (
	"fmt"
	"strings"

	"github.com/stepwise-run/stepwise/pkg/agent"
)

// UsableToolCallIDs gives every call whose ID the session would refuse
// one made from the request's turn, model call and the call's position in
// the response. A session refuses an empty ID, one with a "/", and one
// already used, in this response or by a tool call or result in the
// request's input (an earlier model call of the session); OpenAI-compatible
// servers send empty IDs (LM Studio, llama.cpp, Gemini's endpoint) or
// repeat call_0 across model calls (some proxies). The made-up ID depends
// only on the request and the position, so a retried model call makes up
// the same one; the first call keeps a usable provider ID.
func UsableToolCallIDs(req agent.ModelRequest, calls []agent.ToolCall) {
	used := map[string]bool{}
	for _, m := range req.Input {
		if m.ToolCallID != "" {
			used[m.ToolCallID] = true
		}
		for _, c := range m.ToolCalls {
			used[c.ID] = true
		}
	}
	for i := range calls {
		id := calls[i].ID
		if id == "" || strings.Contains(id, "/") || used[id] {
			id = madeUpToolCallID(req, i, used)
		}
		used[id] = true
		calls[i].ID = id
	}
}

// madeUpToolCallID is call_<turn>_<model call>_<position>, with a suffix
// in the unlikely case the provider already used that name.
func madeUpToolCallID(req agent.ModelRequest, position int, used map[string]bool) string {
	turn := strings.ReplaceAll(req.TurnID, "/", "_")
	if turn == "" {
		turn = "turn"
	}
	base := fmt.Sprintf("call_%s_%d_%d", turn, req.ModelCall, position)
	id := base
	for n := 2; used[id]; n++ {
		id = fmt.Sprintf("%s_%d", base, n)
	}
	return id
}
