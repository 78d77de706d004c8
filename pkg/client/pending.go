package client

import (
	"context"
	"errors"
	"fmt"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/serviceerror"

	"github.com/stepwise-run/stepwise/internal/engine"
)

// ErrWaitingForWorker says that no worker polls the Agent's task queue, so a
// request sent to a session waits until one does. A *PendingError matches
// it with errors.Is when that is why the session did not answer.
var ErrWaitingForWorker = errors.New("no worker polls the task queue")

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
// request ID sends it once more if it was lost, and never runs it twice.
type PendingError struct {
	// Request is the request's name, such as resolve_interrupt.
	Request   string
	SessionID string
	// RequestID names the request; pass it to WithRequestID to send the
	// request again.
	RequestID string
	// TaskQueue is where the session's workers poll.
	TaskQueue string
	// NoWorker is true when no worker polled TaskQueue recently.
	NoWorker bool
	// Err is why the wait ended, such as context.DeadlineExceeded.
	Err error
}

func (e *PendingError) Error() string {
	retry := fmt.Sprintf("send it again with request ID %s to learn the outcome", e.RequestID)
	if e.NoWorker {
		what := fmt.Sprintf("%s on session %s was sent and waits for a worker: no worker polls task queue %s", e.Request, e.SessionID, e.TaskQueue)
		if e.Request == engine.UpdateStartSession {
			what = fmt.Sprintf("%s of session %s was sent and waits for a worker: no worker polls task queue %s, so no worker runs its Flow type",
				e.Request, e.SessionID, e.TaskQueue)
		}
		return fmt.Sprintf("%s; it takes effect, or is refused, when a worker runs it; %s", what, retry)
	}
	return fmt.Sprintf("%s on session %s was sent, but the session did not answer in time (%v); workers poll task queue %s; %s",
		e.Request, e.SessionID, e.Err, e.TaskQueue, retry)
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

// describeTimeout bounds the look at the task queue after the caller's
// context ended.
const describeTimeout = 10 * time.Second

// failed turns an RPC's error into what the caller sees: a *PendingError
// when the caller's wait ended before the session answered, else the error
// named with the request.
func (s *Sessions) failed(ctx context.Context, name, sessionID, requestID string, err error) error {
	if !waitEnded(ctx, err) {
		return fmt.Errorf("%s on session %s: %w", name, sessionID, err)
	}
	pending := &PendingError{Request: name, SessionID: sessionID, RequestID: requestID, TaskQueue: s.taskQueue, Err: err}
	if ctxErr := ctx.Err(); ctxErr != nil {
		pending.Err = ctxErr
	}
	// The caller's context has ended; the look at the task queue gets its
	// own short one.
	describeCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), describeTimeout)
	defer cancel()
	polling, describeErr := s.workerPolls(describeCtx)
	if describeErr == nil {
		pending.NoWorker = !polling
	}
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

// workerPolls reports whether a worker polled the session's task queue for
// workflow tasks recently.
func (s *Sessions) workerPolls(ctx context.Context) (bool, error) {
	resp, err := s.c.DescribeTaskQueue(ctx, s.taskQueue, enumspb.TASK_QUEUE_TYPE_WORKFLOW)
	if err != nil {
		return false, err
	}
	for _, p := range resp.GetPollers() {
		if time.Since(p.GetLastAccessTime().AsTime()) < recentPoll {
			return true, nil
		}
	}
	return false, nil
}
