package session

import "slices"

// MaxAcceptedRequests is how many accepted requests a session remembers: a
// client that sends a request again, because it could not learn the
// outcome, does so within far fewer requests than this.
const MaxAcceptedRequests = 128

// Accepted reports whether the session already accepted the request with
// this ID; the request is then answered true again and changes nothing.
func (s *State) Accepted(requestID string) bool {
	return requestID != "" && slices.Contains(s.AcceptedRequests, requestID)
}

// RecordAccepted remembers an accepted request, forgetting the oldest
// beyond MaxAcceptedRequests.
func (s *State) RecordAccepted(requestID string) {
	if requestID == "" || s.Accepted(requestID) {
		return
	}
	s.AcceptedRequests = append(s.AcceptedRequests, requestID)
	if over := len(s.AcceptedRequests) - MaxAcceptedRequests; over > 0 {
		s.AcceptedRequests = slices.Delete(s.AcceptedRequests, 0, over)
	}
}
