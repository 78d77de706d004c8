package mcptest

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// tasksExtension is the extension a client declares to get tasks.
const tasksExtension = "io.modelcontextprotocol/tasks"

// handleKey marks, inside the SDK, a tool result that goes out as a task
// handle; the transport rewrites it before it reaches the wire.
const handleKey = "stepwise.test/task"

// TaskServer answers tools/call with tasks of the tasks extension, kept in
// memory across connections so any connection can poll them. Its tools:
//
//   - report (read): completes on its second poll;
//   - failing_report: fails with a JSON-RPC error;
//   - uncertain_report: fails with the Dex outcome key "unknown";
//   - cancelled_report: ends cancelled;
//   - lost_report (idempotent write): the server forgets it;
//   - approval_report: asks "Publish the report?" (a boolean), then
//     completes with the answer;
//   - format_report: asks "Which format?" (pdf or csv);
//   - name_report: asks "Name the report." (free text);
//   - survey_report: asks two questions in one form, which no session
//     question fits;
//   - sticky_report: asks "Approve?" (a boolean) and lists the answered
//     request for two more polls before it completes;
//   - slow_report: works until cancelled;
//   - long_id_report (idempotent write): names its task with 4,096 bytes
//     more than an ID needs, as a hostile server would.
type TaskServer struct {
	// URL is the Streamable HTTP endpoint.
	URL string

	mu     sync.Mutex
	tasks  map[string]*task
	next   int
	log    []string
	pollMs int64
	// traced lists the trace context requests carried: "<method>
	// <traceparent>" from _meta, and "http <traceparent>" from headers.
	traced []string
}

type task struct {
	id, tool, key string
	status        string
	message       string
	polls         int
	result        *mcp.CallToolResult
	err           *jsonrpc.Error
	asks          map[string]any
	forgotten     bool
	sticky        int
}

// NewTaskServer serves tasks over Streamable HTTP until the test ends.
func NewTaskServer(t testing.TB) *TaskServer {
	s := &TaskServer{tasks: map[string]*task{}, pollMs: 1500}
	handler := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return s.Server() },
		&mcp.StreamableHTTPOptions{Stateless: true, JSONResponse: true})
	srv := httptest.NewServer(s.noteHeaders(rewriteHandles(handler)))
	t.Cleanup(srv.Close)
	s.URL = srv.URL
	return s
}

// noteHeaders records the traceparent header of each request.
func (s *TaskServer) noteHeaders(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if tp := r.Header.Get("Traceparent"); tp != "" {
			s.mu.Lock()
			s.traced = append(s.traced, "http "+tp)
			s.mu.Unlock()
		}
		next.ServeHTTP(w, r)
	})
}

// noteMeta records the traceparent a request's _meta carried.
func (s *TaskServer) noteMeta(method string, meta mcp.Meta) {
	if tp, ok := meta["traceparent"].(string); ok {
		s.mu.Lock()
		s.traced = append(s.traced, method+" "+tp)
		s.mu.Unlock()
	}
}

// TraceContexts lists the trace contexts requests carried, in order:
// "<method> <traceparent>" from _meta, "http <traceparent>" from headers.
func (s *TaskServer) TraceContexts() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.traced...)
}

// Log lists what the server was asked: "call <tool> <key>", "get <id>",
// "update <id> <key> <action> <content>", "cancel <id>".
func (s *TaskServer) Log() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.log...)
}

// SetPollInterval sets the pollIntervalMs the server asks for.
func (s *TaskServer) SetPollInterval(d time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.pollMs = d.Milliseconds()
}

// Status returns a task's status.
func (s *TaskServer) Status(id string) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if t, ok := s.tasks[id]; ok {
		return t.status
	}
	return ""
}

func (s *TaskServer) record(format string, args ...any) {
	s.log = append(s.log, fmt.Sprintf(format, args...))
}

