package mcp

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"mime"
	"net/http"
	"strings"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// TasksExtension is the MCP tasks extension the source declares on every
// request, so a server may answer tools/call with a task.
const TasksExtension = "io.modelcontextprotocol/tasks"

// Task statuses of the tasks extension.
const (
	taskWorking       = "working"
	taskInputRequired = "input_required"
	taskCompleted     = "completed"
	taskFailed        = "failed"
	taskCancelled     = "cancelled"
)

// taskResultMetaKey carries a task handle from the transport to the call
// inside a result the SDK decodes; it never reaches a server.
const taskResultMetaKey = "stepwise.run/task"

// Task is a task handle or state, as the tasks extension sends it.
type Task struct {
	TaskID         string          `json:"taskId"`
	Status         string          `json:"status"`
	StatusMessage  string          `json:"statusMessage,omitempty"`
	PollIntervalMs *int64          `json:"pollIntervalMs,omitempty"`
	Result         json.RawMessage `json:"result,omitempty"`
	Error          *jsonrpc.Error  `json:"error,omitempty"`
	InputRequests  map[string]struct {
		Method string          `json:"method"`
		Params json.RawMessage `json:"params"`
	} `json:"inputRequests,omitempty"`
}

// taskParams names a task in tasks/get and tasks/cancel.
type taskParams struct {
	mcp.ParamsBase
	TaskID string `json:"taskId"`
}

// taskUpdateParams answers a task's input requests.
type taskUpdateParams struct {
	mcp.ParamsBase
	TaskID         string                       `json:"taskId"`
	InputResponses map[string]*mcp.ElicitResult `json:"inputResponses"`
}

// taskResult is the answer to tasks/get.
type taskResult struct {
	mcp.ResultBase
	Task
}

// ackResult is the empty answer to tasks/update and tasks/cancel.
type ackResult struct {
	mcp.ResultBase
}

// taskClient returns a client that declares the tasks extension and can
// send its methods.
func taskClient(opts *mcp.ClientOptions) *mcp.Client {
	o := mcp.ClientOptions{}
	if opts != nil {
		o = *opts
	}
	caps := &mcp.ClientCapabilities{}
	if o.Capabilities != nil {
		copied := *o.Capabilities
		caps = &copied
		caps.Extensions = maps.Clone(caps.Extensions)
	}
	caps.AddExtension(TasksExtension, map[string]any{})
	o.Capabilities = caps
	client := mcp.NewClient(implementation(), &o)
	// The methods are not standard MCP methods, so registering them cannot
	// fail.
	_ = mcp.AddSendingCustomMethod[*taskParams, *taskResult](client, "tasks/get")
	_ = mcp.AddSendingCustomMethod[*taskUpdateParams, *ackResult](client, "tasks/update")
	_ = mcp.AddSendingCustomMethod[*taskParams, *ackResult](client, "tasks/cancel")
	return client
}

func getTask(ctx context.Context, cs *mcp.ClientSession, id string) (*Task, error) {
	res, err := mcp.CallCustomMethod[*taskParams, *taskResult](ctx, cs, "tasks/get", &taskParams{ParamsBase: mcp.ParamsBase{Meta: withTraceContext(ctx, nil)}, TaskID: id})
	if err != nil {
		return nil, err
	}
	return &res.Task, nil
}

// createdTask reads the task handle the transport found in a tools/call
// answer, if it was one.
func createdTask(res *mcp.CallToolResult) (*Task, bool) {
	raw, ok := res.Meta[taskResultMetaKey]
	if !ok {
		return nil, false
	}
	doc, err := json.Marshal(raw)
	if err != nil {
		return nil, false
	}
	var t Task
	if json.Unmarshal(doc, &t) != nil || t.TaskID == "" {
		return nil, false
	}
	return &t, true
}

// cancelTask sends tasks/cancel; a JSON-RPC answer of any kind ends it.
func cancelTask(ctx context.Context, cs *mcp.ClientSession, id string) error {
	_, err := mcp.CallCustomMethod[*taskParams, *ackResult](ctx, cs, "tasks/cancel", &taskParams{ParamsBase: mcp.ParamsBase{Meta: withTraceContext(ctx, nil)}, TaskID: id})
	if err != nil && serverError(err) == nil {
		return err
	}
	return nil
}

// taskTransport lets the SDK carry a task handle over a transport other
// than Streamable HTTP: a tools/call answer with resultType "task" reaches
// the call as a result whose _meta holds the handle. Streamable HTTP
// rewrites response bodies instead (withTaskHandles), because the SDK's
// HTTP connection must not be wrapped.
type taskTransport struct{ mcp.Transport }

func (t taskTransport) Connect(ctx context.Context) (mcp.Connection, error) {
	conn, err := t.Transport.Connect(ctx)
	if err != nil {
		return nil, err
	}
	return taskConn{conn}, nil
}

type taskConn struct{ mcp.Connection }

func (c taskConn) Read(ctx context.Context) (jsonrpc.Message, error) {
	msg, err := c.Connection.Read(ctx)
	if resp, ok := msg.(*jsonrpc.Response); ok && err == nil && len(resp.Result) > 0 {
		resp.Result = wrapTaskResult(resp.Result)
	}
	return msg, err
}

// wrapTaskResult rewrites a task handle into a result the SDK decodes.
func wrapTaskResult(raw json.RawMessage) json.RawMessage {
	if !bytes.Contains(raw, []byte(`"task"`)) {
		return raw
	}
	var head struct {
		ResultType string `json:"resultType"`
	}
	if json.Unmarshal(raw, &head) != nil || head.ResultType != "task" {
		return raw
	}
	var handle map[string]any
	if json.Unmarshal(raw, &handle) != nil {
		return raw
	}
	delete(handle, "resultType")
	wrapped, err := json.Marshal(map[string]any{
		"resultType": "complete", "content": []any{}, "_meta": map[string]any{taskResultMetaKey: handle},
	})
	if err != nil {
		return raw
	}
	return wrapped
}

