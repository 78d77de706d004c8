package enginetest

import (
	"context"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/stepwise-run/stepwise/internal/session"
	"github.com/stepwise-run/stepwise/internal/testtools"
	"github.com/stepwise-run/stepwise/internal/tools/mcp/mcptest"
	"github.com/stepwise-run/stepwise/pkg/client"
	"github.com/stepwise-run/stepwise/pkg/workerconfig"
)

// ledgerStack is a stack whose workers have the test ledger as the MCP
// tool source "ledger", over Streamable HTTP.
func ledgerStack(t *testing.T, flowType string) (*Stack, *mcptest.Ledger) {
	t.Helper()
	s := NewStack(t, flowType)
	ledger := mcptest.NewLedger(t)
	s.Config.ToolSources = []workerconfig.ToolSource{httpToolSource("ledger", ledger.URL)}
	return s, ledger
}

// httpToolSource is a trusted Streamable HTTP tool source, as the operator
// renders one.
func httpToolSource(name, url string) workerconfig.ToolSource {
	return workerconfig.ToolSource{
		SourceName: name, TrustToolAnnotations: true,
		ListingTTL:        metav1.Duration{Duration: time.Minute},
		ConnectionTimeout: metav1.Duration{Duration: 5 * time.Second},
		RequestTimeout:    metav1.Duration{Duration: time.Minute},
		StreamableHTTP:    &workerconfig.StreamableHTTP{URL: url},
	}
}

// A worker is killed while one response's MCP calls of every effect class
// are in flight, after each took effect on the server: the read and the
// idempotent write are sent again with the same idempotency key, which the
// server's fence answers, and the two other writes are outcome_unknown and
// never sent again.
func TestAWorkerKilledDuringMCPCallsOfEachEffectClassFollowsTheReissueRules(t *testing.T) {
	s, ledger := ledgerStack(t, "MCPCrash")
	sessions := client.New(s.Client, s.Agent())
	ctx := context.Background()
	tools := []string{"balance", "set_limit", "send_payment", "note"}
	var reached []<-chan struct{}
	for _, tool := range tools {
		reached = append(reached, ledger.Hold(tool))
	}
	first := s.StartWorker()
	if ok, err := sessions.Start(ctx, "s1", "tools: ledger__balance, ledger__set_limit, ledger__send_payment, ledger__note"); !ok || err != nil {
		t.Fatalf("Start = %v, %v", ok, err)
	}
	// The unclassified note asks for approval by default.
	interrupt := firstInterrupt(t, sessions, "s1").ID
	if interrupt != "c4" {
		t.Fatalf("the interrupt is %s, want the note's (c4) alone", interrupt)
	}
	if ok, err := sessions.Approve(ctx, "s1", interrupt); !ok || err != nil {
		t.Fatalf("Approve = %v, %v", ok, err)
	}
	for i, r := range reached {
		select {
		case <-r:
		case <-time.After(waitLong):
			t.Fatalf("%s was not called", tools[i])
		}
	}
	first.Kill()
	for _, tool := range tools {
		ledger.Release(tool)
	}
	s.StartWorker()

	answer := lastAnswer(t, sessions, "s1", 1)
	for _, want := range []string{
		"ledger__balance=balance applied " + s.WorkflowID("s1") + "/turn-1/c1",
		"ledger__set_limit=set_limit applied " + s.WorkflowID("s1") + "/turn-1/c2",
		"ledger__send_payment=" + session.OutcomeUnknownText,
		"ledger__note=" + session.OutcomeUnknownText,
	} {
		if !strings.Contains(answer, want) {
			t.Errorf("the model saw %q, want %q in it", answer, want)
		}
	}
	for tool, want := range map[string]int{"balance": 2, "set_limit": 2, "send_payment": 1, "note": 1} {
		calls := ledger.CallsOf(tool)
		if len(calls) != want {
			t.Errorf("%s was sent %d times, want %d: %+v", tool, len(calls), want, calls)
			continue
		}
		key := s.WorkflowID("s1") + "/turn-1/c" + itoa(1+indexOf(tools, tool))
		for i, c := range calls {
			if c.IdempotencyKey != key {
				t.Errorf("%s call %d carried key %q, want %q", tool, i, c.IdempotencyKey, key)
			}
			if c.Applied != (i == 0) {
				t.Errorf("%s call %d applied = %v; only the first may apply", tool, i, c.Applied)
			}
		}
	}
}

