package client

import "time"

// SetRecentPoll shortens how recently a worker must have polled to count,
// for tests that stop one and cannot wait a minute and a half.
func SetRecentPoll(s *Sessions, d time.Duration) { s.recentPoll = d }

// SendUntilTaken exposes the resend rule to its table test.
var SendUntilTaken = sendUntilTaken

// WorkflowIDOf is the engine's ID of one of the Agent's sessions under its
// own names.
func (s *Sessions) WorkflowIDOf(sessionID string) string { return s.own().WorkflowID(sessionID) }
