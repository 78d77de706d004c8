package mcp

import (
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/stepwise-run/stepwise/internal/tools/mcp/mcptest"
	"github.com/stepwise-run/stepwise/pkg/agent"
)

// selfServed is a source whose server is this test binary, started as a
// new process for every request and serving one of the test servers.
func selfServed(t *testing.T, name string) *Source {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	src, err := NewSource(SourceOptions{Name: name, Log: quiet(), Servers: []Server{{
		Name: name, TrustAnnotations: true, ConnectionTimeout: 30 * time.Second, RequestTimeout: time.Minute,
		TaskWaitTimeout: time.Minute,
		Connect:         StdioConnect(exe, nil, func() ([]string, error) { return []string{mcptest.ServeEnv + "=" + name}, nil }),
	}}})
	if err != nil {
		t.Fatal(err)
	}
	return src
}

func TestAStdioServerThatExitsMidCallInterruptsIt(t *testing.T) {
	src := selfServed(t, "ledger")
	tools := listed(t, src, agent.SourcePolicies{})
	if out, err := call(t, src, tools, "ledger__balance", nil); err != nil || out != "balance applied s1/turn-1/c1" {
		t.Fatalf("balance = %q, %v", out, err)
	}
	_, err := call(t, src, tools, "ledger__exit", nil)
	var interrupted *CallInterruptedError
	if !errors.As(err, &interrupted) {
		t.Errorf("a server that exited mid-call = %v, want an interruption", err)
	}
}

func TestAStdioTaskIsPolledInsideTheCall(t *testing.T) {
	src := selfServed(t, "tasks")
	tools := listed(t, src, agent.SourcePolicies{})
	sc := func(name string) agent.SourceCall {
		return agent.SourceCall{Name: name, Reference: tools[name].Reference, Arguments: `{}`}
	}
	ev := &events{}
	ctx := agent.ToolContext{ToolCallID: "c1", IdempotencyKey: "s1/turn-1/c1", Attempt: 1, Heartbeat: func() {}, Events: ev}
	out, err := src.CallTool(t.Context(), ctx, sc("tasks__report"))
	if err != nil || out.Output != "report ready for s1/turn-1/c1" {
		t.Errorf("report = %q, %v", out.Output, err)
	}
	if len(ev.got) == 0 || ev.got[len(ev.got)-1]["status"] != "completed" {
		t.Errorf("status events = %v", ev.got)
	}
	_, err = src.CallTool(t.Context(), ctx, sc("tasks__format_report"))
	if !isFailed(err) || !strings.Contains(err.Error(), "an answer to 'Which format?'") {
		t.Errorf("a stdio task's input request = %v, want failed: its process ends with the request", err)
	}
}
