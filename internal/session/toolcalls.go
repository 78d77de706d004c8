package session

import (
	"fmt"
	"strings"
	"time"

	"github.com/stepwise-run/stepwise/pkg/agent"
)

// deferToolCall records one requested call and decides its first Step.
// repeatedTodos is true when the response called write_todos more than once;
// lastWrite is the response's ordered write before this call, if any.
func (s *State) deferToolCall(call DeferredToolCall, repeatedTodos bool, lastWrite string, now time.Time) (*ToolCallRecord, []Event) {
	turn := s.Turn
	r := &ToolCallRecord{
		ID: call.ID, Name: call.Name, Arguments: call.Arguments, Order: len(turn.ToolCalls),
		Effect: call.Policy.Effect, RequiresApproval: call.Policy.ApprovalRequired(),
		SourceReference: call.SourceReference, StepLimit: call.StepLimit, TraceContext: s.TraceContext,
	}
	if call.Ordered {
		r.Ordered, r.AfterWrite = true, lastWrite
	}
	turn.ToolCalls = append(turn.ToolCalls, r)
	builtIn := agent.BuiltInTool(call.Name)
	if turn.Mode == ModePlanning && builtIn != agent.BuiltInWriteTodos {
		// Recorded final in this commit: the call never runs.
		r.Effect, r.RequiresApproval = agent.EffectRead, false
		return r, append([]Event{s.deferredEvent(r)}, s.finish(r, ToolCallRejected, PlanningOnlyText, "")...)
	}
	if builtIn == agent.BuiltInAskUser || builtIn == agent.BuiltInDurableWait || builtIn == agent.BuiltInWriteTodos {
		if turn.Options.Enabled(builtIn) {
			return r, s.deferBuiltIn(r, builtIn, repeatedTodos, now)
		}
	}
	events := []Event{s.deferredEvent(r)}
	if r.AfterWrite != "" {
		r.Status = ToolCallWriteQueued
		return r, events
	}
	return r, append(events, s.admit(r, now)...)
}

// admit asks a call's approval, or approves it when it needs none.
func (s *State) admit(r *ToolCallRecord, now time.Time) []Event {
	if r.RequiresApproval {
		r.Status = ToolCallAwaitingApproval
		return []Event{s.raise(Interrupt{ID: r.ID, Kind: InterruptApproval, Arguments: r.Arguments}, r, now)}
	}
	r.Status = ToolCallApproved
	return nil
}

// SkippedAfterWriteDetail follows ToolCallNotRunPrefix in the error of an
// ordered write skipped because an earlier one did not succeed.
const SkippedAfterWriteDetail = "an earlier write of the same model response did not succeed"

// WriteReleasable reports whether a queued write's earlier write is final,
// so the write may be admitted or skipped.
func (s *State) WriteReleasable(id string) bool {
	r := s.activeRecord(id)
	if r == nil || r.Status != ToolCallWriteQueued {
		return true
	}
	before := s.Turn.ToolCall(r.AfterWrite)
	return before == nil || before.Status.Final()
}

// ReleaseWrite admits a queued write once the write before it succeeded,
// and skips it, as not run, when that write did not.
func (s *State) ReleaseWrite(id string, now time.Time) []Event {
	r := s.activeRecord(id)
	if r == nil || r.Status != ToolCallWriteQueued || !s.WriteReleasable(id) {
		return nil
	}
	if before := s.Turn.ToolCall(r.AfterWrite); before != nil && before.Status != ToolCallSucceeded {
		return s.finish(r, ToolCallFailed, "", ToolCallNotRunPrefix+": "+SkippedAfterWriteDetail)
	}
	return s.admit(r, now)
}

func (s *State) deferredEvent(r *ToolCallRecord) Event {
	return NewEvent(EventToolCallDeferred, s.Turn.ID, map[string]any{
		"tool_call_id": r.ID, "tool_name": r.Name, "effect": r.Effect, "requires_approval": r.RequiresApproval,
	})
}

// deferBuiltIn routes a built-in call: no approval, the read effect, and a
// call with invalid arguments fails at once.
func (s *State) deferBuiltIn(r *ToolCallRecord, b agent.BuiltInTool, repeatedTodos bool, now time.Time) []Event {
	r.BuiltIn, r.Effect, r.RequiresApproval = b, agent.EffectRead, false
	events := []Event{s.deferredEvent(r)}
	switch b {
	case agent.BuiltInAskUser:
		args, err := ParseAskUser(r.Arguments)
		if err != nil {
			return append(events, s.finish(r, ToolCallFailed, "", err.Error())...)
		}
		q := &Question{Text: args.Question, Choices: args.Choices, AllowsFreeText: args.AllowsFreeText}
		r.Status, r.Question = ToolCallAwaitingAnswer, q
		return append(events, s.raise(Interrupt{ID: r.ID, Kind: InterruptQuestion, Question: q}, r, now))
	case agent.BuiltInDurableWait:
		args, err := ParseDurableWait(r.Arguments, s.Turn.Options.MaxDurableWait)
		if err != nil {
			return append(events, s.finish(r, ToolCallFailed, "", err.Error())...)
		}
		until := now.Add(args.Duration)
		r.Status, r.WaitUntil, r.WaitReason = ToolCallWaitingForTimer, &until, args.Reason
		return append(events, NewEvent(EventTimerStarted, s.Turn.ID, map[string]any{
			"tool_call_id": r.ID, "wait_until": until, "reason": args.Reason,
		}))
	default:
		return append(events, s.writeTodos(r, repeatedTodos)...)
	}
}

