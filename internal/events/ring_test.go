package events

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/stepwise-run/stepwise/internal/session"
)

func event(text string) session.Event {
	payload, _ := json.Marshal(map[string]string{"text": text})
	return session.Event{Type: session.EventTextDelta, TurnID: "turn-1", Payload: payload}
}

func TestRingKeepsSessionsApartAndResumesAfterASequence(t *testing.T) {
	r := NewRing(1 << 20)
	r.Write("a", event("one"))
	r.Write("b", event("two"))
	r.Write("a", event("three"))
	got := r.Since("a", 0)
	if len(got) != 2 || got[0].Seq != 1 || got[1].Seq != 3 || got[1].SessionID != "a" {
		t.Fatalf("Since(a, 0) = %+v", got)
	}
	if got := r.Since("a", 1); len(got) != 1 || got[0].Seq != 3 {
		t.Errorf("Since(a, 1) = %+v, want only the event after 1", got)
	}
	if got := r.Since("", 0); len(got) != 0 {
		t.Errorf("Since without a session = %+v, want none: no ID lists every session's events", got)
	}
	if got := r.Since("c", 0); len(got) != 0 {
		t.Errorf("Since of an unknown session = %+v", got)
	}
}

func TestRingDropsTheOldestEventsPastItsCapacity(t *testing.T) {
	size := recordSize(Record{SessionID: "a", Event: event(strings.Repeat("x", 100))})
	r := NewRing(size * 10)
	for range 25 {
		r.Write("a", event(strings.Repeat("x", 100)))
	}
	got := r.Since("a", 0)
	if len(got) == 0 || len(got) > 10 {
		t.Fatalf("the ring holds %d events, want at most its capacity of 10", len(got))
	}
	if last := got[len(got)-1].Seq; last != 25 {
		t.Errorf("newest kept = %d, want 25", last)
	}
	for i := 1; i < len(got); i++ {
		if got[i].Seq != got[i-1].Seq+1 {
			t.Fatalf("kept events are not the newest in a row: %d then %d", got[i-1].Seq, got[i].Seq)
		}
	}
	huge := NewRing(10)
	huge.Write("a", event(strings.Repeat("y", 1000)))
	if len(huge.Since("a", 0)) != 1 {
		t.Error("an event larger than the capacity is dropped at once; the newest is always kept")
	}
}
