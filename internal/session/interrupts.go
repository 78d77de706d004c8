package session

import (
	"slices"
	"time"

	"github.com/stepwise-run/stepwise/pkg/agent"
)

// raise adds an interrupt for a record, with the turn's deadline.
func (s *State) raise(in Interrupt, r *ToolCallRecord, now time.Time) Event {
	in.TurnID, in.ToolCallID, in.ToolName = s.Turn.ID, r.ID, r.Name
	if d := s.Turn.Options.InterruptDeadline; d > 0 {
		deadline := now.Add(d)
		in.Deadline = &deadline
	}
	s.Interrupts = append(s.Interrupts, in)
	payload := map[string]any{
		"interrupt_id": in.ID, "tool_call_id": in.ToolCallID, "tool_name": in.ToolName,
		"deadline": in.Deadline, "kind": in.Kind, "question": nil, "choices": nil, "allows_free_text": nil,
	}
	if in.Question != nil {
		payload["question"], payload["choices"], payload["allows_free_text"] = in.Question.Text, in.Question.Choices, in.Question.AllowsFreeText
	}
	return NewEvent(EventInterruptRaised, s.Turn.ID, payload)
}

// Interrupt returns a pending interrupt.
func (s *State) Interrupt(id string) (Interrupt, bool) {
	for _, in := range s.Interrupts {
		if in.ID == id {
			return in, true
		}
	}
	return Interrupt{}, false
}

// InterruptOf returns the pending interrupt of a tool call.
func (s *State) InterruptOf(toolCallID string) (Interrupt, bool) {
	for _, in := range s.Interrupts {
		if in.ToolCallID == toolCallID {
			return in, true
		}
	}
	return Interrupt{}, false
}

func (s *State) removeInterrupt(id string) {
	s.Interrupts = slices.DeleteFunc(s.Interrupts, func(in Interrupt) bool { return in.ID == id })
}

// ResolveRequest is resolve_interrupt's input.
type ResolveRequest struct {
	InterruptID      string `json:"interruptId"`
	Approved         bool   `json:"approved"`
	RejectionMessage string `json:"rejectionMessage,omitempty"`
}

// pendingInterrupt finds an interrupt that still waits at now.
func (s *State) pendingInterrupt(id string, now time.Time) (Interrupt, *ToolCallRecord, error) {
	in, ok := s.Interrupt(id)
	if !ok || s.Turn == nil || s.Turn.ID != in.TurnID {
		return Interrupt{}, nil, reject("interrupt %q is not pending", id)
	}
	if in.Deadline != nil && !now.Before(*in.Deadline) {
		return Interrupt{}, nil, reject("interrupt %q is past its deadline", id)
	}
	r := s.Turn.ToolCall(in.ToolCallID)
	if r == nil || r.Status.Final() {
		return Interrupt{}, nil, reject("interrupt %q is not pending", id)
	}
	return in, r, nil
}

// CheckResolve is resolve_interrupt's validator.
func (s *State) CheckResolve(req ResolveRequest, now time.Time) error {
	in, _, err := s.pendingInterrupt(req.InterruptID, now)
	if err != nil {
		return err
	}
	if in.Kind == InterruptQuestion && req.Approved {
		return reject("interrupt %q is a question: answer it with answer_question, or decline it", req.InterruptID)
	}
	return nil
}

// Resolve is resolve_interrupt: approve or reject a tool call, or decline a
// question. It removes the interrupt and applies the answer in one commit.
func (s *State) Resolve(req ResolveRequest, now time.Time) ([]Event, error) {
	if err := s.CheckResolve(req, now); err != nil {
		return nil, err
	}
	in, r, _ := s.pendingInterrupt(req.InterruptID, now)
	s.removeInterrupt(in.ID)
	rejection := ""
	var events []Event
	switch {
	case in.Kind == InterruptQuestion && r.BuiltIn == "":
		returnToTool(r, in, agent.QuestionDeclined, "")
	case in.Kind == InterruptQuestion:
		events = s.finish(r, ToolCallRejected, DeclinedAnswerText, "")
	case req.Approved:
		r.Status = ToolCallApproved
	default:
		r.RejectionMessage = req.RejectionMessage
		rejection = req.RejectionMessage
		events = s.finish(r, ToolCallRejected, "", "")
	}
	return append([]Event{resolvedEvent(in, req.Approved, false, rejection, "")}, events...), nil
}

