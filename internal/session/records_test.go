package session

import (
	"testing"

	"github.com/stepwise-run/stepwise/pkg/agent"
)

func TestIdempotencyKey(t *testing.T) {
	if got := IdempotencyKey("s1", "turn-2", "c3"); got != "s1/turn-2/c3" {
		t.Errorf("IdempotencyKey = %q", got)
	}
}

func TestTurnOptionsEnabled(t *testing.T) {
	if !allBuiltIns.Enabled(agent.BuiltInDurableWait) {
		t.Error("durable_wait not enabled")
	}
	if (TurnOptions{BuiltInTools: []agent.BuiltInTool{agent.BuiltInAskUser}}).Enabled(agent.BuiltInDurableWait) {
		t.Error("durable_wait enabled by ask_user")
	}
}
