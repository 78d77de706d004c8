package mcp

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stepwise-run/stepwise/internal/tools/mcp/mcptest"
	"github.com/stepwise-run/stepwise/pkg/agent"
)

func TestNextPollInterval(t *testing.T) {
	ms := func(n int64) *Task { return &Task{PollIntervalMs: &n} }
	cases := []struct {
		previous time.Duration
		task     *Task
		want     time.Duration
	}{
		{0, nil, time.Second},
		{0, ms(1500), 2 * time.Second},
		{2 * time.Second, ms(1500), 4 * time.Second},
		{40 * time.Second, ms(1000), time.Minute},
		{time.Minute, ms(1000), time.Minute},
		{time.Second, ms(90_000), 90 * time.Second},
	}
	for _, c := range cases {
		if got := nextPollInterval(c.previous, c.task); got != c.want {
			t.Errorf("nextPollInterval(%s, %v) = %s, want %s", c.previous, c.task, got, c.want)
		}
	}
}

// taskSource is a source over the task server whose tasks the session
// polls, as for a Streamable HTTP server.
func taskSource(t *testing.T, polling TaskPolling) (*Source, *mcptest.TaskServer) {
	t.Helper()
	ts := mcptest.NewTaskServer(t)
	server := Server{Name: "jobs", TrustAnnotations: true, ConnectionTimeout: 5 * time.Second, RequestTimeout: time.Minute,
		TaskPolling: polling, Connect: HTTPConnect(ts.URL, nil)}
	if polling == PollInCall {
		ts.SetPollInterval(100 * time.Millisecond)
		server.Connect = ts.InMemory
	}
	src, err := NewSource(SourceOptions{Name: "jobs", Log: quiet(), Servers: []Server{server}})
	if err != nil {
		t.Fatal(err)
	}
	return src, ts
}

// taskCall calls a task tool and returns the task it started and the
// checkpoint its Step saved.
func taskCall(t *testing.T, src *Source, name string, effect agent.Effect) (agent.TaskPoll, agent.SourceCall) {
	t.Helper()
	tools := listed(t, src, agent.SourcePolicies{})
	sc := agent.SourceCall{Name: name, Reference: tools[name].Reference, Arguments: `{}`}
	var checkpoint string
	call := agent.ToolContext{SessionID: "s1", TurnID: "turn-1", ToolCallID: "c1", IdempotencyKey: "s1/turn-1/c1", Attempt: 1,
		Effect: effect, Heartbeat: func() {}, SaveCheckpoint: func(text string) { checkpoint = text }}
	_, err := src.CallTool(context.Background(), call, sc)
	started, ok := agent.IsTaskStarted(err)
	if !ok {
		t.Fatalf("%s: %v, want a started task", name, err)
	}
	if !strings.Contains(checkpoint, started.TaskID) {
		t.Errorf("the Step saved checkpoint %q, want the task %s", checkpoint, started.TaskID)
	}
	call.Checkpoint = checkpoint
	return agent.TaskPoll{ToolContext: call, TaskID: started.TaskID}, sc
}

// pollOnce polls and hands the continuation on, as the session does.
func pollOnce(t *testing.T, src *Source, poll *agent.TaskPoll, sc agent.SourceCall) (string, error) {
	t.Helper()
	res, err := src.PollSourceTask(context.Background(), *poll, sc)
	out := res.Output
	if pending, ok := agent.IsTaskPending(err); ok {
		poll.Continuation = pending.Continuation
	}
	var input *agent.InputRequest
	if errors.As(err, &input) {
		poll.Continuation = input.Continuation
	}
	return out, err
}

func TestASessionPolledTaskCompletes(t *testing.T) {
	src, ts := taskSource(t, PollInSession)
	ev := &events{}
	poll, sc := taskCall(t, src, "jobs__report", agent.EffectRead)
	poll.Events = ev
	_, err := pollOnce(t, src, &poll, sc)
	pending, ok := agent.IsTaskPending(err)
	if !ok || pending.PollInterval != 4*time.Second {
		t.Fatalf("first poll = %v, want still running with the next interval doubled to 4s", err)
	}
	out, err := pollOnce(t, src, &poll, sc)
	if err != nil || out != "report ready for s1/turn-1/c1" {
		t.Fatalf("second poll = %q, %v", out, err)
	}
	var statuses []any
	for _, e := range ev.got {
		if e["type"] == TaskStatusEvent && e["task_id"] == poll.TaskID {
			statuses = append(statuses, e["status"])
		}
	}
	if !slices.Equal(statuses, []any{"working", "completed"}) {
		t.Errorf("status events = %v", statuses)
	}
	// A retried Step reads its checkpoint and returns the same task
	// without calling the tool again.
	_, err = src.CallTool(context.Background(), poll.ToolContext, sc)
	if again, ok := agent.IsTaskStarted(err); !ok || again.TaskID != poll.TaskID {
		t.Errorf("the retry = %v, want the same task", err)
	}
	if calls := countPrefix(ts.Log(), "call "); calls != 1 {
		t.Errorf("the tool was called %d times: %v", calls, ts.Log())
	}
}

