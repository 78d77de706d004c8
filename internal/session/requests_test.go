package session

import (
	"fmt"
	"testing"
)

func TestAcceptedRequestsAreRememberedUpToTheLimit(t *testing.T) {
	s := NewState("s1")
	if s.Accepted("send_user_message/r1") {
		t.Fatal("a new session has accepted a request")
	}
	s.RecordAccepted("send_user_message/r1")
	s.RecordAccepted("send_user_message/r1")
	if !s.Accepted("send_user_message/r1") || len(s.AcceptedRequests) != 1 {
		t.Fatalf("accepted = %q", s.AcceptedRequests)
	}
	if s.Accepted("resolve_interrupt/r1") {
		t.Error("one request ID on another kind of request counts as the same request")
	}
	s.RecordAccepted("")
	if s.Accepted("") || len(s.AcceptedRequests) != 1 {
		t.Errorf("a request without an ID was remembered: %q", s.AcceptedRequests)
	}
	for i := range MaxAcceptedRequests {
		s.RecordAccepted(fmt.Sprintf("send_user_message/n%d", i))
	}
	if len(s.AcceptedRequests) != MaxAcceptedRequests || s.Accepted("send_user_message/r1") || !s.Accepted("send_user_message/n0") {
		t.Errorf("after %d more requests: %d remembered, first %q", MaxAcceptedRequests, len(s.AcceptedRequests), s.AcceptedRequests[0])
	}
}
