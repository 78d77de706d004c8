package mcp

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stepwise-run/stepwise/internal/testtools"
	"github.com/stepwise-run/stepwise/pkg/agent"
)

func referenceCommand(t *testing.T, name string) string {
	t.Helper()
	return filepath.Join(testtools.MCPServers.Path(t), name)
}

// stdioSource is a source over one reference server run as a new process
// for every request.
func stdioSource(t *testing.T, server, command string, args ...string) *Source {
	t.Helper()
	src, err := NewSource(SourceOptions{Name: server, ResourceAndPromptTools: true, Log: quiet(), Servers: []Server{{
		Name: server, TrustAnnotations: true, ConnectionTimeout: 30 * time.Second, RequestTimeout: time.Minute,
		Connect: StdioConnect(referenceCommand(t, command), args, nil),
	}}})
	if err != nil {
		t.Fatal(err)
	}
	return src
}

// httpEverything starts server-everything over Streamable HTTP until the
// test ends.
func httpEverything(t *testing.T) *Source {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	_ = l.Close()
	cmd := exec.Command(referenceCommand(t, "mcp-server-everything"), "streamableHttp")
	cmd.Env = append(os.Environ(), fmt.Sprintf("PORT=%d", port))
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL); _ = cmd.Wait() })
	address := fmt.Sprintf("127.0.0.1:%d", port)
	// Node takes a while to start on a loaded machine.
	waitWithin(t, time.Minute, func() bool {
		c, err := net.Dial("tcp", address)
		if err == nil {
			_ = c.Close()
		}
		return err == nil
	})
	src, err := NewSource(SourceOptions{Name: "everything", ResourceAndPromptTools: true, Log: quiet(), Servers: []Server{{
		Name: "everything", TrustAnnotations: true, ConnectionTimeout: 30 * time.Second, RequestTimeout: time.Minute,
		Connect: HTTPConnect("http://"+address+"/mcp", nil),
	}}})
	if err != nil {
		t.Fatal(err)
	}
	return src
}

func run(t *testing.T, src *Source, tools map[string]agent.SourceTool, name, args string, ev agent.EventWriter) (string, error) {
	t.Helper()
	tool, ok := tools[name]
	if !ok {
		t.Fatalf("%s was not listed; listed %d tools", name, len(tools))
	}
	call := agent.ToolContext{SessionID: "s1", TurnID: "turn-1", ToolCallID: "c1", IdempotencyKey: "s1/turn-1/c1", Attempt: 1, Events: ev}
	out, err := src.CallTool(context.Background(), call, agent.SourceCall{Name: name, Reference: tool.Reference, Arguments: args})
	return out.Output, err
}

func TestTheFilesystemServerOverStdio(t *testing.T) {
	root := t.TempDir()
	src := stdioSource(t, "files", "mcp-server-filesystem", root)
	tools := listed(t, src, agent.SourcePolicies{})
	for name, want := range map[string]agent.Effect{
		"files__read_text_file":   agent.EffectRead,
		"files__write_file":       agent.EffectIdempotentWrite, // idempotentHint wins over destructiveHint
		"files__create_directory": agent.EffectIdempotentWrite,
		"files__edit_file":        agent.EffectUnclassified,
		"files__move_file":        agent.EffectUnclassified,
	} {
		if got := tools[name].Policy; got.Effect != want || got.ApprovalRequired() != want.ApprovalByDefault() {
			t.Errorf("%s: %+v, want %s", name, got, want)
		}
	}
	path := filepath.Join(root, "report.txt")
	if _, err := run(t, src, tools, "files__write_file", fmt.Sprintf(`{"path":%q,"content":"quarterly numbers"}`, path), nil); err != nil {
		t.Fatalf("write_file: %v", err)
	}
	if got, err := os.ReadFile(path); err != nil || string(got) != "quarterly numbers" {
		t.Fatalf("the file holds %q, %v", got, err)
	}
	if out, err := run(t, src, tools, "files__read_text_file", fmt.Sprintf(`{"path":%q}`, path), nil); err != nil || out != "quarterly numbers" {
		t.Errorf("read_text_file = %q, %v", out, err)
	}
	// The server's isError answer is the call's failure.
	_, err := run(t, src, tools, "files__read_text_file", `{"path":"/etc/passwd"}`, nil)
	if e, ok := agent.IsExecutionError(err); !ok || !strings.Contains(e.Message, "outside allowed directories") {
		t.Errorf("a path outside the root: %v", err)
	}
}

