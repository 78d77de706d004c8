package client

import (
	"context"
	"errors"
	"fmt"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/serviceerror"
	taskqueuepb "go.temporal.io/api/taskqueue/v1"
)

// ErrWaitingForWorker says that a request sent to a session waits for a
// worker: no worker polls the Agent's task queue, or none took the
// session's task. A *PendingError matches it with errors.Is when that is
// why the session did not answer.
var ErrWaitingForWorker = errors.New("the request waits for a worker")

// PendingError is a request the session did not answer before the caller's
// context ended. It is neither a refusal nor a failure: the request was
// sent, and a worker of the session's Flow type runs it when it polls, and
// then the session accepts or refuses it. Send the same request again with
// WithRequestID(RequestID) to learn the outcome: the engine answers a
// request it already ran with that outcome, and attaches a request still
// waiting to the same wait.
//
// The engine keeps a sent request that no worker took yet in memory, so a
// restart of the engine's servers may lose it; sending it again with its
// request ID sends it once more if it was lost. The session remembers the
// newest 128 requests it accepted, across its runs, so a request it
// accepted answers true again however late it is sent again; a request it
// refused is judged anew.
type PendingError struct {
	// Request is the request's name, such as resolve_interrupt.
	Request   string
	SessionID string
	// RequestID names the request; pass it to WithRequestID to send the
	// request again.
	RequestID string
	// TaskQueue is where the session's workers poll.
	TaskQueue string
	// NoWorker is true when the request waits for a worker: no worker
	// polled TaskQueue recently, or none took the session's task.
	NoWorker bool
	// Err is why the wait ended, such as context.DeadlineExceeded.
	Err error
	// why says what showed that no worker runs the request.
	why string
}

func (e *PendingError) Error() string {
	retry := fmt.Sprintf("send it again with request ID %s to learn the outcome", e.RequestID)
	if e.NoWorker {
		why := e.why
		if why == "" {
			why = "no worker polls task queue " + e.TaskQueue
		}
		return fmt.Sprintf("%s on session %s was sent and waits for a worker: %s; it takes effect, or is refused, when a worker runs it; %s",
			e.Request, e.SessionID, why, retry)
	}
	return fmt.Sprintf("%s on session %s was sent, but the session did not answer in time (%v); %s", e.Request, e.SessionID, e.Err, retry)
}

// Is makes errors.Is(err, ErrWaitingForWorker) report a request that waits
// because no worker polls.
func (e *PendingError) Is(target error) bool {
	return target == ErrWaitingForWorker && e.NoWorker
}

// Unwrap returns why the wait ended.
func (e *PendingError) Unwrap() error { return e.Err }

// recentPoll is how recently a worker must have polled to count as
// polling. A worker that runs polls again at least every minute (a long
// poll's timeout), while the engine lists a worker that stopped for a few
// minutes more.
const recentPoll = 90 * time.Second

// untakenFor is how long a session's task may wait untaken before the
// session counts as waiting for a worker. A worker that polls takes a task
// at once; a task for a worker that ran the session last and stopped waits
// 5 seconds for it, then the engine schedules it anew for any worker.
const untakenFor = 5 * time.Second

// describeTimeout bounds the look at the session and its task queue after
// the caller's context ended.
const describeTimeout = 10 * time.Second

// failed turns an RPC's error into what the caller sees: a *PendingError
// when the caller's wait ended before the session answered, else the error
// named with the request.
func (s *Sessions) failed(ctx context.Context, name, sessionID, requestID string, err error) error {
	if !waitEnded(ctx, err) {
		return fmt.Errorf("%s on session %s: %w", name, sessionID, err)
	}
	pending := &PendingError{Request: name, SessionID: sessionID, RequestID: requestID, TaskQueue: s.sessionQueue(sessionID), Err: err}
	if ctxErr := ctx.Err(); ctxErr != nil {
		pending.Err = ctxErr
	}
	// The caller's context has ended; the look at the session gets its own
	// short one.
	lookCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), describeTimeout)
	defer cancel()
	pending.why = s.noWorker(lookCtx, sessionID, pending.TaskQueue)
	pending.NoWorker = pending.why != ""
	return pending
}

// waitEnded reports whether err says the caller's wait ended, rather than
// that the engine failed the request.
func waitEnded(ctx context.Context, err error) bool {
	if ctx.Err() != nil || errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
		return true
	}
	var deadline *serviceerror.DeadlineExceeded
	var canceled *serviceerror.Canceled
	return errors.As(err, &deadline) || errors.As(err, &canceled)
}

// noWorker says why the session waits for a worker, or "" when that is
// not known: no worker polled its task queue recently, or its task waited
// untaken for untakenFor on its first attempt (a task that failed on a
// worker and waits to be retried is not waiting for a worker).
func (s *Sessions) noWorker(ctx context.Context, sessionID, taskQueue string) string {
	resp, err := s.c.DescribeTaskQueue(ctx, taskQueue, enumspb.TASK_QUEUE_TYPE_WORKFLOW)
	if err == nil && !pollsRecently(resp.GetPollers(), time.Now(), s.recentPoll) {
		return "no worker polls task queue " + taskQueue
	}
	workflowID, err := s.workflowID(ctx, sessionID)
	if err != nil {
		return ""
	}
	desc, err := s.c.DescribeWorkflow(ctx, workflowID, "")
	if err != nil {
		return ""
	}
	task := desc.RawResponse.GetPendingWorkflowTask()
	if task == nil || task.GetState() != enumspb.PENDING_WORKFLOW_TASK_STATE_SCHEDULED || task.GetAttempt() > 1 {
		return ""
	}
	// A task scheduled again, such as after it waited for the worker that
	// ran the session last, waits since it was first scheduled.
	scheduled := task.GetScheduledTime()
	if original := task.GetOriginalScheduledTime(); original != nil {
		scheduled = original
	}
	if waited := time.Since(scheduled.AsTime()); waited >= untakenFor {
		return fmt.Sprintf("no worker took the session's task from task queue %s in %s", taskQueue, waited.Round(time.Second))
	}
	return ""
}

// sessionQueue is the task queue a session runs on, as found, or the one
// new sessions start on.
func (s *Sessions) sessionQueue(sessionID string) string {
	s.resolved.mu.Lock()
	ref, ok := s.resolved.found[sessionID]
	s.resolved.mu.Unlock()
	if ok {
		return ref.taskQueue
	}
	return s.startNames().TaskQueue()
}

// pollsRecently reports whether a poller polled within recent of now.
func pollsRecently(pollers []*taskqueuepb.PollerInfo, now time.Time, recent time.Duration) bool {
	for _, p := range pollers {
		if now.Sub(p.GetLastAccessTime().AsTime()) < recent {
			return true
		}
	}
	return false
}

// notReadyBackoff bounds the waits between sends of a request the engine
// aborted because a workflow task failed.
var notReadyBackoff = struct{ first, max time.Duration }{first: 50 * time.Millisecond, max: 2 * time.Second}

// sendUntilTaken runs send again while the engine answers WorkflowNotReady,
// until ctx ends. The engine gives that answer when the workflow task that
// carried the request failed before the session accepted it, as when the
// task races a worker version change; the request was not run, and send
// reuses its request ID, so sending it again runs it at most once.
func sendUntilTaken(ctx context.Context, send func() error) error {
	wait := notReadyBackoff.first
	for {
		err := send()
		var notReady *serviceerror.WorkflowNotReady
		if !errors.As(err, &notReady) {
			return err
		}
		timer := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			timer.Stop()
			return err
		case <-timer.C:
		}
		wait = min(2*wait, notReadyBackoff.max)
	}
}
