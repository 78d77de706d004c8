package session

// Activations and their trace context. An activation is a burst of Steps
// between durable waits, started by a Step that consumed an input from
// outside the session: a user message, a plan approval, or an interrupt's
// answer or deadline. Each is one trace, whose root's W3C traceparent the
// session stores with the Step that started it, so the activation's later
// Steps, on any worker, parent their spans from it.

// TraceActivation stores the traceparent of the newest activation's root,
// empty when the worker traced nothing, and returns the previous root's for
// the new root's link. toolCallID, when set, names the call whose interrupt
// the activation resolved: its record then runs in the new trace, so
// overlapping approvals never swap tool spans between traces.
func (s *State) TraceActivation(traceparent, toolCallID string) (previous string) {
	previous, s.TraceContext = s.TraceContext, traceparent
	if toolCallID == "" || s.Turn == nil {
		return previous
	}
	if r := s.Turn.ToolCall(toolCallID); r != nil {
		r.TraceContext = traceparent
	}
	return previous
}

// TurnInput is the first message of the active turn: the user message, or
// an approved plan's note, that started it.
func (s *State) TurnInput() (sequence int64, text string) {
	if s.Turn == nil {
		return 0, ""
	}
	for _, m := range s.Window {
		if m.Sequence == s.Turn.FirstSequence {
			return m.Sequence, m.Text
		}
	}
	return s.Turn.FirstSequence, ""
}