func TestTasksThatFailAreCancelledOrAreLost(t *testing.T) {
	src, _ := taskSource(t, PollInSession)
	cases := []struct {
		tool   string
		effect agent.Effect
		check  func(error) bool
		text   string
	}{
		{"jobs__failing_report", agent.EffectRead, isFailed, "failed: MCP error -32603: renderer crashed"},
		{"jobs__cancelled_report", agent.EffectRead, isFailed, "cancelled"},
		{"jobs__uncertain_report", agent.EffectIdempotentWrite, isUnknown, "failed: MCP error -32603: the printer did not answer"},
		{"jobs__lost_report", agent.EffectIdempotentWrite, isUnknown, "no longer knows task"},
		{"jobs__lost_report", agent.EffectRead, isFailed, "no longer knows task"},
	}
	for _, c := range cases {
		poll, sc := taskCall(t, src, c.tool, c.effect)
		_, err := pollOnce(t, src, &poll, sc)
		if !c.check(err) || !strings.Contains(err.Error(), c.text) {
			t.Errorf("%s (%s): %v, want %q", c.tool, c.effect, err, c.text)
		}
	}
}

// A task ID longer than a session keeps is never saved, polled or sent
// back: the call's outcome is unknown, since the task may run.
func TestATaskNamedWithTooLongAnIDIsNotFollowed(t *testing.T) {
	src, ts := taskSource(t, PollInSession)
	tools := listed(t, src, agent.SourcePolicies{})
	sc := agent.SourceCall{Name: "jobs__long_id_report", Reference: tools["jobs__long_id_report"].Reference, Arguments: `{}`}
	saved := false
	call := agent.ToolContext{SessionID: "s1", TurnID: "turn-1", ToolCallID: "c1", IdempotencyKey: "s1/turn-1/c1", Attempt: 1,
		Effect: agent.EffectIdempotentWrite, Heartbeat: func() {}, SaveCheckpoint: func(string) { saved = true }}
	_, err := src.CallTool(context.Background(), call, sc)
	if !isUnknown(err) || !strings.Contains(err.Error(), "a taskId of 4103 bytes, over the 256 allowed") {
		t.Errorf("the call = %v, want its outcome unknown, naming the taskId's size", err)
	}
	if saved {
		t.Error("the Step saved a checkpoint with the task's ID")
	}
	if polls := countPrefix(ts.Log(), "get "); polls != 0 {
		t.Errorf("the task was polled: %v", ts.Log())
	}
}

func isFailed(err error) bool  { _, ok := agent.IsExecutionError(err); return ok }
func isUnknown(err error) bool { _, ok := agent.IsOutcomeUnknown(err); return ok }

func TestATaskThatCannotBeReachedForThreePollsIsLost(t *testing.T) {
	src, _ := taskSource(t, PollInSession)
	poll, sc := taskCall(t, src, "jobs__report", agent.EffectIdempotentWrite)
	closed := httptest.NewServer(nil)
	closed.Close()
	src.servers[0].Connect = HTTPConnect(closed.URL, nil)
	for i := 1; i <= 2; i++ {
		if _, err := pollOnce(t, src, &poll, sc); !isPending(err) {
			t.Fatalf("unreachable poll %d = %v, want still running", i, err)
		}
	}
	if _, err := pollOnce(t, src, &poll, sc); !isUnknown(err) || !strings.Contains(err.Error(), "could not be reached for 3 polls") {
		t.Errorf("third unreachable poll = %v, want outcome unknown for a write", err)
	}
}

func isPending(err error) bool { _, ok := agent.IsTaskPending(err); return ok }

