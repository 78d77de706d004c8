package session

import (
	"slices"
	"strings"
	"testing"
)

func userTexts(s *State, turnID string) []string {
	var out []string
	for _, m := range s.Messages() {
		if m.TurnID == turnID && m.Role == RoleUser {
			out = append(out, m.Text)
		}
	}
	return out
}

func TestSteerAndDeleteRefusals(t *testing.T) {
	cases := []struct {
		name    string
		started bool
		req     SteerRequest
		wantErr string
	}{
		{"before the session starts", false, SteerRequest{Text: "x"}, "the session has not started"},
		{"both an ID and text", true, SteerRequest{MessageID: "msg-1", Text: "x"}, "not both"},
		{"neither", true, SteerRequest{}, "with a queued message's ID or with text"},
		{"blank text", true, SteerRequest{Text: " \n"}, "the message text is blank"},
		{"a message no longer queued", true, SteerRequest{MessageID: "msg-9"}, `message "msg-9" is not queued`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s := NewState("s1")
			if c.started {
				s = inTurn(t, "first")
			}
			_, err := s.Steer(c.req, testNow)
			if !isRejection(err) || !strings.Contains(err.Error(), c.wantErr) {
				t.Errorf("Steer = %v, want a rejection containing %q", err, c.wantErr)
			}
			if len(s.Steered) != 0 || (s.Turn != nil && s.Turn.Control.Requested()) {
				t.Errorf("a refused steer changed the session: steered %v, control %+v", s.Steered, s.Turn.Control)
			}
		})
	}
	s := inTurn(t, "first")
	if err := s.DeleteQueued(DeleteRequest{MessageID: "msg-1"}); !isRejection(err) {
		t.Errorf("deleting a message that started a turn = %v, want a rejection", err)
	}
}

func TestSteerWithoutATurnQueuesText(t *testing.T) {
	s := startedState(t)
	events, err := s.Steer(SteerRequest{Text: "hello"}, testNow)
	if err != nil || events != nil {
		t.Fatalf("Steer = %v, %v", events, err)
	}
	if len(s.Queued) != 1 || s.Queued[0].Text != "hello" || len(s.Steered) != 0 {
		t.Errorf("queued %v, steered %v; want the text queued", s.Queued, s.Steered)
	}
	wantEvents(t, s.BeginTurn(), EventTurnStarted)
	if got := userTexts(s, "turn-1"); !slices.Equal(got, []string{"hello"}) {
		t.Errorf("turn-1 user messages = %v", got)
	}
}

func TestDeleteQueuedMessage(t *testing.T) {
	s := inTurn(t, "first")
	a, _ := s.QueueUserMessage("a")
	b, _ := s.QueueUserMessage("b")
	if err := s.DeleteQueued(DeleteRequest{MessageID: a.ID}); err != nil {
		t.Fatal(err)
	}
	if len(s.Queued) != 1 || s.Queued[0].ID != b.ID {
		t.Errorf("queued = %+v, want only %s", s.Queued, b.ID)
	}
	if err := s.DeleteQueued(DeleteRequest{MessageID: a.ID}); !isRejection(err) {
		t.Errorf("a second delete = %v, want a rejection", err)
	}
}

