package agent

import (
	"context"
	"errors"
	"time"
)

// TaskStarted is a tool call that started remote work the session polls,
// such as a long report or an MCP task. A tool returns it as its error, from
// StartTask: the session records the call waiting for the task, holds no
// connection while it runs, and polls it with the tool's TaskPoller on
// engine timers.
type TaskStarted struct {
	TaskID string
	// PollInterval is the wait before the first poll, rounded up to whole
	// seconds from one second to a day.
	PollInterval time.Duration
}

func (t *TaskStarted) Error() string { return "the tool started task " + t.TaskID }

// StartTask returns a TaskStarted. Save the task ID with
// ToolContext.SaveCheckpoint before returning it, and return the saved ID
// when ToolContext.Checkpoint holds one, so a retried attempt resumes the
// task instead of starting it again.
func StartTask(taskID string, pollInterval time.Duration) error {
	return &TaskStarted{TaskID: taskID, PollInterval: pollInterval}
}

// TaskPending is a poll of a task that still runs. A poller returns it as
// its error, from StillRunning.
type TaskPending struct {
	// PollInterval is the wait before the next poll.
	PollInterval time.Duration
	// Continuation is handed to the next poll in TaskPoll.Continuation;
	// empty clears it.
	Continuation string
}

func (p *TaskPending) Error() string { return "the task still runs" }

// StillRunning returns a TaskPending.
func StillRunning(pollInterval time.Duration, continuation string) error {
	return &TaskPending{PollInterval: pollInterval, Continuation: continuation}
}

// TaskPoll is one poll of a task.
type TaskPoll struct {
	ToolContext
	// TaskID is the task the tool started.
	TaskID string
	// PendingAnswer is the resolution of the question the task asked last,
	// handed over on the first poll after it (and again if that poll is
	// retried): deliver it idempotently, keyed by its question ID. Continuation
	// holds that question's continuation on that poll.
	PendingAnswer *QuestionAnswer
}

// TaskPoller polls the tasks a tool starts. A poll only reads the task, or
// delivers an answer idempotently, because a crash repeats it. It returns
// the task's output when the task is done; StillRunning while it runs;
// AskUser (an InputRequest, whose Continuation comes back on the poll after
// the answer) when the task asks the user; Failed for a failure the model
// should see. Any other error fails the poll attempt, which is retried.
type TaskPoller interface {
	PollTask(ctx context.Context, poll TaskPoll) (string, error)
	// CancelTask stops a task the turn abandoned, best effort. It must be
	// idempotent by task ID: a retry calls it again.
	CancelTask(ctx context.Context, poll TaskPoll) error
}

// WithTaskPoller lets the tool start tasks that the session polls with
// poller; without one, a tool that returns StartTask fails its call.
func WithTaskPoller(poller TaskPoller) ToolOption {
	return func(o *toolOptions) { o.poller = poller }
}

// IsTaskStarted reports whether err is, or wraps, a TaskStarted.
func IsTaskStarted(err error) (*TaskStarted, bool) {
	var t *TaskStarted
	ok := errors.As(err, &t)
	return t, ok
}

// IsTaskPending reports whether err is, or wraps, a TaskPending.
func IsTaskPending(err error) (*TaskPending, bool) {
	var p *TaskPending
	ok := errors.As(err, &p)
	return p, ok
}
