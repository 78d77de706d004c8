package session

import (
	"fmt"
	"time"

	"github.com/stepwise-run/stepwise/internal/contract"
	"github.com/stepwise-run/stepwise/pkg/agent"
)

// TaskAbandonedText is the error of a call whose task cancel_turn abandoned.
const TaskAbandonedText = "the turn was cancelled while the tool's task ran; the task may still run"

// recordTaskStarted is a tool Step whose tool started a task: the call
// waits for it in PollToolTask.
func (s *State) recordTaskStarted(r *ToolCallRecord, out ToolOutcome) []Event {
	r.Status, r.TaskID = ToolCallWaitingForTask, out.TaskID
	r.TaskPollInterval = contract.TaskPollInterval(out.PollInterval)
	// A task started in a turn cancelled meanwhile is abandoned at once.
	r.TaskAbandoned = s.Turn.Control.Cancelled
	return []Event{NewEvent(EventToolTaskStarted, s.Turn.ID, map[string]any{
		"tool_call_id": r.ID, "tool_name": r.Name, "task_id": r.TaskID,
	})}
}

// recordTaskPending is a poll of a task that still runs: the next interval,
// and the continuation the next poll reads. An answer handed to this poll
// has been delivered.
func recordTaskPending(r *ToolCallRecord, out ToolOutcome) {
	r.TaskPollInterval = contract.TaskPollInterval(out.PollInterval)
	r.InputContinuation = out.InputContinuation
	r.TaskAnswer = nil
}

// TaskPollDue reports how long a task call waits before its next poll: at
// once when a question's answer waits to be handed over.
func TaskPollDue(r ToolCallRecord) time.Duration {
	if r.TaskAnswer != nil {
		return 0
	}
	return r.TaskPollInterval
}

// abandonTasks is cancel_turn's part for started tasks: a steer waits for
// them, a cancel abandons them. A task's question ends now; the engine
// binding cancels the poll, asks the tool to cancel the task, and records
// the call with RecordTaskAbandoned.
func (s *State) abandonTasks() []Event {
	var events []Event
	for _, r := range s.Turn.ToolCalls {
		if r.TaskID == "" || r.Status.Final() || r.TaskAbandoned {
			continue
		}
		if in, ok := s.InterruptOf(r.ID); ok {
			s.removeInterrupt(in.ID)
			events = append(events, resolvedEvent(in, false, false, "", CancelledByUser))
		}
		r.TaskAbandoned = true
		r.Status, r.Question = ToolCallWaitingForTask, nil
	}
	return events
}

// RecordTaskAbandoned is CancelToolTask's commit: the call's task may still
// run, so its outcome is unknown.
func (s *State) RecordTaskAbandoned(id string) []Event {
	r := s.activeRecord(id)
	if r == nil || r.Status.Final() {
		return nil
	}
	r.CancellationReason = CancelledByUser
	return s.finish(r, ToolCallOutcomeUnknown, "", TaskAbandonedText)
}

// MaxTaskIDBytes bounds the ID a tool gives the task it started. The ID is
// kept in the session's state, its history and every poll; a tool or a
// hostile server that names a task with megabytes would fill them.
const MaxTaskIDBytes = 256

// CheckedTaskStarted passes a started task's outcome whose ID the session
// can keep. An ID that is empty or over MaxTaskIDBytes cannot be followed:
// the task may run, so a write's outcome is unknown and a read failed.
func CheckedTaskStarted(r ToolCallRecord, out ToolOutcome) ToolOutcome {
	if out.Kind != ToolResultTaskStarted {
		return out
	}
	var problem string
	switch {
	case out.TaskID == "":
		problem = "an empty task_id"
	case len(out.TaskID) > MaxTaskIDBytes:
		problem = fmt.Sprintf("a task_id of %d bytes, over the %d allowed", len(out.TaskID), MaxTaskIDBytes)
	default:
		return out
	}
	kind := ToolResultOutcomeUnknown
	if r.Effect == agent.EffectRead {
		kind = ToolResultFailed
	}
	return ToolOutcome{Kind: kind, Error: fmt.Sprintf("tool %s started a task with %s, which the session cannot follow; the task may run", r.Name, problem)}
}

// MissingPollerOutcome is the outcome of a call whose tool started a task
// that no poller can follow: a read failed, and a write's outcome is
// unknown because the task runs on.
func MissingPollerOutcome(r ToolCallRecord) ToolOutcome {
	kind := ToolResultOutcomeUnknown
	if r.Effect == agent.EffectRead {
		kind = ToolResultFailed
	}
	return ToolOutcome{Kind: kind, Error: contract.MissingTaskPollerText(r.Name)}
}
