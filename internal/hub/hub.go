// Package hub is the event hub's core: each session's recent events, kept
// outside workflow history in bounded memory, numbered so that a reader
// resumes from a token with no repeated and no missing event while the hub
// still holds them.
//
// Workers publish to one hub; every gateway replica reads from it, so a
// browser's resume token means the same on each replica. The hub is best
// effort: a session's state is its snapshot, and a reader whose token the hub
// can no longer honour is told so (ErrInvalidToken, ErrExpiredToken) and
// loads the snapshot again.
package hub

import (
	"container/list"
	"context"
	"errors"
	"sync"
	"time"

	"github.com/stepwise-run/stepwise/internal/session"
)

// Key names one session across Agents: a session ID is unique only within
// its Agent's Flow type.
type Key struct {
	Namespace string `json:"namespace"`
	Agent     string `json:"agent"`
	Session   string `json:"session"`
}

// Record is one event as the hub keeps it.
type Record struct {
	// Token resumes after this record.
	Token Token
	// Time is when the hub received the event.
	Time  time.Time
	Event session.Event
}

// Limits bound the hub's memory.
type Limits struct {
	// SessionBytes is how much event payload one session keeps; the oldest
	// events go first. The newest event is always kept.
	SessionBytes int64
	// TotalBytes is how much all sessions keep; the sessions written least
	// recently go first, whole.
	TotalBytes int64
	// Sessions is how many sessions the hub tracks at once.
	Sessions int
}

// DefaultLimits suit one hub replica of a few hundred MiB.
var DefaultLimits = Limits{SessionBytes: 1 << 20, TotalBytes: 256 << 20, Sessions: 100_000}

// ErrInvalidToken is a token the hub never gave for this session: another
// session's, another hub run's, or not a token at all.
var ErrInvalidToken = errors.New("invalid resume token")

// ErrExpiredToken is a token for events the hub no longer holds all of.
var ErrExpiredToken = errors.New("the events after this resume token are no longer kept")

// Hub holds the events of many sessions.
type Hub struct {
	limits Limits
	epoch  string
	now    func() time.Time

	mu       sync.Mutex
	sessions map[Key]*list.Element // of *buffer, most recently written first
	order    *list.List
	total    int64
	nextGen  uint64
}

type buffer struct {
	key     Key
	gen     uint64
	first   uint64 // sequence of records[0]; last+1 when empty
	last    uint64 // sequence of the newest event written, 0 before any
	records []Record
	size    int64
	changed chan struct{} // closed and replaced on every write and on eviction
	evicted bool
}

// New returns a hub. epoch must differ between runs of the hub, so a token
// from an earlier run is refused rather than misread.
func New(epoch string, limits Limits, now func() time.Time) *Hub {
	if limits.SessionBytes <= 0 {
		limits.SessionBytes = DefaultLimits.SessionBytes
	}
	if limits.TotalBytes <= 0 {
		limits.TotalBytes = DefaultLimits.TotalBytes
	}
	if limits.Sessions <= 0 {
		limits.Sessions = DefaultLimits.Sessions
	}
	return &Hub{limits: limits, epoch: epoch, now: now, sessions: map[Key]*list.Element{}, order: list.New()}
}

// Epoch is this hub run's mark in its tokens.
func (h *Hub) Epoch() string { return h.epoch }

func keySize(k Key) int64 { return int64(len(k.Namespace)+len(k.Agent)+len(k.Session)) + 128 }

func eventSize(e session.Event) int64 {
	return int64(len(e.Type)+len(e.TurnID)+len(e.StepExecutionID)+len(e.Payload)) + 96
}

// bufferLocked returns the session's buffer, creating it when create is set.
func (h *Hub) bufferLocked(k Key, create bool) *buffer {
	if el, ok := h.sessions[k]; ok {
		return el.Value.(*buffer)
	}
	if !create {
		return nil
	}
	h.nextGen++
	b := &buffer{key: k, gen: h.nextGen, first: 1, changed: make(chan struct{})}
	h.sessions[k] = h.order.PushFront(b)
	h.total += keySize(k)
	h.evictLocked(b)
	return b
}

