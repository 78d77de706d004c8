package session

import (
	"fmt"
	"testing"
)

// withMessages returns a started session holding n stored messages with
// sequences 1..n and no active turn.
func withMessages(t *testing.T, n int) *State {
	t.Helper()
	s := startedState(t)
	for i := 0; i < n; i++ {
		s.store(Message{Role: RoleUser, Text: fmt.Sprintf("m%d", i+1)})
	}
	return s
}

func sequences(messages []Message) []int64 {
	out := make([]int64, 0, len(messages))
	for _, m := range messages {
		out = append(out, m.Sequence)
	}
	return out
}

func seqRange(from, to int64) []int64 {
	var out []int64
	for i := from; i <= to; i++ {
		out = append(out, i)
	}
	return out
}

func equalSeqs(a, b []int64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func TestSnapshotBeforeStart(t *testing.T) {
	snap := NewState("s1").Snapshot()
	if snap.State != nil {
		t.Errorf("State = %+v, want nil before the session starts", snap.State)
	}
	if snap.Messages == nil || len(snap.Messages) != 0 || snap.ToolCalls == nil || snap.PendingInterrupts == nil || snap.QueuedMessages == nil {
		t.Errorf("snapshot lists must be empty, not nil: %+v", snap)
	}
	if snap.QueuedMessageCount != 0 || snap.Usage != (Usage{}) {
		t.Errorf("snapshot = %+v", snap)
	}
}

func TestSnapshotOfAnIdleSession(t *testing.T) {
	s := startedState(t)
	s.LastTurnError = "earlier failure"
	snap := s.Snapshot()
	want := StateView{Status: StatusWaitingForUserMessage, InteractionMode: ModeChat, LastTurnError: "earlier failure"}
	if snap.State == nil || *snap.State != want {
		t.Errorf("State = %+v, want %+v", snap.State, want)
	}
	if len(snap.ToolCalls) != 0 || len(snap.Messages) != 0 {
		t.Errorf("snapshot = %+v", snap)
	}
}

func TestSnapshotKeepsTheLast200Messages(t *testing.T) {
	cases := []struct {
		stored   int
		wantSeqs []int64
	}{
		{1, seqRange(1, 1)},
		{200, seqRange(1, 200)},
		{201, seqRange(2, 201)},
		{450, seqRange(251, 450)},
	}
	for _, c := range cases {
		t.Run(fmt.Sprint(c.stored), func(t *testing.T) {
			s := withMessages(t, c.stored)
			snap := s.Snapshot()
			if got := sequences(snap.Messages); !equalSeqs(got, c.wantSeqs) {
				t.Errorf("snapshot holds %d messages %d..%d, want %d..%d", len(got), got[0], got[len(got)-1], c.wantSeqs[0], c.wantSeqs[len(c.wantSeqs)-1])
			}
			snap.Messages[0].Text = "changed"
			if s.Messages()[len(s.Messages())-len(snap.Messages)].Text == "changed" {
				t.Error("the snapshot shares the session's messages")
			}
		})
	}
}

func TestSnapshotOfAnActiveTurn(t *testing.T) {
	s := approvalsTurn(t)
	for _, text := range []string{"queued one", "queued two"} {
		if _, err := s.QueueUserMessage(text); err != nil {
			t.Fatal(err)
		}
	}
	snap := s.Snapshot()
	want := StateView{Status: StatusRunningTools, InteractionMode: ModeChat, ActiveTurnID: "turn-1", TurnCount: 1}
	if snap.State == nil || *snap.State != want {
		t.Errorf("State = %+v, want %+v", snap.State, want)
	}
	var ids []string
	for _, r := range snap.ToolCalls {
		ids = append(ids, r.ID)
	}
	if fmt.Sprint(ids) != "[w1 q1 q2 t1 r1]" {
		t.Errorf("tool calls = %v, want the turn's records in model order", ids)
	}
	if len(snap.PendingInterrupts) != 3 || snap.PendingInterrupts[0].ID != "w1" {
		t.Errorf("pending interrupts = %+v", snap.PendingInterrupts)
	}
	if snap.QueuedMessageCount != 2 || len(snap.QueuedMessages) != 2 || snap.QueuedMessages[0].Text != "queued one" || snap.QueuedMessages[1].ID != "msg-3" {
		t.Errorf("queued = %d %+v", snap.QueuedMessageCount, snap.QueuedMessages)
	}
	if snap.Usage != s.Usage || snap.Usage.ModelCalls != 1 {
		t.Errorf("usage = %+v", snap.Usage)
	}

	snap.ToolCalls[0].Status = ToolCallSucceeded
	snap.PendingInterrupts[0].ID = "changed"
	snap.QueuedMessages[0].Text = "changed"
	if s.Turn.ToolCalls[0].Status != ToolCallAwaitingApproval || s.Interrupts[0].ID != "w1" || s.Queued[0].Text != "queued one" {
		t.Error("the snapshot shares the session's state")
	}
}

func TestClampLimit(t *testing.T) {
	cases := map[int]int{-5: 1, 0: 1, 1: 1, 50: 50, 200: 200, 201: 200, 500: 200}
	for in, want := range cases {
		if got := ClampLimit(in); got != want {
			t.Errorf("ClampLimit(%d) = %d, want %d", in, got, want)
		}
	}
}

func TestListMessages(t *testing.T) {
	s := withMessages(t, 450)
	cases := []struct {
		name     string
		req      ListMessagesRequest
		wantSeqs []int64
		wantNext int64
	}{
		{"zero limit is one", ListMessagesRequest{}, seqRange(450, 450), 450},
		{"limit over 200 is 200", ListMessagesRequest{Limit: 500}, seqRange(251, 450), 251},
		{"newest page", ListMessagesRequest{Limit: 10}, seqRange(441, 450), 441},
		{"older page", ListMessagesRequest{Limit: 10, BeforeSequence: 441}, seqRange(431, 440), 431},
		{"page reaching the first message", ListMessagesRequest{Limit: 10, BeforeSequence: 8}, seqRange(1, 7), 0},
		{"page ending exactly at the first message", ListMessagesRequest{Limit: 7, BeforeSequence: 8}, seqRange(1, 7), 0},
		{"before the first message", ListMessagesRequest{Limit: 10, BeforeSequence: 1}, nil, 0},
		{"before a sequence past the end", ListMessagesRequest{Limit: 3, BeforeSequence: 1000}, seqRange(448, 450), 448},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			page := s.ListMessages(c.req)
			if got := sequences(page.Messages); !equalSeqs(got, c.wantSeqs) {
				t.Errorf("sequences = %v, want %v", got, c.wantSeqs)
			}
			if page.NextBeforeSequence != c.wantNext {
				t.Errorf("NextBeforeSequence = %d, want %d", page.NextBeforeSequence, c.wantNext)
			}
			if page.FirstSequence != 1 {
				t.Errorf("FirstSequence = %d, want 1", page.FirstSequence)
			}
			if page.Messages == nil {
				t.Error("Messages is nil")
			}
		})
	}
}

func TestListMessagesPagesThroughEverything(t *testing.T) {
	s := withMessages(t, 450)
	var collected []int64
	req := ListMessagesRequest{Limit: 200}
	pages := 0
	for {
		page := s.ListMessages(req)
		pages++
		collected = append(sequences(page.Messages), collected...)
		if page.NextBeforeSequence == 0 {
			if len(page.Messages) == 0 || page.Messages[0].Sequence != page.FirstSequence {
				t.Errorf("the last page does not start at FirstSequence %d", page.FirstSequence)
			}
			break
		}
		req.BeforeSequence = page.NextBeforeSequence
		if pages > 10 {
			t.Fatal("paging does not end")
		}
	}
	if pages != 3 || !equalSeqs(collected, seqRange(1, 450)) {
		t.Errorf("%d pages collected %d messages", pages, len(collected))
	}
}

func TestListMessagesOfAnEmptySession(t *testing.T) {
	page := startedState(t).ListMessages(ListMessagesRequest{Limit: 10})
	if page.Messages == nil || len(page.Messages) != 0 || page.FirstSequence != 0 || page.NextBeforeSequence != 0 {
		t.Errorf("page = %+v", page)
	}
}