// resolvedEvent is interrupt_resolved with every field of the event table;
// cancellation_reason is set only when steering or cancellation removed the
// interrupt.
func resolvedEvent(in Interrupt, approved, answered bool, rejection, cancellationReason string) Event {
	orNull := func(s string) any {
		if s == "" {
			return nil
		}
		return s
	}
	return NewEvent(EventInterruptResolved, in.TurnID, map[string]any{
		"interrupt_id": in.ID, "approved": approved, "kind": in.Kind, "answered": answered,
		"rejection_message": orNull(rejection), "cancellation_reason": orNull(cancellationReason),
	})
}

// AnswerRequest is answer_question's input.
type AnswerRequest struct {
	InterruptID string `json:"interruptId"`
	Answer      string `json:"answer"`
}

// CheckAnswer is answer_question's validator.
func (s *State) CheckAnswer(req AnswerRequest, now time.Time) error {
	in, _, err := s.pendingInterrupt(req.InterruptID, now)
	if err != nil {
		return err
	}
	if in.Kind != InterruptQuestion {
		return reject("interrupt %q is not a question", req.InterruptID)
	}
	if err := in.Question.CheckAnswer(req.Answer); err != nil {
		return reject("%v", err)
	}
	return nil
}

// Answer is answer_question: the answer becomes the ask_user call's result.
func (s *State) Answer(req AnswerRequest, now time.Time) ([]Event, error) {
	if err := s.CheckAnswer(req, now); err != nil {
		return nil, err
	}
	in, r, _ := s.pendingInterrupt(req.InterruptID, now)
	s.removeInterrupt(in.ID)
	events := []Event{resolvedEvent(in, true, true, "", "")}
	if r.BuiltIn == "" {
		returnToTool(r, in, agent.QuestionAnswered, req.Answer)
		return events, nil
	}
	output := jsonText(struct {
		Status string `json:"status"`
		Answer string `json:"answer"`
	}{"answered", req.Answer})
	return append(events, s.finish(r, ToolCallSucceeded, output, "")...), nil
}

// ExpireInterrupt is the deadline Timer of an approval or question firing:
// a call still waiting is rejected. A Timer that fires before the deadline,
// or after the answer, changes nothing.
func (s *State) ExpireInterrupt(id string, now time.Time) []Event {
	in, ok := s.Interrupt(id)
	if !ok || in.Deadline == nil || now.Before(*in.Deadline) || s.Turn == nil {
		return nil
	}
	r := s.Turn.ToolCall(in.ToolCallID)
	if r == nil || r.Status.Final() {
		return nil
	}
	s.removeInterrupt(id)
	rejection := ""
	if in.Kind == InterruptApproval {
		rejection = ApprovalDeadlineText
	}
	events := []Event{resolvedEvent(in, false, false, rejection, "")}
	if in.Kind == InterruptQuestion && r.BuiltIn == "" {
		returnToTool(r, in, agent.QuestionDeadlinePassed, "")
		return events
	}
	if in.Kind == InterruptQuestion {
		return append(events, s.finish(r, ToolCallRejected, QuestionDeadlineText, "")...)
	}
	r.RejectionMessage = ApprovalDeadlineText
	return append(events, s.finish(r, ToolCallRejected, "", "")...)
}

// returnToTool hands a tool's question back to its tool Step with how it
// was resolved; the tool decides what a decline means.
func returnToTool(r *ToolCallRecord, in Interrupt, resolution agent.QuestionResolution, answer string) {
	text := ""
	if in.Question != nil {
		text = in.Question.Text
	}
	qa := agent.QuestionAnswer{QuestionID: in.ID, Question: text, Resolution: resolution, Answer: answer}
	if r.TaskID != "" {
		// A task's question goes back to the task, on the next poll.
		r.TaskAnswer = &qa
		r.Status, r.Question = ToolCallWaitingForTask, nil
		return
	}
	r.InputAnswers = append(r.InputAnswers, qa)
	r.Status, r.Question = ToolCallApproved, nil
}
