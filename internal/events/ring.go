// Package events keeps session events outside workflow history: a bounded
// buffer per worker that the event hub and the tests read.
package events

import (
	"sync"
	"time"

	"github.com/stepwise-run/stepwise/internal/session"
)

// Record is one event with the session it belongs to.
type Record struct {
	// Seq numbers the records of one buffer from 1.
	Seq       int64         `json:"seq"`
	SessionID string        `json:"sessionId"`
	Time      time.Time     `json:"time"`
	Event     session.Event `json:"event"`
}

// Ring keeps the newest events up to a byte capacity, dropping the oldest:
// streams are best effort, and a UI rebuilds from the session snapshot.
type Ring struct {
	capacity int64
	now      func() time.Time

	mu      sync.Mutex
	records []Record
	size    int64
	seq     int64
}

// NewRing returns a ring that holds about capacity bytes of payload.
func NewRing(capacity int64) *Ring {
	return &Ring{capacity: capacity, now: time.Now}
}

func recordSize(r Record) int64 {
	return int64(len(r.SessionID) + len(r.Event.Type) + len(r.Event.TurnID) + len(r.Event.StepExecutionID) + len(r.Event.Payload) + 64)
}

// Write adds an event.
func (r *Ring) Write(sessionID string, e session.Event) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.seq++
	rec := Record{Seq: r.seq, SessionID: sessionID, Time: r.now(), Event: e}
	r.records = append(r.records, rec)
	r.size += recordSize(rec)
	if r.size <= r.capacity {
		return
	}
	// Drop down to nine tenths of the capacity at once, so a full ring
	// copies its records once per many writes rather than on every write.
	drop := 0
	for r.size > r.capacity-r.capacity/10 && drop < len(r.records)-1 {
		r.size -= recordSize(r.records[drop])
		drop++
	}
	if drop > 0 {
		r.records = append([]Record(nil), r.records[drop:]...)
	}
}

// Since returns one session's records after seq, oldest first. Records
// hold a session's text, so no ID lists every session's: an empty one
// returns none.
func (r *Ring) Since(sessionID string, seq int64) []Record {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []Record
	for _, rec := range r.records {
		if rec.Seq > seq && sessionID != "" && rec.SessionID == sessionID {
			out = append(out, rec)
		}
	}
	return out
}