func TestCancellingATaskSendsTasksCancel(t *testing.T) {
	src, ts := taskSource(t, PollInSession)
	poll, sc := taskCall(t, src, "jobs__slow_report", agent.EffectRead)
	for range 2 {
		if err := src.CancelSourceTask(context.Background(), poll, sc); err != nil {
			t.Fatal(err)
		}
	}
	if ts.Status(poll.TaskID) != "cancelled" {
		t.Errorf("the task is %s, want cancelled", ts.Status(poll.TaskID))
	}
}

func TestATaskPolledInsideTheCall(t *testing.T) {
	src, ts := taskSource(t, PollInCall)
	tools := listed(t, src, agent.SourcePolicies{})
	run := func(name string, wait time.Duration) (string, error) {
		src.servers[0].TaskWaitTimeout = wait
		call := agent.ToolContext{ToolCallID: "c1", IdempotencyKey: "s1/turn-1/c1", Attempt: 1, Heartbeat: func() {}}
		out, err := src.CallTool(context.Background(), call, agent.SourceCall{Name: name, Reference: tools[name].Reference, Arguments: `{}`})
		return out.Output, err
	}
	if out, err := run("jobs__report", time.Minute); err != nil || out != "report ready for s1/turn-1/c1" {
		t.Errorf("report = %q, %v", out, err)
	}
	if _, err := run("jobs__approval_report", time.Minute); !isFailed(err) || !strings.Contains(err.Error(), "an answer to 'Publish the report?'") {
		t.Errorf("an input request inside the call = %v, want failed", err)
	}
	var interrupted *CallInterruptedError
	if _, err := run("jobs__slow_report", 2*time.Second); !errors.As(err, &interrupted) {
		t.Errorf("a task past the wait = %v, want an interruption", err)
	}
	if _, err := run("jobs__lost_report", time.Minute); !errors.As(err, &interrupted) {
		t.Errorf("a task the server lost = %v, want an interruption", err)
	}
	// A server interval past the wait still gets one poll at its end.
	ts.SetPollInterval(time.Minute)
	if _, err := run("jobs__slow_report", time.Second); !errors.As(err, &interrupted) {
		t.Errorf("a long interval past the wait = %v, want an interruption", err)
	}
	last := ts.Log()
	if n := len(last); n < 3 || !strings.HasPrefix(last[n-2], "get ") || !strings.HasPrefix(last[n-1], "cancel ") {
		t.Errorf("the server got %v, want a poll at the end of the wait before the cancel", last)
	}
	if cancels := countPrefix(ts.Log(), "cancel "); cancels != 3 {
		t.Errorf("the server got %d cancels, want one for the input request and one for each wait that passed: %v", cancels, ts.Log())
	}
}

func TestAnHTTPErrorStatusIsTheServersAnswerOnlyWithAnOutcome(t *testing.T) {
	respond := func(status int, body string) error {
		resp, err := serverFailure(&http.Response{StatusCode: status, Header: http.Header{}, Body: io.NopCloser(strings.NewReader(body))})
		if resp != nil {
			_ = resp.Body.Close()
		}
		return err
	}
	if err := respond(500, `{"jsonrpc":"2.0","id":2,"error":{"code":-32603,"message":"x","data":{"_meta":{"`+OutcomeMetaKey+`":"unknown"}}}}`); err != nil {
		t.Errorf("an outcome in the body: %v, want it passed on", err)
	}
	for _, body := range []string{
		`{"jsonrpc":"2.0","id":2,"error":{"code":-32603,"message":"x","data":{"_meta":{"` + OutcomeMetaKey + `":"later"}}}}`,
		`{"jsonrpc":"2.0","id":null,"error":{"code":-32603,"message":"x","data":{"_meta":{"` + OutcomeMetaKey + `":"unknown"}}}}`,
		`{"jsonrpc":"2.0","id":2,"error":{"code":-32603,"message":"` + OutcomeMetaKey + `"}}`,
		`<html>bad gateway</html>`,
	} {
		if err := respond(502, body); err == nil || !strings.Contains(err.Error(), "HTTP 502") {
			t.Errorf("body %s: %v, want a transport error", body, err)
		}
	}
}

// countPrefix counts the lines of a server log that start with prefix.
func countPrefix(lines []string, prefix string) int {
	n := 0
	for _, line := range lines {
		if strings.HasPrefix(line, prefix) {
			n++
		}
	}
	return n
}