// wrapTaskMessage rewrites the result of one JSON-RPC message, or of each
// message of a batch.
func wrapTaskMessage(raw []byte) []byte {
	if !bytes.Contains(raw, []byte(`"task"`)) {
		return raw
	}
	trimmed := bytes.TrimSpace(raw)
	if len(trimmed) > 0 && trimmed[0] == '[' {
		var batch []json.RawMessage
		if json.Unmarshal(trimmed, &batch) != nil {
			return raw
		}
		for i, m := range batch {
			batch[i] = wrapTaskMessage(m)
		}
		out, err := json.Marshal(batch)
		if err != nil {
			return raw
		}
		return out
	}
	var msg map[string]json.RawMessage
	if json.Unmarshal(trimmed, &msg) != nil {
		return raw
	}
	result, ok := msg["result"]
	if !ok {
		return raw
	}
	msg["result"] = wrapTaskResult(result)
	out, err := json.Marshal(msg)
	if err != nil {
		return raw
	}
	return out
}

// withTaskHandles rewrites task handles in a Streamable HTTP response: a
// JSON body at once, an event stream event by event as it arrives.
func withTaskHandles(resp *http.Response) *http.Response {
	media, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type"))
	switch media {
	case "application/json":
		body, err := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		if err != nil {
			resp.Body = io.NopCloser(errReader{err})
			return resp
		}
		body = wrapTaskMessage(body)
		resp.Body = io.NopCloser(bytes.NewReader(body))
		resp.ContentLength = int64(len(body))
		resp.Header.Del("Content-Length")
	case "text/event-stream":
		resp.Body = &eventRewriter{in: bufio.NewReader(resp.Body), body: resp.Body}
	}
	return resp
}

type errReader struct{ err error }

func (r errReader) Read([]byte) (int, error) { return 0, r.err }

// maxEventSize bounds one event of a stream, as the SDK's own reader does.
const maxEventSize = mcp.DefaultMaxEventSize

// eventRewriter rewrites the data of each event of a stream. An event's
// data lines are joined, as a reader of the stream joins them, and a task
// handle among them goes out as one data line; other lines pass as they
// came.
type eventRewriter struct {
	in      *bufio.Reader
	body    io.Closer
	data    [][]byte // the data lines of the event being read
	size    int
	pending []byte
	err     error
}

func (r *eventRewriter) Read(p []byte) (int, error) {
	for len(r.pending) == 0 {
		if r.err != nil {
			return 0, r.err
		}
		line, err := r.readLine()
		if err != nil {
			// The stream ended: what there is of the event goes out as is.
			r.pending = append(r.flush(false), line...)
			r.err = err
			continue
		}
		trimmed := bytes.TrimRight(line, "\r\n")
		switch {
		case len(trimmed) == 0:
			r.pending = append(r.flush(true), line...)
		case bytes.HasPrefix(trimmed, []byte("data:")):
			value := bytes.TrimPrefix(bytes.TrimPrefix(trimmed, []byte("data:")), []byte(" "))
			r.size += len(value)
			if r.size > maxEventSize {
				r.err = fmt.Errorf("an event of the MCP stream is over %d bytes", maxEventSize)
				continue
			}
			r.data = append(r.data, append([]byte(nil), value...))
		default:
			r.pending = line
		}
	}
	n := copy(p, r.pending)
	r.pending = r.pending[n:]
	return n, nil
}

// flush writes out the event's data: one line holding a rewritten task
// handle, or the lines as they came.
func (r *eventRewriter) flush(complete bool) []byte {
	if len(r.data) == 0 {
		return nil
	}
	joined := bytes.Join(r.data, []byte("\n"))
	var out []byte
	if rewritten := wrapTaskMessage(joined); complete && !bytes.Equal(rewritten, joined) {
		out = append(append([]byte("data: "), rewritten...), '\n')
	} else {
		for _, d := range r.data {
			out = append(append(append(out, "data: "...), d...), '\n')
		}
	}
	r.data, r.size = nil, 0
	return out
}

// readLine reads one line, refusing one longer than an event may be.
func (r *eventRewriter) readLine() ([]byte, error) {
	var line []byte
	for {
		chunk, err := r.in.ReadSlice('\n')
		line = append(line, chunk...)
		if len(line) > maxEventSize {
			return nil, fmt.Errorf("a line of the MCP stream is over %d bytes", maxEventSize)
		}
		if !errors.Is(err, bufio.ErrBufferFull) {
			return line, err
		}
	}
}

func (r *eventRewriter) Close() error { return r.body.Close() }

// taskHeaders sets Mcp-Name to the task ID on tasks/* requests over
// Streamable HTTP, as the extension asks.
func taskHeaders(req *http.Request) (*http.Request, error) {
	if req.Body == nil || req.Method != http.MethodPost {
		return req, nil
	}
	body, err := io.ReadAll(req.Body)
	_ = req.Body.Close()
	if err != nil {
		return nil, err
	}
	req.Body = io.NopCloser(bytes.NewReader(body))
	req.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(body)), nil }
	if !bytes.Contains(body, []byte(`"tasks/`)) {
		return req, nil
	}
	var msg struct {
		Method string `json:"method"`
		Params struct {
			TaskID string `json:"taskId"`
		} `json:"params"`
	}
	if json.Unmarshal(body, &msg) == nil && strings.HasPrefix(msg.Method, "tasks/") && msg.Params.TaskID != "" {
		req.Header.Set("Mcp-Name", msg.Params.TaskID)
	}
	return req, nil
}
