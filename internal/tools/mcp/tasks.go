package mcp

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/stepwise-run/stepwise/internal/contract"
	"github.com/stepwise-run/stepwise/pkg/agent"
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