// A read whose server also calls it idempotent, as the reference servers
// mark their reads, is a read: when each of its three attempts outlasts the
// request timeout, the call is recorded failed, not outcome_unknown.
func TestAReadOnlyIdempotentMCPToolThatTimesOutThreeTimesFails(t *testing.T) {
	s, ledger := ledgerStack(t, "MCPReadTimeout")
	s.Config.ToolSources[0].RequestTimeout = metav1.Duration{Duration: time.Second}
	ledger.Hold("quote")
	defer ledger.Release("quote")
	sessions := client.New(s.Client, s.Agent())
	s.StartWorker()
	if ok, err := sessions.Start(context.Background(), "s1", "tools: ledger__quote"); !ok || err != nil {
		t.Fatalf("Start = %v, %v", ok, err)
	}
	answer := lastAnswer(t, sessions, "s1", 1)
	if !strings.HasPrefix(answer, "results: ledger__quote=The tool call failed: ") || strings.Contains(answer, session.OutcomeUnknownText) {
		t.Errorf("the model saw %q, want the read recorded failed", answer)
	}
	if calls := ledger.CallsOf("quote"); len(calls) != 3 {
		t.Errorf("quote was sent %d times, want three attempts: %+v", len(calls), calls)
	}
}

// Declared writes of one response run in the model's order, and a write
// after one that did not succeed is skipped without being sent.
func TestDeclaredMCPWritesRunInOrderAndStopAtTheFirstThatDidNotSucceed(t *testing.T) {
	s, ledger := ledgerStack(t, "MCPOrdered")
	sessions := client.New(s.Client, s.Agent())
	s.StartWorker()
	if ok, err := sessions.Start(context.Background(), "s1", "tools: ledger__uncertain, ledger__send_payment, ledger__balance"); !ok || err != nil {
		t.Fatalf("Start = %v, %v", ok, err)
	}
	answer := lastAnswer(t, sessions, "s1", 1)
	for _, want := range []string{
		"ledger__uncertain=" + session.OutcomeUnknownText + " (the payment provider timed out)",
		"ledger__send_payment=The tool call failed: " + session.ToolCallNotRunPrefix + ": " + session.SkippedAfterWriteDetail,
		"ledger__balance=balance applied " + s.WorkflowID("s1") + "/turn-1/c3",
	} {
		if !strings.Contains(answer, want) {
			t.Errorf("the model saw %q, want %q in it", answer, want)
		}
	}
	if calls := ledger.CallsOf("send_payment"); len(calls) != 0 {
		t.Errorf("the skipped write was sent: %+v", calls)
	}
}

func indexOf(list []string, v string) int {
	for i, x := range list {
		if x == v {
			return i
		}
	}
	return -1
}

// The filesystem reference server as a stdio ToolSource: the worker starts
// it from its rendered configuration for the listing and for the call.
func TestAStdioToolSourceFromTheWorkerConfig(t *testing.T) {
	dir := testtools.MCPServers.Path(t)
	s := NewStack(t, "MCPStdio")
	root := t.TempDir()
	s.Config.ToolSources = []workerconfig.ToolSource{{
		SourceName: "files", TrustToolAnnotations: true,
		ConnectionTimeout: metav1.Duration{Duration: 30 * time.Second},
		RequestTimeout:    metav1.Duration{Duration: time.Minute},
		Stdio:             &workerconfig.Stdio{Command: filepath.Join(dir, "mcp-server-filesystem"), Args: []string{root}},
	}}
	sessions := client.New(s.Client, s.Agent())
	s.StartWorker()
	if ok, err := sessions.Start(context.Background(), "s1", "tools: files__list_allowed_directories"); !ok || err != nil {
		t.Fatalf("Start = %v, %v", ok, err)
	}
	answer := lastAnswer(t, sessions, "s1", 1)
	resolved, _ := filepath.EvalSymlinks(root)
	if !strings.HasPrefix(answer, "results: files__list_allowed_directories=Allowed directories:") || !strings.Contains(answer, resolved) {
		t.Errorf("the model saw %q, want the allowed directory %s", answer, resolved)
	}
}

// taskStack is a stack whose workers have the task server as the MCP tool
// source "jobs", over Streamable HTTP, so the session polls its tasks.
func taskStack(t *testing.T, flowType string) (*Stack, *mcptest.TaskServer) {
	t.Helper()
	s := NewStack(t, flowType)
	ts := mcptest.NewTaskServer(t)
	ts.SetPollInterval(time.Second)
	s.Config.ToolSources = []workerconfig.ToolSource{httpToolSource("jobs", ts.URL)}
	return s, ts
}

