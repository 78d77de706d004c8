package mcp

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"mime"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/stepwise-run/stepwise/internal/contract"
	"github.com/stepwise-run/stepwise/pkg/agent"
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

// TaskStatusEvent is the session event of a task whose status changed.
const TaskStatusEvent = "mcp.task_status"

// Task timing: how long a stdio server's task is polled inside its call by
// default, and the longest wait between two polls.
const (
	DefaultTaskWaitTimeout = 10 * time.Minute
	maxTaskPollInterval    = time.Minute
	// answerSettleTime is how long after tasks/update a task may still list
	// the request it was answered, read as working meanwhile.
	answerSettleTime = 10 * time.Second
	// taskPollAttempts bounds the polls in a row that cannot reach the
	// server before the task counts as lost.
	taskPollAttempts = 3
)

// TaskPolling says who polls a server's tasks.
type TaskPolling int

const (
	// PollInCall polls a task on the call's own connection, inside the
	// tool Step: a stdio server's task lives in its process, which ends
	// with the request.
	PollInCall TaskPolling = iota
	// PollInSession makes a task a tool task the session polls on timers,
	// with no connection held while it runs: a Streamable HTTP server's
	// task, which any connection can poll.
	PollInSession
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

// nextPollInterval is the server's interval rounded up to whole seconds,
// or, when that is shorter, double the previous interval up to a minute,
// so a task that runs for hours adds a few Steps a minute at most.
func nextPollInterval(previous time.Duration, t *Task) time.Duration {
	server := time.Second
	if t != nil && t.PollIntervalMs != nil {
		server = contract.TaskPollInterval(time.Duration(*t.PollIntervalMs) * time.Millisecond)
	}
	if previous <= 0 {
		return server
	}
	return max(server, min(2*previous, maxTaskPollInterval))
}

// taskState is what one poll hands the next in its continuation.
type taskState struct {
	Status      string        `json:"status,omitempty"`
	Interval    time.Duration `json:"interval,omitempty"`
	Unreachable int           `json:"unreachable,omitempty"`
	// The question a poll asked: the request's key and fingerprint, and the
	// field and kind its answer fills.
	Key         string `json:"key,omitempty"`
	Fingerprint string `json:"fingerprint,omitempty"`
	Field       string `json:"field,omitempty"`
	Kind        string `json:"kind,omitempty"`
	// AnsweredAt is when the answer was sent with tasks/update.
	AnsweredAt *time.Time `json:"answeredAt,omitempty"`
	// Declined is set once a decline was sent: a task cancelled after it
	// is a lost task, not a failure.
	Declined bool `json:"declined,omitempty"`
}

func (s taskState) encode() string {
	raw, _ := json.Marshal(s)
	return string(raw)
}

func readTaskState(text string) taskState {
	var s taskState
	_ = json.Unmarshal([]byte(text), &s)
	return s
}

// taskCheckpoint is what a tool Step saves once tools/call returned a
// task, so a retried attempt returns the same task without calling the
// tool again.
type taskCheckpoint struct {
	TaskID   string        `json:"mcpTaskId"`
	Interval time.Duration `json:"interval"`
}

// PollSourceTask polls a session-polled task once.
func (s *Source) PollSourceTask(ctx context.Context, poll agent.TaskPoll, tool agent.SourceCall) (agent.ToolOutput, error) {
	var ref reference
	if err := json.Unmarshal([]byte(tool.Reference), &ref); err != nil {
		return agent.ToolOutput{}, fmt.Errorf("MCP tool %s: the stored reference is not JSON: %w", tool.Name, err)
	}
	server, ok := s.server(ref.Server)
	if !ok {
		return agent.ToolOutput{}, lostTask(poll.Effect, fmt.Sprintf("MCP server %s is not configured on this worker, so task %s cannot be followed", ref.Server, poll.TaskID))
	}
	state := readTaskState(poll.Continuation)
	cs, err := connect(ctx, server, nil)
	if err != nil {
		if ctx.Err() != nil {
			return agent.ToolOutput{}, ctx.Err()
		}
		if poll.PendingAnswer != nil {
			// The answer was not sent: the attempt fails, so it is not
			// dropped with a pending poll.
			return agent.ToolOutput{}, fmt.Errorf("connecting to MCP server %s to answer task %s: %w", server.Name, poll.TaskID, err)
		}
		state.Unreachable++
		if state.Unreachable >= taskPollAttempts {
			return agent.ToolOutput{}, lostTask(poll.Effect, fmt.Sprintf("MCP server %s could not be reached for %d polls of task %s: %v", server.Name, taskPollAttempts, poll.TaskID, err))
		}
		interval := nextPollInterval(state.Interval, nil)
		state.Interval = interval
		return agent.ToolOutput{}, agent.StillRunning(interval, state.encode())
	}
	defer func() { _ = cs.Close() }()
	state.Unreachable = 0
	p := &taskPoller{cs: cs, server: server, poll: poll, tool: tool, state: state}
	return p.once(ctx)
}

// CancelSourceTask sends tasks/cancel; any answer from the server ends the
// cancellation, so a retried one is harmless.
func (s *Source) CancelSourceTask(ctx context.Context, poll agent.TaskPoll, tool agent.SourceCall) error {
	var ref reference
	if err := json.Unmarshal([]byte(tool.Reference), &ref); err != nil {
		return nil
	}
	server, ok := s.server(ref.Server)
	if !ok {
		return nil
	}
	cs, err := connect(ctx, server, nil)
	if err != nil {
		return err
	}
	defer func() { _ = cs.Close() }()
	return cancelTask(ctx, cs, poll.TaskID)
}

// cancelTask sends tasks/cancel; a JSON-RPC answer of any kind ends it.
func cancelTask(ctx context.Context, cs *mcp.ClientSession, id string) error {
	_, err := mcp.CallCustomMethod[*taskParams, *ackResult](ctx, cs, "tasks/cancel", &taskParams{ParamsBase: mcp.ParamsBase{Meta: withTraceContext(ctx, nil)}, TaskID: id})
	if err != nil && serverError(err) == nil {
		return err
	}
	return nil
}

// lostTask is a task the server no longer knows or that cannot be
// reached: a read failed, and a write's outcome is unknown, because the
// task may have run; the tool is never called again from a poll.
func lostTask(effect agent.Effect, text string) error {
	if effect == agent.EffectRead {
		return agent.Failed("%s", text)
	}
	return agent.OutcomeUnknown("%s", text)
}

// taskPoller is one poll of one task on an open connection.
type taskPoller struct {
	cs     *mcp.ClientSession
	server Server
	poll   agent.TaskPoll
	tool   agent.SourceCall
	state  taskState
}

// once polls the task: it first delivers a pending answer, then reads the
// task and maps its status.
func (p *taskPoller) once(ctx context.Context) (agent.ToolOutput, error) {
	reqCtx, cancel := context.WithTimeout(ctx, p.server.connectionTimeout())
	defer cancel()
	if answer := p.poll.PendingAnswer; answer != nil {
		done, err := p.deliver(reqCtx, answer)
		if done || err != nil {
			return agent.ToolOutput{}, err
		}
	}
	t, err := p.read(reqCtx)
	if err != nil {
		return agent.ToolOutput{}, err
	}
	if t.Status != p.state.Status {
		writeTaskStatus(p.poll.ToolContext, p.tool.Name, t)
	}
	switch t.Status {
	case taskCompleted:
		return completedTask(ctx, p.server, t)
	case taskCancelled:
		if p.state.Declined {
			return agent.ToolOutput{}, lostTask(p.poll.Effect, fmt.Sprintf("MCP task %s was cancelled after its question was declined", t.TaskID))
		}
		return agent.ToolOutput{}, failedTask(t)
	case taskFailed:
		return agent.ToolOutput{}, failedTask(t)
	case taskInputRequired:
		return p.inputRequired(ctx, t)
	}
	p.state.Status, p.state.AnsweredAt = t.Status, nil
	if p.state.Interval == 0 {
		// The first poll: the Step waited the server's own interval.
		p.state.Interval = nextPollInterval(0, t)
	}
	p.state.Interval = nextPollInterval(p.state.Interval, t)
	return agent.ToolOutput{}, agent.StillRunning(p.state.Interval, p.state.encode())
}

// read reads the task; one the server no longer knows is lost.
func (p *taskPoller) read(ctx context.Context) (*Task, error) {
	t, err := getTask(ctx, p.cs, p.poll.TaskID)
	if wire := serverError(err); wire != nil && wire.Code == jsonrpc.CodeInvalidParams {
		return nil, lostTask(p.poll.Effect, fmt.Sprintf("MCP server %s no longer knows task %s: %s", p.server.Name, p.poll.TaskID, wire.Message))
	}
	return t, err
}

// writeTaskStatus writes the event of a task whose status changed.
func writeTaskStatus(call agent.ToolContext, tool string, t *Task) {
	if call.Events != nil {
		call.Events.WriteEvent(TaskStatusEvent, map[string]any{
			"tool_call_id": call.ToolCallID, "tool_name": tool, "task_id": t.TaskID,
			"status": t.Status, "status_message": t.StatusMessage,
		})
	}
}

// completedTask is a completed task's result, under the same rules as a
// tools/call result.
func completedTask(ctx context.Context, server Server, t *Task) (agent.ToolOutput, error) {
	var res mcp.CallToolResult
	if len(t.Result) == 0 || json.Unmarshal(t.Result, &res) != nil {
		return agent.ToolOutput{}, agent.Failed("MCP task %s completed without a tool result", t.TaskID)
	}
	return callResult(ctx, server, &res)
}

// failedTask is a failed or cancelled task: failed, unless its error
// carries the Dex outcome key, which wins as it does on a call.
func failedTask(t *Task) error {
	text := fmt.Sprintf("MCP task %s %s", t.TaskID, t.Status)
	if t.Error != nil {
		text += fmt.Sprintf(": MCP error %d: %s", t.Error.Code, t.Error.Message)
		if outcome(errorMeta(t.Error)) == outcomeUnknown {
			return agent.OutcomeUnknown("%s", text)
		}
	} else if t.StatusMessage != "" {
		text += ": " + t.StatusMessage
	}
	return agent.Failed("%s", text)
}

// question is an input request that fits a session question: one form
// elicitation with a single string, enum or boolean field.
type question struct {
	key, fingerprint, field, kind string
	text                          string
	choices                       []string
}

// fittingQuestion reads a task's input requests as one session question;
// ok is false for any other request, and describe names each.
func fittingQuestion(t *Task) (q question, ok bool) {
	if len(t.InputRequests) != 1 {
		return question{}, false
	}
	for key, req := range t.InputRequests {
		if req.Method != "elicitation/create" {
			return question{}, false
		}
		var params struct {
			Mode            string `json:"mode"`
			Message         string `json:"message"`
			RequestedSchema struct {
				Properties map[string]struct {
					Type string   `json:"type"`
					Enum []string `json:"enum"`
				} `json:"properties"`
			} `json:"requestedSchema"`
		}
		if json.Unmarshal(req.Params, &params) != nil || (params.Mode != "" && params.Mode != "form") ||
			len(params.RequestedSchema.Properties) != 1 {
			return question{}, false
		}
		sum := sha256.Sum256(req.Params)
		q = question{key: key, fingerprint: hex.EncodeToString(sum[:8]), text: params.Message}
		for field, prop := range params.RequestedSchema.Properties {
			q.field = field
			switch prop.Type {
			case "boolean":
				q.kind, q.choices = "boolean", []string{"yes", "no"}
			case "string":
				q.kind, q.choices = "string", prop.Enum
			default:
				return question{}, false
			}
		}
		return q, strings.TrimSpace(q.text) != ""
	}
	return question{}, false
}

// describeTaskRequests names each input a task asked for.
func describeTaskRequests(t *Task) string {
	var out []string
	for _, key := range slices.Sorted(maps.Keys(t.InputRequests)) {
		req := t.InputRequests[key]
		var params struct {
			Message string `json:"message"`
		}
		_ = json.Unmarshal(req.Params, &params)
		out = append(out, describeRequest(req.Method, params.Message))
	}
	return strings.Join(out, ", ")
}

// inputRequired turns a task's input request into a session question, or
// fails the call and cancels the task when it does not fit.
func (p *taskPoller) inputRequired(ctx context.Context, t *Task) (agent.ToolOutput, error) {
	q, fits := fittingQuestion(t)
	if !fits {
		cancelBounded(ctx, p.cs, t.TaskID, p.server.connectionTimeout())
		return agent.ToolOutput{}, agent.Failed("%s (%s)", inputRequestPrefix, describeTaskRequests(t))
	}
	if at := p.state.AnsweredAt; at != nil && q.key == p.state.Key && q.fingerprint == p.state.Fingerprint &&
		time.Since(*at) < answerSettleTime {
		// The task has not taken the answer in yet.
		return agent.ToolOutput{}, agent.StillRunning(time.Second, p.state.encode())
	}
	next := taskState{
		Status: t.Status, Interval: p.state.Interval,
		Key: q.key, Fingerprint: q.fingerprint, Field: q.field, Kind: q.kind,
	}
	return agent.ToolOutput{}, &agent.InputRequest{
		Question: q.text, Choices: q.choices, AllowsFreeText: len(q.choices) == 0, Continuation: next.encode(),
	}
}

// deliver sends a question's resolution with tasks/update, only while the
// task still lists that same request, and only on the poll's first
// attempt; a retried attempt cannot tell whether the first sent it, so it
// asks again. done is true when the poll's outcome is decided here.
func (p *taskPoller) deliver(ctx context.Context, answer *agent.QuestionAnswer) (done bool, err error) {
	asked := readTaskState(p.poll.Continuation)
	t, err := p.read(ctx)
	if err != nil {
		return true, err
	}
	q, fits := fittingQuestion(t)
	stillAsks := t.Status == taskInputRequired && fits && q.key == asked.Key && q.fingerprint == asked.Fingerprint
	if !stillAsks {
		// The task moved on: the answer goes nowhere, and the poll reads
		// the task as it is.
		p.state = taskState{Status: asked.Status, Interval: asked.Interval}
		return false, nil
	}
	if p.poll.Attempt > 1 {
		return true, &agent.InputRequest{
			Question: q.text, Choices: q.choices, AllowsFreeText: len(q.choices) == 0, Continuation: asked.encode(),
		}
	}
	p.poll.Heartbeat()
	response := &mcp.ElicitResult{}
	switch answer.Resolution {
	case agent.QuestionAnswered:
		response.Action = "accept"
		var value any = answer.Answer
		if asked.Kind == "boolean" {
			value = answer.Answer == "yes"
		}
		response.Content = map[string]any{asked.Field: value}
	case agent.QuestionDeclined:
		response.Action = "decline"
	default:
		response.Action = "cancel"
	}
	_, err = mcp.CallCustomMethod[*taskUpdateParams, *ackResult](ctx, p.cs, "tasks/update", &taskUpdateParams{
		TaskID: p.poll.TaskID, InputResponses: map[string]*mcp.ElicitResult{asked.Key: response},
	})
	if err != nil && answer.Resolution == agent.QuestionDeclined {
		// A decline the task did not take: cancel it and end the call.
		// The request budget may be spent: the cancel gets its own.
		cancelBounded(context.WithoutCancel(ctx), p.cs, p.poll.TaskID, p.server.connectionTimeout())
		return true, lostTask(p.poll.Effect, fmt.Sprintf("MCP task %s did not take the declined answer: %v", p.poll.TaskID, err))
	}
	if err != nil {
		return true, err
	}
	now := time.Now()
	asked.AnsweredAt = &now
	asked.Declined = answer.Resolution == agent.QuestionDeclined
	return true, agent.StillRunning(time.Second, asked.encode())
}

// waitTask polls a task on the call's own connection, with a heartbeat per
// poll, for at most the server's task wait; a task that outlasts it, or
// that the server lost, is an interruption, so only a read or an
// idempotent write calls the tool again.
func waitTask(ctx context.Context, cs *mcp.ClientSession, server Server, call agent.ToolContext, tool string, t *Task) (agent.ToolOutput, error) {
	wait := orDuration(server.TaskWaitTimeout, DefaultTaskWaitTimeout)
	requestTimeout := server.connectionTimeout()
	deadline := time.Now().Add(wait)
	interval := time.Duration(0)
	status := t.Status
	for {
		switch t.Status {
		case taskCompleted:
			return completedTask(ctx, server, t)
		case taskFailed, taskCancelled:
			return agent.ToolOutput{}, failedTask(t)
		case taskInputRequired:
			// The process ends with the request, so no answer could reach
			// the task later.
			cancelBounded(ctx, cs, t.TaskID, requestTimeout)
			return agent.ToolOutput{}, agent.Failed("%s (%s)", inputRequestPrefix, describeTaskRequests(t))
		}
		remaining := time.Until(deadline)
		if remaining <= 0 {
			cancelBounded(ctx, cs, t.TaskID, requestTimeout)
			return agent.ToolOutput{}, &CallInterruptedError{Tool: tool, Cause: fmt.Errorf("task %s still ran after %s", t.TaskID, wait)}
		}
		interval = nextPollInterval(interval, t)
		select {
		case <-time.After(min(interval, remaining)):
		case <-ctx.Done():
			return agent.ToolOutput{}, ctx.Err()
		}
		if call.Heartbeat != nil {
			call.Heartbeat()
		}
		getCtx, cancel := context.WithTimeout(ctx, requestTimeout)
		next, err := getTask(getCtx, cs, t.TaskID)
		cancel()
		if err != nil {
			return agent.ToolOutput{}, &CallInterruptedError{Tool: tool, Cause: fmt.Errorf("polling task %s: %w", t.TaskID, err)}
		}
		t = next
		if t.Status != status {
			writeTaskStatus(call, tool, t)
		}
		status = t.Status
	}
}

// cancelBounded sends tasks/cancel, best effort, within the request
// timeout.
func cancelBounded(ctx context.Context, cs *mcp.ClientSession, id string, timeout time.Duration) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	_ = cancelTask(ctx, cs, id)
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