// InMemory returns a new in-memory connection to the server, for a
// client that polls tasks on its own connection.
func (s *TaskServer) InMemory() (mcp.Transport, error) {
	client, server := mcp.NewInMemoryTransports()
	if _, err := s.Server().Connect(context.Background(), handleTransport{server}, nil); err != nil {
		return nil, err
	}
	return client, nil
}

var taskToolSchema = map[string]any{"type": "object", "properties": map[string]any{"note": map[string]any{"type": "string"}}}

// Server returns an MCP server over the shared tasks.
func (s *TaskServer) Server() *mcp.Server {
	srv := mcp.NewServer(&mcp.Implementation{Name: "tasks", Version: "1"}, nil)
	add := func(name string, annotations *mcp.ToolAnnotations) {
		srv.AddTool(&mcp.Tool{Name: name, Description: "Task tool " + name + ".", InputSchema: taskToolSchema, Annotations: annotations},
			func(_ context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
				return s.call(name, req)
			})
	}
	add("report", &mcp.ToolAnnotations{ReadOnlyHint: true})
	add("failing_report", &mcp.ToolAnnotations{ReadOnlyHint: true})
	add("uncertain_report", &mcp.ToolAnnotations{IdempotentHint: true})
	add("cancelled_report", &mcp.ToolAnnotations{ReadOnlyHint: true})
	add("lost_report", &mcp.ToolAnnotations{IdempotentHint: true})
	add("approval_report", &mcp.ToolAnnotations{ReadOnlyHint: true})
	add("format_report", &mcp.ToolAnnotations{ReadOnlyHint: true})
	add("name_report", &mcp.ToolAnnotations{ReadOnlyHint: true})
	add("survey_report", &mcp.ToolAnnotations{ReadOnlyHint: true})
	add("slow_report", &mcp.ToolAnnotations{ReadOnlyHint: true})
	add("sticky_report", &mcp.ToolAnnotations{ReadOnlyHint: true})
	add("long_id_report", &mcp.ToolAnnotations{IdempotentHint: true})
	_ = mcp.AddReceivingCustomMethod(srv, "tasks/get", func(_ context.Context, _ *mcp.ServerSession, p *taskRef) (*taskState, error) {
		s.noteMeta("tasks/get", p.Meta)
		return s.get(p.TaskID)
	})
	_ = mcp.AddReceivingCustomMethod(srv, "tasks/update", func(_ context.Context, _ *mcp.ServerSession, p *taskUpdate) (*ack, error) {
		return s.update(p)
	})
	_ = mcp.AddReceivingCustomMethod(srv, "tasks/cancel", func(_ context.Context, _ *mcp.ServerSession, p *taskRef) (*ack, error) {
		s.noteMeta("tasks/cancel", p.Meta)
		s.mu.Lock()
		defer s.mu.Unlock()
		s.record("cancel %s", p.TaskID)
		if t, ok := s.tasks[p.TaskID]; ok && !terminal(t.status) {
			t.status = "cancelled"
		}
		return &ack{}, nil
	})
	return srv
}

type taskRef struct {
	mcp.ParamsBase
	TaskID string `json:"taskId"`
}

type taskUpdate struct {
	mcp.ParamsBase
	TaskID         string                       `json:"taskId"`
	InputResponses map[string]*mcp.ElicitResult `json:"inputResponses"`
}

type ack struct {
	mcp.ResultBase
	ResultType string `json:"resultType"`
}

type taskState struct {
	mcp.ResultBase
	ResultType     string              `json:"resultType"`
	TaskID         string              `json:"taskId"`
	Status         string              `json:"status"`
	StatusMessage  string              `json:"statusMessage,omitempty"`
	CreatedAt      string              `json:"createdAt"`
	LastUpdatedAt  string              `json:"lastUpdatedAt"`
	TTLMs          *int64              `json:"ttlMs"`
	PollIntervalMs int64               `json:"pollIntervalMs"`
	Result         *mcp.CallToolResult `json:"result,omitempty"`
	Error          *jsonrpc.Error      `json:"error,omitempty"`
	InputRequests  map[string]any      `json:"inputRequests,omitempty"`
}

