package session

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/stepwise-run/stepwise/pkg/agent"
)

// TestStoredAgentTypesKeepTheirJSON pins the JSON of the pkg/agent types
// that session state and recorded histories hold (effects, built-in tool
// names, policies, Step limits, question answers): these are what a worker
// author writes, so a change to them that changes this JSON changes stored
// state, and must come with an engine version that replays the old shape.
func TestStoredAgentTypesKeepTheirJSON(t *testing.T) {
	approval := true
	answer := agent.QuestionAnswer{QuestionID: "c1-input-1", Question: "Which?", Resolution: agent.QuestionDeadlinePassed, Answer: "a"}
	limit := &agent.StepLimit{AttemptTimeout: time.Second, MaxAttempts: 2, Within: time.Minute}
	for _, c := range []struct {
		name string
		v    any
		want string
	}{
		{"a tool call record", ToolCallRecord{
			ID: "c1", Effect: agent.EffectNonIdempotentWrite, BuiltIn: agent.BuiltInAskUser, StepLimit: limit,
			InputAnswers: []agent.QuestionAnswer{answer}, TaskAnswer: &answer,
		}, `{"id":"c1","name":"","arguments":"","order":0,"effect":"non_idempotent_write","requiresApproval":false,"builtIn":"ask_user",` +
			`"stepLimit":{"attemptTimeout":1000000000,"maxAttempts":2,"within":60000000000},"status":"",` +
			`"inputAnswers":[{"questionId":"c1-input-1","question":"Which?","resolution":"deadline_passed","answer":"a"}],` +
			`"taskAnswer":{"questionId":"c1-input-1","question":"Which?","resolution":"deadline_passed","answer":"a"}}`},
		{"a deferred tool call", DeferredToolCall{
			ID: "c1", Policy: agent.Policy{Effect: agent.EffectRead, RequiresApproval: &approval}, StepLimit: limit,
		}, `{"id":"c1","name":"","arguments":"","policy":{"effect":"read","requiresApproval":true},` +
			`"stepLimit":{"attemptTimeout":1000000000,"maxAttempts":2,"within":60000000000}}`},
		{"turn options", TurnOptions{BuiltInTools: []agent.BuiltInTool{agent.BuiltInDurableWait, agent.BuiltInWriteTodos}},
			`{"builtInTools":["durable_wait","write_todos"]}`},
	} {
		got, err := json.Marshal(c.v)
		if err != nil {
			t.Fatal(err)
		}
		if string(got) != c.want {
			t.Errorf("%s is stored as\n%s\nwant\n%s", c.name, got, c.want)
		}
	}
}