func TestSteerDuringToolCallsRejectsEveryWaitAndKeepsSettledResults(t *testing.T) {
	s := approvalsTurn(t)
	// The answer to q1 commits before the steer: it keeps its result.
	if _, err := s.Answer(AnswerRequest{InterruptID: "q1", Answer: "yes"}, testNow); err != nil {
		t.Fatal(err)
	}
	queued, _ := s.QueueUserMessage("queued one")
	events, err := s.Steer(SteerRequest{Text: "Use staging instead"}, testNow)
	if err != nil {
		t.Fatal(err)
	}
	// w1's approval, q2's question and t1's timer are settled; r1 was
	// approved and is the engine's to settle or run.
	wantEvents(t, events, EventInterruptResolved, EventToolCallFinished, EventInterruptResolved, EventToolCallFinished, EventToolCallFinished)
	if p := payloadOf(t, events[0]); p["cancellation_reason"] != CancelledBySteer || p["approved"] != false {
		t.Errorf("interrupt_resolved = %v", p)
	}
	status := map[string]ToolCallStatus{}
	for _, r := range s.Turn.ToolCalls {
		status[r.ID] = r.Status
		if r.Status == ToolCallRejected && (r.CancellationReason != CancelledBySteer || DescribeOutcome(*r) != SteeredResultText) {
			t.Errorf("%s: reason %q, model sees %q", r.ID, r.CancellationReason, DescribeOutcome(*r))
		}
	}
	want := map[string]ToolCallStatus{"w1": ToolCallRejected, "q1": ToolCallSucceeded, "q2": ToolCallRejected, "t1": ToolCallRejected, "r1": ToolCallApproved}
	for id, st := range want {
		if status[id] != st {
			t.Errorf("%s = %s, want %s", id, status[id], st)
		}
	}
	if len(s.Interrupts) != 0 {
		t.Errorf("interrupts left: %+v", s.Interrupts)
	}
	if got := s.ToolCallControl("turn-1", "r1"); got != CancelledBySteer {
		t.Errorf("ToolCallControl(r1) = %q, want steered", got)
	}
	wantEvents(t, s.SettleUnstarted("r1"), EventToolCallFinished)

	// A second steer by a queued message's ID joins the first.
	if _, err := s.Steer(SteerRequest{MessageID: queued.ID}, testNow); err != nil {
		t.Fatal(err)
	}
	if snap := s.Snapshot(); len(snap.SteeredMessages) != 2 || len(snap.QueuedMessages) != 0 {
		t.Errorf("snapshot steered %v queued %v", snap.SteeredMessages, snap.QueuedMessages)
	}
	if !s.ToolCallsFinal() {
		t.Fatal("records are not final after the steer")
	}
	events = s.ApplyTurnControl()
	wantEvents(t, events, EventTurnSteered, EventTurnStarted)
	if p := payloadOf(t, events[0]); p["steered_message_count"] != float64(2) {
		t.Errorf("turn_steered = %v", p)
	}
	var results []string
	for _, m := range s.Messages() {
		if m.TurnID == "turn-1" && m.Role == RoleTool {
			results = append(results, m.ToolCallID+"="+m.Text)
		}
	}
	wantResults := []string{"w1=" + SteeredResultText, `q1={"status":"answered","answer":"yes"}`, "q2=" + SteeredResultText, "t1=" + SteeredResultText, "r1=" + SteeredResultText}
	if !slices.Equal(results, wantResults) {
		t.Errorf("stored results = %v, want %v", results, wantResults)
	}
	if got := userTexts(s, "turn-2"); !slices.Equal(got, []string{"Use staging instead", "queued one"}) {
		t.Errorf("turn-2 starts with %v, want every steered message in order", got)
	}
	if len(s.Steered) != 0 || s.Turn.Control.Requested() {
		t.Errorf("after ApplyTurnControl: steered %v, control %+v", s.Steered, s.Turn.Control)
	}
}

func TestSteerDuringAModelCallSettlesItsCalls(t *testing.T) {
	s := inTurn(t, "x")
	if _, err := s.Steer(SteerRequest{Text: "stop that"}, testNow); err != nil {
		t.Fatal(err)
	}
	records, events := s.ApplyModelOutcome(requested(allBuiltIns,
		call("w1", "refund", `{}`, writePolicy),
		call("r1", "lookup", `{}`, readPolicy),
		call("bad", "durable_wait", `{"duration_seconds":-1}`, unknownPolicy),
	), testNow)
	if len(records) != 3 || !s.ToolCallsFinal() {
		t.Fatalf("records %d, final %v", len(records), s.ToolCallsFinal())
	}
	for _, r := range records {
		want := ToolCallRejected
		if r.ID == "bad" {
			// A built-in call with invalid arguments fails at once.
			want = ToolCallFailed
		}
		if r.Status != want {
			t.Errorf("%s = %s, want %s", r.ID, r.Status, want)
		}
	}
	if n := len(s.Interrupts); n != 0 {
		t.Errorf("%d interrupts left", n)
	}
	if !slices.Contains(eventTypes(events), EventInterruptResolved) {
		t.Errorf("events = %v, want the approval raised and resolved", eventTypes(events))
	}
}