func terminal(status string) bool {
	return status == "completed" || status == "failed" || status == "cancelled"
}

// call creates a task for a client that declared the extension; without
// it, the tool refuses.
func (s *TaskServer) call(tool string, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
	caps, _ := json.Marshal(req.Params.Meta["io.modelcontextprotocol/clientCapabilities"])
	if !bytes.Contains(caps, []byte(tasksExtension)) {
		return &mcp.CallToolResult{IsError: true, Content: []mcp.Content{&mcp.TextContent{Text: "the client did not declare the tasks extension"}}}, nil
	}
	key, _ := req.Params.Meta["io.superdurable.dex/idempotencyKey"].(string)
	s.mu.Lock()
	defer s.mu.Unlock()
	s.next++
	t := &task{id: "task-" + strconv.Itoa(s.next), tool: tool, key: key, status: "working"}
	if tool == "long_id_report" {
		t.id += "-" + strings.Repeat("x", 4096)
	}
	s.tasks[t.id] = t
	s.record("call %s %s", tool, key)
	handle := s.state(t)
	handle.ResultType = "task"
	raw, _ := json.Marshal(handle)
	var m map[string]any
	_ = json.Unmarshal(raw, &m)
	return &mcp.CallToolResult{Content: []mcp.Content{}, Meta: mcp.Meta{handleKey: m}}, nil
}

func (s *TaskServer) state(t *task) *taskState {
	now := time.Now().UTC().Format(time.RFC3339)
	out := &taskState{
		ResultType: "complete", TaskID: t.id, Status: t.status, StatusMessage: t.message,
		CreatedAt: now, LastUpdatedAt: now, PollIntervalMs: s.pollMs,
	}
	switch t.status {
	case "completed":
		out.Result = t.result
	case "failed":
		out.Error = t.err
	case "input_required":
		out.InputRequests = t.asks
	}
	return out
}

func elicit(message string, properties map[string]any) map[string]any {
	return map[string]any{"method": "elicitation/create", "params": map[string]any{
		"mode": "form", "message": message, "requestedSchema": map[string]any{"type": "object", "properties": properties},
	}}
}

func done(text string) *mcp.CallToolResult {
	return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: text}}}
}

// get advances a task one step per poll and returns its state.
func (s *TaskServer) get(id string) (*taskState, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.record("get %s", id)
	t, ok := s.tasks[id]
	if !ok || t.forgotten {
		return nil, &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: "Failed to retrieve task: Task not found"}
	}
	t.polls++
	if t.tool == "sticky_report" && t.result != nil && t.sticky < 2 {
		// The answer is in, but the request is still listed.
		t.sticky++
		sticky := *t
		sticky.status = "input_required"
		return s.state(&sticky), nil
	}
	if terminal(t.status) || t.status == "input_required" {
		return s.state(t), nil
	}
	switch t.tool {
	case "report":
		if t.polls >= 2 {
			t.status, t.result = "completed", done("report ready for "+t.key)
		}
	case "failing_report":
		t.status, t.message = "failed", "the renderer crashed"
		t.err = &jsonrpc.Error{Code: jsonrpc.CodeInternalError, Message: "renderer crashed"}
	case "uncertain_report":
		data, _ := json.Marshal(map[string]any{"_meta": map[string]any{"io.superdurable.dex/outcome": "unknown"}})
		t.status, t.err = "failed", &jsonrpc.Error{Code: jsonrpc.CodeInternalError, Message: "the printer did not answer", Data: data}
	case "cancelled_report":
		t.status = "cancelled"
	case "lost_report":
		t.forgotten = true
		return nil, &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: "Failed to retrieve task: Task has expired"}
	case "approval_report":
		if t.result == nil {
			t.status = "input_required"
			t.asks = map[string]any{"publish-1": elicit("Publish the report?", map[string]any{"publish": map[string]any{"type": "boolean"}})}
		}
	case "format_report":
		if t.result == nil {
			t.status = "input_required"
			t.asks = map[string]any{"format-1": elicit("Which format?", map[string]any{"format": map[string]any{"type": "string", "enum": []string{"pdf", "csv"}}})}
		}
	case "sticky_report":
		if t.result == nil {
			t.status = "input_required"
			t.asks = map[string]any{"approve-1": elicit("Approve?", map[string]any{"approve": map[string]any{"type": "boolean"}})}
		}
	case "name_report":
		if t.result == nil {
			t.status = "input_required"
			t.asks = map[string]any{"name-1": elicit("Name the report.", map[string]any{"name": map[string]any{"type": "string"}})}
		}
	case "survey_report":
		t.status = "input_required"
		t.asks = map[string]any{"survey-1": elicit("Tell us about the report.", map[string]any{
			"title": map[string]any{"type": "string"}, "pages": map[string]any{"type": "integer"},
		})}
	}
	if t.result != nil && t.status == "working" && t.polls >= 1 {
		t.status = "completed"
	}
	return s.state(t), nil
}