// An MCP task over Streamable HTTP is a tool task the session polls on
// timers; its input request is a session question whose answer reaches the
// task with tasks/update, across a worker replaced while the question
// waits.
func TestAnMCPTaskAsksTheUserAndCompletes(t *testing.T) {
	s, ts := taskStack(t, "MCPTask")
	sessions := client.New(s.Client, s.Agent())
	ctx := context.Background()
	first := s.StartWorker()
	if ok, err := sessions.Start(ctx, "s1", "tools: jobs__approval_report"); !ok || err != nil {
		t.Fatalf("Start = %v, %v", ok, err)
	}
	question := firstInterrupt(t, sessions, "s1")
	if question.ID != "c1-input-1" || question.Question == nil || question.Question.Text != "Publish the report?" ||
		strings.Join(question.Question.Choices, ",") != "yes,no" {
		t.Fatalf("the question = %+v", question)
	}
	// The server's task asks, not the agent: a person answering sees so.
	if question.AskedBy != client.AskedByTask || question.ToolName != "jobs__approval_report" {
		t.Errorf("the question is asked by %q of %q, want the task of jobs__approval_report", question.AskedBy, question.ToolName)
	}
	first.Kill()
	s.StartWorker()
	if ok, err := sessions.Answer(ctx, "s1", question.ID, "yes"); !ok || err != nil {
		t.Fatalf("Answer = %v, %v", ok, err)
	}
	answer := lastAnswer(t, sessions, "s1", 1)
	if answer != `results: jobs__approval_report=approval_report answered {"publish":true}` {
		t.Errorf("answer = %q", answer)
	}
	updates, calls := 0, 0
	for _, line := range ts.Log() {
		switch {
		case strings.HasPrefix(line, "update "):
			updates++
		case strings.HasPrefix(line, "call "):
			calls++
		}
	}
	if updates != 1 || calls != 1 {
		t.Errorf("the server got %d calls and %d updates, want one each: %v", calls, updates, ts.Log())
	}
}

// cancel_turn abandons a running MCP task: the session sends tasks/cancel
// and records the call outcome_unknown.
func TestCancellingATurnCancelsItsMCPTask(t *testing.T) {
	s, ts := taskStack(t, "MCPTaskCancel")
	sessions := client.New(s.Client, s.Agent())
	ctx := context.Background()
	s.StartWorker()
	if ok, err := sessions.Start(ctx, "s1", "tools: jobs__slow_report"); !ok || err != nil {
		t.Fatalf("Start = %v, %v", ok, err)
	}
	Eventually(t, waitLong, "the task to be polled", func() (bool, error) {
		return slices.Contains(ts.Log(), "get task-1"), nil
	})
	if ok, err := sessions.CancelTurn(ctx, "s1", "turn-1"); !ok || err != nil {
		t.Fatalf("CancelTurn = %v, %v", ok, err)
	}
	Eventually(t, waitLong, "the task to be cancelled", func() (bool, error) {
		return ts.Status("task-1") == "cancelled", nil
	})
	Eventually(t, waitLong, "the turn to end", func() (bool, error) {
		snap, err := sessions.Snapshot(ctx, "s1")
		return err == nil && snap.State != nil && snap.State.ActiveTurnID == "", err
	})
}

// A question says who asks it: the agent by ask_user, or a tool before it
// runs, whose words are its own and not the agent's.
func TestEachQuestionSaysWhoAsksIt(t *testing.T) {
	s := NewStack(t, "Askers")
	s.StartWorker()
	sessions := client.New(s.Client, s.Agent())
	ctx := context.Background()
	if ok, err := sessions.Start(ctx, "s1", "ask: which color?"); !ok || err != nil {
		t.Fatalf("Start = %v, %v", ok, err)
	}
	asked := firstInterrupt(t, sessions, "s1")
	if asked.AskedBy != client.AskedByAgent {
		t.Errorf("ask_user's question is asked by %q, want the agent", asked.AskedBy)
	}
	if ok, err := sessions.Answer(ctx, "s1", asked.ID, "red"); !ok || err != nil {
		t.Fatalf("Answer = %v, %v", ok, err)
	}
	lastAnswer(t, sessions, "s1", 1)
	if ok, err := sessions.Send(ctx, "s1", "tools: confirm_write"); !ok || err != nil {
		t.Fatalf("Send = %v, %v", ok, err)
	}
	asked = firstInterrupt(t, sessions, "s1")
	if asked.AskedBy != client.AskedByTool || asked.ToolName != "confirm_write" {
		t.Errorf("confirm_write's question is asked by %q of %q, want the tool", asked.AskedBy, asked.ToolName)
	}
}