func TestCancelTurn(t *testing.T) {
	s := approvalsTurn(t)
	for _, req := range []CancelRequest{{TurnID: "turn-9"}, {}} {
		if _, err := s.CancelTurn(req, testNow); !isRejection(err) {
			t.Errorf("CancelTurn(%+v) = %v, want a rejection", req, err)
		}
	}
	events, err := s.CancelTurn(CancelRequest{TurnID: "turn-1"}, testNow)
	if err != nil || len(events) == 0 {
		t.Fatalf("CancelTurn = %v, %v", events, err)
	}
	if !s.ModelCallCancelled() || s.ToolCallControl("turn-1", "r1") != CancelledByUser {
		t.Error("the cancel is not visible to the model call or the tool Steps")
	}
	again, err := s.CancelTurn(CancelRequest{TurnID: "turn-1"}, testNow)
	if err != nil || again != nil {
		t.Errorf("a second cancel = %v, %v; want true and no change", again, err)
	}
	for _, r := range s.Turn.ToolCalls {
		if r.Status == ToolCallRejected && DescribeOutcome(*r) != CancelledResultText {
			t.Errorf("%s: the model sees %q", r.ID, DescribeOutcome(*r))
		}
	}
	// r1 is running: the turn ends after it.
	s.RecordToolOutcome("r1", ToolOutcome{Kind: ToolResultSucceeded, Output: "found"})
	events = s.ApplyTurnControl()
	wantEvents(t, events, EventTurnCancelled)
	if s.Turn != nil || s.Status != StatusWaitingForUserMessage {
		t.Errorf("after a cancel: turn %+v, status %s", s.Turn, s.Status)
	}
	if last := s.Messages()[len(s.Messages())-1]; last.ToolCallID != "r1" || last.Text != "found" {
		t.Errorf("last message = %+v, want the running call's own result", last)
	}
	if _, err := s.CancelTurn(CancelRequest{TurnID: "turn-1"}, testNow); !isRejection(err) {
		t.Errorf("cancelling an ended turn = %v, want a rejection", err)
	}
	if got := s.ToolCallControl("turn-1", "r1"); got != CancelledByUser {
		t.Errorf("ToolCallControl of an ended turn = %q", got)
	}
}

func TestATimerThatFiresBeforeACancelKeepsItsResult(t *testing.T) {
	s := approvalsTurn(t)
	s.CompleteTimer("t1")
	if _, err := s.CancelTurn(CancelRequest{TurnID: "turn-1"}, testNow); err != nil {
		t.Fatal(err)
	}
	r := s.Turn.ToolCall("t1")
	if r.Status != ToolCallSucceeded || r.CancellationReason != "" {
		t.Errorf("t1 = %s (%s), want its own result", r.Status, r.CancellationReason)
	}
}

func TestSettleUnstartedWithoutControlLeavesTheCallSafeToRepeat(t *testing.T) {
	s := approvalsTurn(t)
	wantEvents(t, s.SettleUnstarted("r1"), EventToolCallFinished)
	if r := s.Turn.ToolCall("r1"); r.Status != ToolCallFailed || r.Error != ToolCallNotRunPrefix {
		t.Errorf("r1 = %s: %s", r.Status, r.Error)
	}
	if got := s.ToolCallControl("turn-1", "w1"); got != "" {
		t.Errorf("ToolCallControl without a steer = %q", got)
	}
}
