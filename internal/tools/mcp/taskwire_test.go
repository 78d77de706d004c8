package mcp

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"

	mcpsdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/stepwise-run/stepwise/internal/tracing"
	"github.com/stepwise-run/stepwise/pkg/agent"
)

func TestTaskHandlesInEventStreamsAndBatches(t *testing.T) {
	handle := `{"jsonrpc":"2.0","id":3,"result":{"resultType":"task","taskId":"t-9","status":"working","pollIntervalMs":2000}}`
	stream := "event: message\ndata: " + handle + "\n\nevent: message\ndata: {\"jsonrpc\":\"2.0\",\"id\":4,\"result\":{\"content\":[]}}\n\n"
	body := &eventRewriter{in: bufio.NewReader(strings.NewReader(stream)), body: io.NopCloser(nil)}
	out, err := io.ReadAll(body)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(string(out), "\n")
	if len(lines) != 7 || lines[0] != "event: message" || !strings.HasPrefix(lines[1], "data: ") || lines[4] != `data: {"jsonrpc":"2.0","id":4,"result":{"content":[]}}` {
		t.Fatalf("rewritten stream = %q", out)
	}
	var msg struct {
		Result mcpsdk.CallToolResult `json:"result"`
	}
	if err := json.Unmarshal([]byte(strings.TrimPrefix(lines[1], "data: ")), &msg); err != nil {
		t.Fatal(err)
	}
	task, ok := createdTask(&msg.Result)
	if !ok || task.TaskID != "t-9" || task.Status != "working" || *task.PollIntervalMs != 2000 {
		t.Errorf("task = %+v, %v", task, ok)
	}
	batch := wrapTaskMessage([]byte("[" + handle + "]"))
	if !strings.Contains(string(batch), taskResultMetaKey) {
		t.Errorf("batch = %s", batch)
	}
}

func TestATaskHandleSplitOverDataLinesIsRewritten(t *testing.T) {
	stream := "event: message\r\nid: 7\r\ndata: {\"jsonrpc\":\"2.0\",\"id\":3,\r\ndata: \"result\":{\"resultType\":\"task\",\"taskId\":\"t-1\",\"status\":\"working\"}}\r\n\r\n"
	resp := &http.Response{Header: http.Header{"Content-Type": {"Text/Event-Stream; charset=utf-8"}},
		Body: io.NopCloser(strings.NewReader(stream))}
	rewritten := withTaskHandles(resp)
	defer func() { _ = rewritten.Body.Close() }()
	out, err := io.ReadAll(rewritten.Body)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(string(out), "\n")
	if len(lines) != 5 || lines[0] != "event: message\r" || lines[1] != "id: 7\r" || !strings.HasPrefix(lines[2], "data: {") || lines[3] != "\r" {
		t.Fatalf("rewritten stream = %q", out)
	}
	var msg struct {
		Result mcpsdk.CallToolResult `json:"result"`
	}
	if err := json.Unmarshal([]byte(strings.TrimPrefix(lines[2], "data: ")), &msg); err != nil {
		t.Fatal(err)
	}
	if task, ok := createdTask(&msg.Result); !ok || task.TaskID != "t-1" {
		t.Errorf("task = %+v, %v", task, ok)
	}
	// An event without a handle keeps its lines.
	plain := "data: {\"a\":\ndata: 1}\n\n"
	again := withTaskHandles(&http.Response{Header: http.Header{"Content-Type": {"text/event-stream"}},
		Body: io.NopCloser(strings.NewReader(plain))})
	defer func() { _ = again.Body.Close() }()
	out, _ = io.ReadAll(again.Body)
	if string(out) != plain {
		t.Errorf("a plain event became %q", out)
	}
}

func TestTaskRequestsCarryTheToolStepsTraceContext(t *testing.T) {
	src, ts := taskSource(t, PollInSession)
	const traceparent = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
	ctx := tracing.ContextWithParent(context.Background(), traceparent)
	poll, sc := taskCall(t, src, "jobs__slow_report", agent.EffectRead)
	if _, err := src.PollSourceTask(ctx, poll, sc); err == nil {
		t.Fatal("the slow report finished")
	}
	if err := src.CancelSourceTask(ctx, poll, sc); err != nil {
		t.Fatal(err)
	}
	traced := ts.TraceContexts()
	for _, want := range []string{"tasks/get " + traceparent, "tasks/cancel " + traceparent, "http " + traceparent} {
		if !slices.Contains(traced, want) {
			t.Errorf("the server saw %v, want %q among them", traced, want)
		}
	}
}
