package mcp

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stepwise-run/stepwise/pkg/agent"
)

func TestAnInputRequestBecomesAQuestionAndItsAnswerReachesTheTask(t *testing.T) {
	cases := []struct {
		tool      string
		key       string
		question  string
		choices   []string
		freeText  bool
		answer    string
		wantSent  string
		wantFinal string
	}{
		{"jobs__approval_report", "publish-1", "Publish the report?", []string{"yes", "no"}, false, "yes",
			`accept {"publish":true}`, `approval_report answered {"publish":true}`},
		{"jobs__format_report", "format-1", "Which format?", []string{"pdf", "csv"}, false, "csv",
			`accept {"format":"csv"}`, `format_report answered {"format":"csv"}`},
		{"jobs__name_report", "name-1", "Name the report.", nil, true, "Q3 numbers",
			`accept {"name":"Q3 numbers"}`, `name_report answered {"name":"Q3 numbers"}`},
	}
	for _, c := range cases {
		t.Run(c.tool, func(t *testing.T) {
			src, ts := taskSource(t, PollInSession)
			poll, sc := taskCall(t, src, c.tool, agent.EffectRead)
			_, err := pollOnce(t, src, &poll, sc)
			var input *agent.InputRequest
			if !errors.As(err, &input) || input.Question != c.question || !slices.Equal(input.Choices, c.choices) || input.AllowsFreeText != c.freeText {
				t.Fatalf("poll = %v (%+v), want the question %q", err, input, c.question)
			}
			// A retried delivery attempt asks again rather than send.
			retry := poll
			retry.Attempt = 2
			retry.PendingAnswer = &agent.QuestionAnswer{QuestionID: "c1-input-1", Resolution: agent.QuestionAnswered, Answer: c.answer}
			if _, err := src.PollSourceTask(context.Background(), retry, sc); !errors.As(err, &input) {
				t.Fatalf("a retried delivery = %v, want the question again", err)
			}
			if slices.ContainsFunc(ts.Log(), func(l string) bool { return strings.HasPrefix(l, "update") }) {
				t.Fatalf("a retried attempt sent the answer: %v", ts.Log())
			}
			poll.PendingAnswer = retry.PendingAnswer
			if _, err := pollOnce(t, src, &poll, sc); !isPending(err) {
				t.Fatalf("the delivery poll = %v, want still running", err)
			}
			if !slices.Contains(ts.Log(), "update "+poll.TaskID+" "+c.key+" "+c.wantSent) {
				t.Errorf("the server got %v, want %q", ts.Log(), c.wantSent)
			}
			poll.PendingAnswer = nil
			if out, err := pollOnce(t, src, &poll, sc); err != nil || out != c.wantFinal {
				t.Errorf("the final poll = %q, %v; want %q", out, err, c.wantFinal)
			}
		})
	}
}

func TestADeclinedQuestionCancelsTheTask(t *testing.T) {
	src, ts := taskSource(t, PollInSession)
	poll, sc := taskCall(t, src, "jobs__approval_report", agent.EffectRead)
	write, writeCall := taskCall(t, src, "jobs__approval_report", agent.EffectIdempotentWrite)
	if _, err := pollOnce(t, src, &poll, sc); err == nil {
		t.Fatal("no question")
	}
	poll.PendingAnswer = &agent.QuestionAnswer{QuestionID: "c1-input-1", Resolution: agent.QuestionDeclined}
	if _, err := pollOnce(t, src, &poll, sc); !isPending(err) {
		t.Fatalf("the delivery poll = %v", err)
	}
	poll.PendingAnswer = nil
	if _, err := pollOnce(t, src, &poll, sc); !isFailed(err) || !strings.Contains(err.Error(), "cancelled") {
		t.Errorf("after the decline = %v, want failed as cancelled", err)
	}
	if !slices.Contains(ts.Log(), "update "+poll.TaskID+" publish-1 decline null") {
		t.Errorf("the server got %v", ts.Log())
	}
	// A write whose task is cancelled after a decline may have run.
	if _, err := pollOnce(t, src, &write, writeCall); err == nil {
		t.Fatal("no question")
	}
	write.PendingAnswer = &agent.QuestionAnswer{QuestionID: "c1-input-1", Resolution: agent.QuestionDeclined}
	if _, err := pollOnce(t, src, &write, writeCall); !isPending(err) {
		t.Fatalf("the delivery poll = %v", err)
	}
	write.PendingAnswer = nil
	if _, err := pollOnce(t, src, &write, writeCall); !isUnknown(err) {
		t.Errorf("a write after the decline = %v, want outcome unknown", err)
	}
}

func TestAnInputRequestNoQuestionFitsFailsAndCancelsTheTask(t *testing.T) {
	src, ts := taskSource(t, PollInSession)
	poll, sc := taskCall(t, src, "jobs__survey_report", agent.EffectRead)
	_, err := pollOnce(t, src, &poll, sc)
	if !isFailed(err) || err.Error() != inputRequestPrefix+" (an answer to 'Tell us about the report.')" {
		t.Errorf("poll = %v", err)
	}
	if ts.Status(poll.TaskID) != "cancelled" {
		t.Errorf("the task is %s, want cancelled", ts.Status(poll.TaskID))
	}
}

func TestARequestStillListedRightAfterItsAnswerReadsAsWorking(t *testing.T) {
	src, ts := taskSource(t, PollInSession)
	poll, sc := taskCall(t, src, "jobs__sticky_report", agent.EffectRead)
	if _, err := pollOnce(t, src, &poll, sc); err == nil {
		t.Fatal("no question")
	}
	poll.PendingAnswer = &agent.QuestionAnswer{QuestionID: "c1-input-1", Resolution: agent.QuestionAnswered, Answer: "no"}
	if _, err := pollOnce(t, src, &poll, sc); !isPending(err) {
		t.Fatalf("the delivery poll = %v", err)
	}
	poll.PendingAnswer = nil
	// Within the settle time the same request is the answered one.
	_, err := pollOnce(t, src, &poll, sc)
	if pending, ok := agent.IsTaskPending(err); !ok || pending.PollInterval != time.Second {
		t.Fatalf("right after the answer = %v, want still running a second apart", err)
	}
	// Past it, an identical request is a new question.
	state := readTaskState(poll.Continuation)
	past := time.Now().Add(-answerSettleTime - time.Second)
	state.AnsweredAt = &past
	poll.Continuation = state.encode()
	var input *agent.InputRequest
	if _, err := pollOnce(t, src, &poll, sc); !errors.As(err, &input) || input.Question != "Approve?" {
		t.Fatalf("after the settle time = %v, want the question again", err)
	}
	if !slices.Contains(ts.Log(), "update "+poll.TaskID+` approve-1 accept {"approve":false}`) {
		t.Errorf("the server got %v", ts.Log())
	}
}