func TestTheEverythingServerOverStdioAndStreamableHTTP(t *testing.T) {
	for name, src := range map[string]func(*testing.T) *Source{
		"stdio": func(t *testing.T) *Source { return stdioSource(t, "everything", "mcp-server-everything", "stdio") },
		"http":  httpEverything,
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			src := src(t)
			tools := listed(t, src, agent.SourcePolicies{})
			if got := tools["everything__echo"].Policy; got.Effect != agent.EffectRead || got.ApprovalRequired() {
				t.Errorf("echo (readOnlyHint and idempotentHint): %+v, want a read without approval", got)
			}
			if out, err := run(t, src, tools, "everything__echo", `{"message":"hello"}`, nil); err != nil || out != "Echo: hello" {
				t.Errorf("echo = %q, %v", out, err)
			}
			if out, err := run(t, src, tools, "everything__get-sum", `{"a":2,"b":3}`, nil); err != nil || !strings.Contains(out, "5") {
				t.Errorf("get-sum = %q, %v", out, err)
			}
			if out, err := run(t, src, tools, "everything__get-tiny-image", `{}`, nil); err != nil || !strings.Contains(out, "[image 1]") {
				t.Errorf("get-tiny-image = %q, %v; want the image placeholder", out, err)
			}
			ev := &events{}
			if _, err := run(t, src, tools, "everything__trigger-long-running-operation", `{"duration":1,"steps":3}`, ev); err != nil {
				t.Fatalf("long-running operation: %v", err)
			}
			if len(ev.got) != 3 || ev.got[2]["progress"] != float64(3) || ev.got[2]["total"] != float64(3) || ev.got[0]["type"] != ToolProgressEvent {
				t.Errorf("progress events = %v, want three", ev.got)
			}
			list, err := run(t, src, tools, ListResourcesAndPromptsTool, `{"server":"everything"}`, nil)
			if err != nil || !strings.Contains(list, `"name":"args-prompt"`) || !strings.Contains(list, `"uri":"demo://resource/static/document/features.md"`) ||
				!strings.Contains(list, `"uriTemplate":"demo://resource/dynamic/text/{resourceId}"`) {
				t.Errorf("resources and prompts = %.600s, %v", list, err)
			}
			doc, err := run(t, src, tools, ReadResourceTool, `{"server":"everything","uri":"demo://resource/static/document/features.md"}`, nil)
			if err != nil || !strings.HasPrefix(doc, `{"contents":[{`) || !strings.Contains(doc, `"uri":"demo://resource/static/document/features.md"`) {
				t.Errorf("read resource = %.300s, %v", doc, err)
			}
			prompt, err := run(t, src, tools, GetPromptTool, `{"server":"everything","name":"args-prompt","arguments":{"city":"Lyon"}}`, nil)
			if err != nil || !strings.Contains(prompt, "What's weather in Lyon?") {
				t.Errorf("get prompt = %s, %v", prompt, err)
			}
		})
	}
}

// The reference server marks its read tools with readOnlyHint and
// idempotentHint both: each is a read, so a call whose retries run out
// records failed rather than outcome_unknown.
func TestTheEverythingServersReadOnlyToolsAreReads(t *testing.T) {
	src := stdioSource(t, "everything", "mcp-server-everything", "stdio")
	tools := listed(t, src, agent.SourcePolicies{})
	hints, err := ListServer(within(t, context.Background(), time.Minute), src.servers[0])
	if err != nil {
		t.Fatal(err)
	}
	var reads []string
	for _, lt := range hints {
		if !lt.Annotations.ReadOnly {
			continue
		}
		reads = append(reads, lt.MCPName)
		if got := tools[lt.Name].Policy; got.Effect != agent.EffectRead || got.ApprovalRequired() {
			t.Errorf("%s (readOnlyHint, idempotentHint %v): %s (approval %v), want a read without approval",
				lt.MCPName, lt.Annotations.Idempotent, got.Effect, got.ApprovalRequired())
		}
	}
	for _, want := range []string{"echo", "get-sum"} {
		if !slices.Contains(reads, want) {
			t.Errorf("%s is not among the read-only tools %v", want, reads)
		}
	}
}
