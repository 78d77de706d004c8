package engine

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stepwise-run/stepwise/internal/contract"
	"github.com/stepwise-run/stepwise/internal/session"
	"github.com/stepwise-run/stepwise/internal/sessionrpc"
	"github.com/stepwise-run/stepwise/pkg/agent"
)

// jobs is a remote job system a task tool drives: a job finishes after a
// number of polls, and may ask one question first.
type jobs struct {
	mu        sync.Mutex
	started   int
	polls     []agent.TaskPoll
	cancelled []string
	doneAfter int
	question  bool
	answers   []agent.QuestionAnswer
	// failPolls and failCancels make every poll or cancellation fail.
	failPolls, failCancels bool
}

func (j *jobs) PollTask(_ context.Context, p agent.TaskPoll) (string, error) {
	j.mu.Lock()
	defer j.mu.Unlock()
	j.polls = append(j.polls, p)
	if j.failPolls {
		return "", errors.New("the job system is down")
	}
	if p.PendingAnswer != nil {
		j.answers = append(j.answers, *p.PendingAnswer)
	}
	if j.question && len(j.answers) == 0 {
		if p.Continuation == "q1" {
			return "", agent.StillRunning(time.Minute, "q1")
		}
		return "", &agent.InputRequest{Question: "Include drafts?", Choices: []string{"yes", "no"}, Continuation: "q1"}
	}
	if len(j.polls) < j.doneAfter {
		return "", agent.StillRunning(time.Duration(len(j.polls))*10*time.Second+300*time.Millisecond, "")
	}
	answer := ""
	if len(j.answers) > 0 {
		answer = " with drafts " + j.answers[0].Answer
	}
	return "report ready" + answer, nil
}

func (j *jobs) CancelTask(_ context.Context, p agent.TaskPoll) error {
	j.mu.Lock()
	defer j.mu.Unlock()
	j.cancelled = append(j.cancelled, p.TaskID)
	if j.failCancels {
		return errors.New("the job system is down")
	}
	return nil
}

func (j *jobs) tool(effect agent.Effect) agent.Tool {
	return agent.MustTool("build_report", "Builds a report.", effect,
		func(_ context.Context, c agent.ToolContext, _ struct{}) (string, error) {
			j.mu.Lock()
			defer j.mu.Unlock()
			j.started++
			c.SaveCheckpoint("job-1")
			return "", agent.StartTask("job-1", 5*time.Second)
		}, agent.WithTaskPoller(j), agent.WithApproval(false))
}

func reportModel() *agent.ScriptedModel {
	return steerableModel(toolCall("c1", "build_report", map[string]any{}))
}

func TestATaskIsPolledOnTimersUntilItIsDone(t *testing.T) {
	j := &jobs{doneAfter: 3}
	h := newHarness(t, agent.Definition{Name: "t", Model: reportModel(), Tools: []agent.Tool{j.tool(agent.EffectIdempotentWrite)}})
	h.gap = 5 * time.Minute
	h.then(func() {
		snap := h.snapshot()
		if snap.State.ActiveTurnID != "" || snap.Messages[len(snap.Messages)-1].Text != "done" {
			t.Fatalf("state %+v, messages %q", snap.State, transcript(snap))
		}
		if got := snap.Messages[2].Text; got != "report ready" {
			t.Errorf("the call's result = %q", got)
		}
	})
	h.run("report")
	if j.started != 1 || len(j.polls) != 3 {
		t.Errorf("started %d, polled %d; want 1 and 3", j.started, len(j.polls))
	}
	if j.polls[0].TaskID != "job-1" || j.polls[0].IdempotencyKey == "" {
		t.Errorf("first poll = %+v", j.polls[0])
	}
	if started := h.events.ofType(session.EventToolTaskStarted); len(started) != 1 {
		t.Errorf("tool_task_started events = %d", len(started))
	}
}

