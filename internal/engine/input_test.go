package engine

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/mock"

	"github.com/stepwise-run/stepwise/internal/session"
	"github.com/stepwise-run/stepwise/internal/sessionrpc"
	"github.com/stepwise-run/stepwise/pkg/agent"
)

type sizeArgs struct {
	Item string `json:"item"`
}

// sizeTool asks which size before it orders, and orders with the answer.
func sizeTool(log *callLog) agent.Tool {
	return agent.MustTool("order_item", "Order an item in a size.", agent.EffectNonIdempotentWrite,
		func(_ context.Context, call agent.ToolContext, a sizeArgs) (string, error) {
			log.add(call)
			if len(call.Answers) == 0 {
				return "", &agent.InputRequest{Question: "Which size of " + a.Item + "?", Choices: []string{"S", "M"}, Continuation: "size"}
			}
			last := call.Answers[len(call.Answers)-1]
			if last.Resolution != agent.QuestionAnswered {
				return "", agent.Failed("no size: the question was %s", last.Resolution)
			}
			return "ordered " + a.Item + " in " + last.Answer + " (" + call.Continuation + ")", nil
		}, agent.WithApproval(false))
}

func TestAToolQuestionIsAskedAndTheToolRunsAgainWithTheAnswer(t *testing.T) {
	for _, tc := range []struct {
		name    string
		resolve func(h *harness)
		want    string
	}{
		{"answered", func(h *harness) {
			h.expect(sessionrpc.UpdateAnswerQuestion, session.AnswerRequest{InterruptID: "c1-input-1", Answer: "M"}, true)
		}, "ordered shirt in M (size)"},
		{"declined", func(h *harness) {
			h.expect(sessionrpc.UpdateResolveInterrupt, session.ResolveRequest{InterruptID: "c1-input-1"}, true)
		}, "The tool call failed: no size: the question was declined"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var log callLog
			model := script(
				agent.ScriptedReply{ToolCalls: []agent.ScriptedToolCall{toolCall("c1", "order_item", sizeArgs{Item: "shirt"})}},
				agent.ScriptedReply{Text: "done"},
			)
			h := newHarness(t, agent.Definition{Name: "t", Model: model, Tools: []agent.Tool{sizeTool(&log)}})
			h.then(func() {
				snap := h.snapshot()
				if len(snap.PendingInterrupts) != 1 {
					t.Fatalf("interrupts = %+v, want the tool's question", snap.PendingInterrupts)
				}
				in := snap.PendingInterrupts[0]
				if in.ID != "c1-input-1" || in.Kind != session.InterruptQuestion || in.ToolCallID != "c1" || in.Question.Text != "Which size of shirt?" {
					t.Errorf("interrupt = %+v", in)
				}
				if snap.ToolCalls[0].Status != session.ToolCallAwaitingAnswer {
					t.Errorf("record status = %s, want awaiting_answer", snap.ToolCalls[0].Status)
				}
				h.expect(sessionrpc.UpdateAnswerQuestion, session.AnswerRequest{InterruptID: "c1-input-1", Answer: "XL"}, false)
				tc.resolve(h)
			})
			h.then(func() {
				page := h.messages(session.ListMessagesRequest{Limit: 10})
				var result string
				for _, m := range page.Messages {
					if m.Role == session.RoleTool && m.ToolCallID == "c1" {
						result = m.Text
					}
				}
				if result != tc.want {
					t.Errorf("tool result = %q, want %q", result, tc.want)
				}
			})
			h.run("order a shirt")
			if log.count() != 2 {
				t.Fatalf("the tool ran %d times, want twice: asking, then with the answer", log.count())
			}
			second := log.calls[1]
			if len(second.Answers) != 1 || second.Answers[0].QuestionID != "c1-input-1" || second.Continuation != "size" {
				t.Errorf("second run's context = %+v", second)
			}
			if !strings.HasSuffix(second.IdempotencyKey, "/turn-1/c1") || second.IdempotencyKey != log.calls[0].IdempotencyKey {
				t.Errorf("idempotency keys = %q, %q", log.calls[0].IdempotencyKey, second.IdempotencyKey)
			}
			steps := map[string]bool{}
			for _, e := range h.events.ofType(session.EventToolCallStarted) {
				steps[e.StepExecutionID] = true
			}
			if len(steps) != 2 {
				t.Errorf("tool Step executions = %v, want two: the question returns the call to its tool Step", steps)
			}
		})
	}
}

func TestAToolsOwnStepLimitSetsItsAttempts(t *testing.T) {
	for _, tc := range []struct {
		effect agent.Effect
		limit  agent.StepLimit
		want   int
	}{
		{agent.EffectRead, agent.StepLimit{MaxAttempts: 5}, 5},
		{agent.EffectIdempotentWrite, agent.StepLimit{MaxAttempts: 1}, 1},
		{agent.EffectNonIdempotentWrite, agent.StepLimit{MaxAttempts: 5}, 1},
	} {
		t.Run(string(tc.effect), func(t *testing.T) {
			var log callLog
			flaky := agent.MustTool("flaky", "Always fails.", tc.effect,
				func(_ context.Context, call agent.ToolContext, _ sizeArgs) (string, error) {
					log.add(call)
					return "", errors.New("down")
				}, agent.WithStepLimit(tc.limit), agent.WithApproval(false))
			model := script(
				agent.ScriptedReply{ToolCalls: []agent.ScriptedToolCall{toolCall("c1", "flaky", sizeArgs{Item: "x"})}},
				agent.ScriptedReply{Text: "done"},
			)
			h := newHarness(t, agent.Definition{Name: "t", Model: model, Tools: []agent.Tool{flaky}})
			h.run("go")
			if log.count() != tc.want {
				t.Errorf("the tool ran %d times, want %d", log.count(), tc.want)
			}
		})
	}
}