// evictLocked drops whole sessions, least recently written first, until the
// hub is within its limits; keep is never dropped.
func (h *Hub) evictLocked(keep *buffer) {
	for h.total > h.limits.TotalBytes || len(h.sessions) > h.limits.Sessions {
		el := h.order.Back()
		if el == nil || el.Value.(*buffer) == keep {
			return
		}
		b := el.Value.(*buffer)
		h.order.Remove(el)
		delete(h.sessions, b.key)
		h.total -= b.size + keySize(b.key)
		b.evicted = true
		close(b.changed)
	}
}

// Publish adds a session's events, in order.
func (h *Hub) Publish(k Key, events []session.Event) {
	if len(events) == 0 {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	b := h.bufferLocked(k, true)
	h.order.MoveToFront(h.sessions[k])
	now := h.now()
	for _, e := range events {
		b.last++
		r := Record{Token: h.token(b, b.last), Time: now, Event: e}
		b.records = append(b.records, r)
		size := eventSize(e)
		b.size += size
		h.total += size
	}
	if b.size > h.limits.SessionBytes {
		// Drop to nine tenths at once, so a full session copies its records
		// once per many events rather than on every one.
		drop := 0
		for b.size > h.limits.SessionBytes-h.limits.SessionBytes/10 && drop < len(b.records)-1 {
			size := eventSize(b.records[drop].Event)
			b.size -= size
			h.total -= size
			drop++
		}
		b.records = append([]Record(nil), b.records[drop:]...)
		b.first += uint64(drop)
	}
	h.evictLocked(b)
	close(b.changed)
	b.changed = make(chan struct{})
}

func (h *Hub) token(b *buffer, seq uint64) Token {
	return Token{Epoch: h.epoch, Gen: b.gen, Seq: seq, Binding: binding(h.epoch, b.key, b.gen)}
}

// End is a token that resumes after every event the session has now: a
// reader that opens with it sees only what comes next.
func (h *Hub) End(k Key) Token {
	h.mu.Lock()
	defer h.mu.Unlock()
	b := h.bufferLocked(k, true)
	return h.token(b, b.last)
}

// TurnStart is a token that replays a turn's events, from the first one the
// hub still holds; it is End when the hub holds none of them yet.
func (h *Hub) TurnStart(k Key, turnID string) Token {
	h.mu.Lock()
	defer h.mu.Unlock()
	b := h.bufferLocked(k, true)
	for _, r := range b.records {
		if r.Event.TurnID == turnID {
			return h.token(b, r.Token.Seq-1)
		}
	}
	return h.token(b, b.last)
}

// Read returns the session's events after the token, up to maxBytes of
// them (at least one when there is one), and a channel that is closed when
// more may have arrived. It refuses a token it cannot honour: ErrInvalidToken
// or ErrExpiredToken.
func (h *Hub) Read(k Key, t Token, maxBytes int64) ([]Record, <-chan struct{}, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if t.Epoch != h.epoch || t.Binding != binding(h.epoch, k, t.Gen) {
		return nil, nil, ErrInvalidToken
	}
	b := h.bufferLocked(k, false)
	if b == nil || b.gen != t.Gen {
		// The hub dropped the whole session since it gave the token.
		if t.Gen > h.nextGen {
			return nil, nil, ErrInvalidToken
		}
		return nil, nil, ErrExpiredToken
	}
	if t.Seq > b.last {
		return nil, nil, ErrInvalidToken
	}
	if t.Seq+1 < b.first {
		return nil, nil, ErrExpiredToken
	}
	var out []Record
	var size int64
	for _, r := range b.records[t.Seq+1-b.first:] {
		size += eventSize(r.Event)
		if len(out) > 0 && size > maxBytes {
			break
		}
		out = append(out, r)
	}
	return out, b.changed, nil
}

// Wait reads like Read, and when there is nothing after the token yet it
// waits for an event until ctx ends; then it returns no records and no
// error. An eviction while it waits is ErrExpiredToken.
func (h *Hub) Wait(ctx context.Context, k Key, t Token, maxBytes int64) ([]Record, error) {
	for {
		records, changed, err := h.Read(k, t, maxBytes)
		if err != nil || len(records) > 0 {
			return records, err
		}
		select {
		case <-ctx.Done():
			return nil, nil
		case <-changed:
		}
	}
}