func TestATaskQuestionGoesBackToTheTaskOnce(t *testing.T) {
	j := &jobs{question: true, doneAfter: 1}
	h := newHarness(t, agent.Definition{Name: "t", Model: reportModel(), Tools: []agent.Tool{j.tool(agent.EffectRead)}})
	h.then(func() {
		snap := h.snapshot()
		if len(snap.PendingInterrupts) != 1 || snap.PendingInterrupts[0].ID != "c1-input-1" {
			t.Fatalf("interrupts = %+v", snap.PendingInterrupts)
		}
		// A steer waits for a started task, its question included.
		h.expect(sessionrpc.UpdateSteerUserMessage, session.SteerRequest{Text: "hurry"}, true)
	})
	h.then(func() {
		if len(h.snapshot().PendingInterrupts) != 1 {
			t.Fatal("the steer ended the task's question")
		}
		h.expect(sessionrpc.UpdateAnswerQuestion, session.AnswerRequest{InterruptID: "c1-input-1", Answer: "yes"}, true)
	})
	h.then(func() {
		snap := h.snapshot()
		want := []string{"turn-1 user: report", "turn-1 assistant: ", "turn-1 tool: report ready with drafts yes", "turn-2 user: hurry", "turn-2 assistant: now: hurry"}
		if got := transcript(snap); !slices.Equal(got, want) {
			t.Errorf("messages = %q, want %q", got, want)
		}
	})
	h.run("report")
	if len(j.answers) != 1 || j.answers[0].QuestionID != "c1-input-1" || j.answers[0].Resolution != agent.QuestionAnswered {
		t.Errorf("answers delivered = %+v, want the answer once", j.answers)
	}
	// The poll right after the answer reads the question's continuation.
	var withAnswer []string
	for _, p := range j.polls {
		if p.PendingAnswer != nil {
			withAnswer = append(withAnswer, p.Continuation)
		}
	}
	if !slices.Equal(withAnswer, []string{"q1"}) {
		t.Errorf("polls with the answer read continuations %q", withAnswer)
	}
}

func TestCancelTurnAbandonsAStartedTask(t *testing.T) {
	j := &jobs{doneAfter: 100}
	h := newHarness(t, agent.Definition{Name: "t", Model: reportModel(), Tools: []agent.Tool{j.tool(agent.EffectNonIdempotentWrite)}})
	h.then(func() {
		if r := recordsByID(h.snapshot())["c1"]; r.Status != session.ToolCallWaitingForTask || r.TaskID != "job-1" {
			t.Fatalf("c1 = %+v", r)
		}
		h.expect(sessionrpc.UpdateCancelTurn, session.CancelRequest{TurnID: "turn-1"}, true)
	})
	h.then(func() {
		snap := h.snapshot()
		if snap.State.ActiveTurnID != "" {
			t.Fatalf("state = %+v", snap.State)
		}
		if got := snap.Messages[2].Text; got != session.OutcomeUnknownText+" ("+session.TaskAbandonedText+")" {
			t.Errorf("the abandoned call's result = %q", got)
		}
	})
	h.run("report")
	if !slices.Equal(j.cancelled, []string{"job-1"}) {
		t.Errorf("cancelled tasks = %v, want job-1 once", j.cancelled)
	}
	polls := len(j.polls)
	if polls == 0 || polls > 10 {
		t.Errorf("polled %d times", polls)
	}
}

func TestATaskToolWithoutAPollerFailsByItsEffect(t *testing.T) {
	for _, effect := range []agent.Effect{agent.EffectRead, agent.EffectNonIdempotentWrite} {
		t.Run(string(effect), func(t *testing.T) {
			tool := agent.MustTool("build_report", "Builds a report.", effect,
				func(context.Context, agent.ToolContext, struct{}) (string, error) {
					return "", agent.StartTask("job-1", time.Second)
				}, agent.WithApproval(false))
			h := newHarness(t, agent.Definition{Name: "t", Model: reportModel(), Tools: []agent.Tool{tool}})
			h.then(func() {
				snap := h.snapshot()
				want := "The tool call failed: " + contract.MissingTaskPollerText("build_report")
				if effect != agent.EffectRead {
					want = session.OutcomeUnknownText + " (" + contract.MissingTaskPollerText("build_report") + ")"
				}
				if got := snap.Messages[2].Text; got != want {
					t.Errorf("result = %q, want %q", got, want)
				}
			})
			h.run("report")
		})
	}
}