// update takes the answer to the task's request: an accepted answer
// completes the task with it, a decline cancels it.
func (s *TaskServer) update(p *taskUpdate) (*ack, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	t, ok := s.tasks[p.TaskID]
	if !ok || t.forgotten {
		return nil, &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: "Failed to retrieve task: Task not found"}
	}
	for key, r := range p.InputResponses {
		content, _ := json.Marshal(r.Content)
		s.record("update %s %s %s %s", p.TaskID, key, r.Action, content)
		if _, asked := t.asks[key]; !asked || t.status != "input_required" {
			continue
		}
		switch r.Action {
		case "accept":
			t.status = "working"
			if t.tool != "sticky_report" {
				t.asks = nil
			}
			t.result = done(fmt.Sprintf("%s answered %s", t.tool, content))
		default:
			t.status, t.asks = "cancelled", nil
		}
	}
	return &ack{ResultType: "complete"}, nil
}

// rewriteHandles turns the marked results of JSON responses into task
// handles on their way out.
func rewriteHandles(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rec := httptest.NewRecorder()
		next.ServeHTTP(rec, r)
		body := rec.Body.Bytes()
		if bytes.Contains(body, []byte(handleKey)) {
			var resp map[string]json.RawMessage
			if json.Unmarshal(body, &resp) == nil {
				if result, ok := resp["result"]; ok {
					resp["result"] = unwrapHandle(result)
					body, _ = json.Marshal(resp)
				}
			}
		}
		for k, v := range rec.Header() {
			w.Header()[k] = v
		}
		w.Header().Del("Content-Length")
		w.WriteHeader(rec.Code)
		_, _ = w.Write(body)
	})
}

// unwrapHandle returns the task handle a marked result carries.
func unwrapHandle(result json.RawMessage) json.RawMessage {
	var marked struct {
		Meta map[string]json.RawMessage `json:"_meta"`
	}
	if json.Unmarshal(result, &marked) != nil {
		return result
	}
	if handle, ok := marked.Meta[handleKey]; ok {
		return handle
	}
	return result
}

// handleTransport rewrites marked results on a server connection.
type handleTransport struct{ mcp.Transport }

func (t handleTransport) Connect(ctx context.Context) (mcp.Connection, error) {
	conn, err := t.Transport.Connect(ctx)
	if err != nil {
		return nil, err
	}
	return handleConn{conn}, nil
}

type handleConn struct{ mcp.Connection }

func (c handleConn) Write(ctx context.Context, msg jsonrpc.Message) error {
	if resp, ok := msg.(*jsonrpc.Response); ok && len(resp.Result) > 0 && bytes.Contains(resp.Result, []byte(handleKey)) {
		resp.Result = unwrapHandle(resp.Result)
	}
	return c.Connection.Write(ctx, msg)
}