// failingModel fails every call with a ModelError and counts the calls.
type failingModel struct {
	err   *agent.ModelError
	calls int
}

func (m *failingModel) CallModel(context.Context, agent.ModelRequest, agent.OutputWriter) (agent.ModelResponse, error) {
	m.calls++
	return agent.ModelResponse{}, m.err
}

func (m *failingModel) EstimateInputTokens(agent.ModelRequest) int64 { return 0 }

func TestAModelErrorDecidesWhetherRunModelTriesAgain(t *testing.T) {
	for _, tc := range []struct {
		err   *agent.ModelError
		calls int
	}{
		{&agent.ModelError{Provider: "openai", StatusCode: 401, Message: "bad key"}, 1},
		{&agent.ModelError{Provider: "openai", StatusCode: 429, Retryable: true, RetryAfter: 7 * time.Second, Message: "slow down"}, 3},
	} {
		t.Run(tc.err.Message, func(t *testing.T) {
			model := &failingModel{err: tc.err}
			h := newHarness(t, agent.Definition{Name: "t", Model: model})
			h.then(func() {
				snap := h.snapshot()
				if snap.State.LastTurnError != tc.err.Error() {
					t.Errorf("last_turn_error = %q, want %q", snap.State.LastTurnError, tc.err.Error())
				}
			})
			h.run("hi")
			if model.calls != tc.calls {
				t.Errorf("the model was called %d times, want %d", model.calls, tc.calls)
			}
		})
	}
}

// A tool's answer that commits before a steer moves its call on, and the
// tool Step then rejects the call instead of running the tool again: the
// order is never placed after the user steered away from it.
func TestAnAnsweredToolQuestionDoesNotRunTheToolAfterASteer(t *testing.T) {
	var log callLog
	h := newHarness(t, agent.Definition{Name: "t", Model: steerableModel(toolCall("c1", "order_item", sizeArgs{Item: "shirt"})),
		Tools: []agent.Tool{sizeTool(&log)}})
	// The tool Step the answer schedules starts ten seconds later, so the
	// steer sent with the answer always reaches the session before it.
	h.slowCall(session.StepCallSingleAttemptTool, 2, 10*time.Second)
	h.then(func() {
		h.expect(sessionrpc.UpdateAnswerQuestion, session.AnswerRequest{InterruptID: "c1-input-1", Answer: "M"}, true)
		h.expect(sessionrpc.UpdateSteerUserMessage, session.SteerRequest{Text: "no, a hat"}, true)
	})
	h.then(func() {
		snap := h.snapshot()
		if snap.State.TurnCount != 2 || snap.State.ActiveTurnID != "" || len(snap.PendingInterrupts) != 0 {
			t.Fatalf("state = %+v, interrupts %v; want the steered turn's successor finished", snap.State, snap.PendingInterrupts)
		}
		if texts := transcript(snap); !slices.Contains(texts, "turn-1 tool: "+session.SteeredResultText) {
			t.Errorf("messages = %q, want the order cancelled by the steer", texts)
		}
	})
	h.run("order a shirt")
	if log.count() != 1 {
		t.Fatalf("the tool ran %d times, want once: it asked, and the steer came before it ran with the answer", log.count())
	}
	if got := h.finishedStatus("c1"); got != session.ToolCallRejected {
		t.Errorf("c1 finished %s, want rejected", got)
	}
}

// A tool that asks a question once its turn was steered or cancelled asks
// nobody: it has taken no effect, so the call is rejected and the turn ends
// at once, rather than a cancelled turn waiting for a person.
func TestAToolQuestionAfterASteerOrCancelIsNotAsked(t *testing.T) {
	for _, tc := range []struct {
		name    string
		control func(h *harness)
		result  string
		turns   int
	}{
		{"steered", func(h *harness) {
			h.expect(sessionrpc.UpdateSteerUserMessage, session.SteerRequest{Text: "no, a hat"}, true)
		}, session.SteeredResultText, 2},
		{"cancelled", func(h *harness) {
			h.expect(sessionrpc.UpdateCancelTurn, session.CancelRequest{TurnID: "turn-1"}, true)
		}, session.CancelledResultText, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, agent.Definition{Name: "t", Model: steerableModel(toolCall("c1", "order_item", sizeArgs{Item: "shirt"})),
				Tools: []agent.Tool{sizeTool(&callLog{})}})
			// The tool Step started before the steer or cancel and returns
			// its question two minutes later, after it.
			h.env.OnActivity(string(session.StepCallSingleAttemptTool), mock.Anything, mock.Anything).
				AfterFn(func() time.Duration { return 2 * time.Minute }).
				Return(session.ToolOutcome{Kind: session.ToolResultInputRequested, Question: &session.Question{Text: "Which size?", Choices: []string{"S", "M"}}}, nil)
			h.then(func() { tc.control(h) })
			h.then(func() {}) // the question comes back
			h.then(func() {
				snap := h.snapshot()
				if snap.State.ActiveTurnID != "" || snap.State.TurnCount != tc.turns || len(snap.PendingInterrupts) != 0 {
					t.Fatalf("state = %+v, interrupts %v; want turn 1 ended and no question", snap.State, snap.PendingInterrupts)
				}
				if texts := transcript(snap); !slices.Contains(texts, "turn-1 tool: "+tc.result) {
					t.Errorf("messages = %q, want %s", texts, tc.result)
				}
			})
			h.run("order a shirt")
			if got := h.finishedStatus("c1"); got != session.ToolCallRejected {
				t.Errorf("c1 finished %s, want rejected", got)
			}
			if n := len(h.events.ofType(session.EventInterruptRaised)); n != 0 {
				t.Errorf("%d interrupts raised, want none", n)
			}
		})
	}
}