// finish makes a record final and writes tool_call_finished.
func (s *State) finish(r *ToolCallRecord, status ToolCallStatus, output, errText string) []Event {
	r.Status, r.Output, r.Error = status, output, errText
	return []Event{NewEvent(EventToolCallFinished, s.Turn.ID, map[string]any{
		"tool_call_id": r.ID, "tool_name": r.Name, "status": status, "effect": r.Effect,
	})}
}

// CompleteTimer is a durable wait's Timer firing.
func (s *State) CompleteTimer(id string) []Event {
	r := s.activeRecord(id)
	if r == nil || r.Status != ToolCallWaitingForTimer {
		return nil
	}
	var waited int64
	if r.WaitUntil != nil {
		args, err := ParseDurableWait(r.Arguments, s.Turn.Options.MaxDurableWait)
		if err == nil {
			waited = int64(args.Duration / time.Second)
		}
	}
	output := jsonText(struct {
		Status        string `json:"status"`
		WaitedSeconds int64  `json:"waited_seconds"`
		Reason        string `json:"reason"`
	}{"completed", waited, r.WaitReason})
	return s.finish(r, ToolCallSucceeded, output, "")
}

func (s *State) activeRecord(id string) *ToolCallRecord {
	if s.Turn == nil {
		return nil
	}
	return s.Turn.ToolCall(id)
}

// RecordToolOutcome is a tool Step's commit. A record that is already final
// keeps its outcome.
func (s *State) RecordToolOutcome(id string, out ToolOutcome) []Event {
	r := s.activeRecord(id)
	if r == nil || r.Status.Final() {
		return nil
	}
	switch out.Kind {
	case ToolResultSucceeded:
		r.Images = out.Images
		return s.finish(r, ToolCallSucceeded, out.Output, "")
	case ToolResultFailed:
		return s.finish(r, ToolCallFailed, "", out.Error)
	case ToolResultTaskStarted:
		return s.recordTaskStarted(r, out)
	case ToolResultTaskPending:
		recordTaskPending(r, out)
		return nil
	default:
		return s.finish(r, ToolCallOutcomeUnknown, "", out.Error)
	}
}

// RequestToolInput is a tool Step whose tool asked a question before it took
// any effect: the call waits in AwaitQuestionAnswer under the interrupt ID
// "<toolCallID>-input-<n>". When another call of the turn already uses that
// ID, the asking call fails instead.
func (s *State) RequestToolInput(id string, q Question, continuation string, now time.Time) []Event {
	r := s.activeRecord(id)
	if r == nil || r.Status.Final() {
		return nil
	}
	if strings.TrimSpace(q.Text) == "" || (len(q.Choices) == 0 && !q.AllowsFreeText) {
		return s.finish(r, ToolCallFailed, "", "the tool asked a question that cannot be answered: it is blank, or has no choices and allows no free text")
	}
	r.InputQuestions++
	questionID := fmt.Sprintf("%s-input-%d", r.ID, r.InputQuestions)
	if _, taken := s.Interrupt(questionID); taken || s.Turn.ToolCall(questionID) != nil {
		return s.finish(r, ToolCallFailed, "", fmt.Sprintf("the tool's question ID %s is already used by another call of this turn", questionID))
	}
	r.Status, r.Question, r.InputContinuation = ToolCallAwaitingAnswer, &q, continuation
	return []Event{s.raise(Interrupt{ID: questionID, Kind: InterruptQuestion, Question: &q}, r, now)}
}

// RecordToolStepExhausted is the failure route of a tool Step whose attempts
// ran out (RecordToolFailure for reads and idempotent writes,
// RecordToolOutcomeUnknown otherwise). A call whose Step never reached a
// worker did not run, whatever its effect; otherwise a read failed and a
// write may have taken effect.
func (s *State) RecordToolStepExhausted(id string, started bool, detail string) []Event {
	r := s.activeRecord(id)
	if r == nil || r.Status.Final() {
		return nil
	}
	switch {
	case !started && r.InputQuestions == 0:
		// A call whose tool asked a question ran before, so only a call
		// that never reached a worker at all is safe to call again.
		return s.finish(r, ToolCallFailed, "", ToolCallNotRunPrefix+": "+detail)
	case r.Effect == agent.EffectRead:
		return s.finish(r, ToolCallFailed, "", detail)
	default:
		return s.finish(r, ToolCallOutcomeUnknown, "", detail)
	}
}

// FailureRoute names the Step that records a tool call whose attempts ran
// out.
func FailureRoute(effect agent.Effect) StepName {
	if effect.Retried() {
		return StepRecordToolFailure
	}
	return StepRecordToolOutcomeUnknown
}

// ToolStep names the Step that runs an approved call.
func ToolStep(effect agent.Effect) StepName {
	if effect.Retried() {
		return StepCallTool
	}
	return StepCallSingleAttemptTool
}

// WaitStep names the Step a record waits in, or "" when it does not wait
// for a person or timer.
func WaitStep(r ToolCallRecord) StepName {
	switch r.Status {
	case ToolCallAwaitingApproval:
		return StepAwaitToolApproval
	case ToolCallAwaitingAnswer:
		return StepAwaitQuestionAnswer
	case ToolCallWaitingForTimer:
		return StepAwaitTimer
	case ToolCallWaitingForTask:
		return StepPollToolTask
	}
	return ""
}
