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
	"unsafe"

	"github.com/stepwise-run/stepwise/internal/session"
)

// Key names one session across Agents: a session ID is unique only within
// its Agent's Flow type, and an Agent deleted and made again under its name
// is another Agent, with a new UID, whose readers never see the old one's
// events.
type Key struct {
	Namespace string `json:"namespace"`
	Agent     string `json:"agent"`
	AgentUID  string `json:"agentUID"`
	Session   string `json:"session"`
}

func (k Key) agent() agentKey {
	return agentKey{namespace: k.Namespace, name: k.Agent, uid: k.AgentUID}
}

type agentKey struct{ namespace, name, uid string }

// Record is one event as the hub keeps it.
type Record struct {
	// Token resumes after this record.
	Token Token
	// Time is when the hub received the event.
	Time  time.Time
	Event session.Event
}

// Limits bound the hub's memory, in bytes of memory held, not of payload
// alone. Each tenant, a namespace and each Agent in it, has bounds of its
// own, and when the hub must drop events it drops them from the tenant that
// holds the most: a publisher that floods drops its own events first.
type Limits struct {
	// SessionBytes and SessionEvents bound one session; its oldest events
	// go first. The newest event is always kept.
	SessionBytes  int64
	SessionEvents int
	// AgentBytes bounds one Agent's sessions together; its sessions
	// written least recently go first, whole.
	AgentBytes int64
	// NamespaceBytes and NamespaceSessions bound one namespace; sessions go
	// from its Agent that holds the most.
	NamespaceBytes    int64
	NamespaceSessions int
	// TotalBytes and Sessions bound the hub; sessions go from the namespace
	// that holds the most.
	TotalBytes int64
	Sessions   int
}

// DefaultLimits suit one hub replica with 512 MiB of memory: what the
// limits count is live memory, and the collector needs room above it.
var DefaultLimits = Limits{
	SessionBytes: 1 << 20, SessionEvents: 10_000,
	AgentBytes:     32 << 20,
	NamespaceBytes: 64 << 20, NamespaceSessions: 10_000,
	TotalBytes: 192 << 20, Sessions: 100_000,
}

func (l Limits) withDefaults() Limits {
	def := DefaultLimits
	pick := func(v *int64, d int64) {
		if *v <= 0 {
			*v = d
		}
	}
	pickInt := func(v *int, d int) {
		if *v <= 0 {
			*v = d
		}
	}
	pick(&l.SessionBytes, def.SessionBytes)
	pickInt(&l.SessionEvents, def.SessionEvents)
	pick(&l.AgentBytes, def.AgentBytes)
	pick(&l.NamespaceBytes, def.NamespaceBytes)
	pickInt(&l.NamespaceSessions, def.NamespaceSessions)
	pick(&l.TotalBytes, def.TotalBytes)
	pickInt(&l.Sessions, def.Sessions)
	return l
}

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

	mu         sync.Mutex
	sessions   map[Key]*buffer
	namespaces map[string]*namespaceUsage
	total      int64
	nextGen    uint64
}

// usage is what one tenant holds.
type usage struct {
	bytes    int64
	sessions int
}

type namespaceUsage struct {
	usage
	agents map[agentKey]*agentUsage
}

type agentUsage struct {
	usage
	// order holds the Agent's buffers, most recently written first.
	order *list.List
}

type buffer struct {
	key     Key
	gen     uint64
	first   uint64 // sequence of records[0]; last+1 when empty
	last    uint64 // sequence of the newest event written, 0 before any
	records []stored
	// size is the memory the buffer holds, its records' slice included.
	size    int64
	changed chan struct{} // closed and replaced on every write and on eviction
	evicted bool
	el      *list.Element // in its Agent's order
	// binding is computed once: every token of the buffer carries it.
	binding string
}

// stored is a record as held: its token is made when it is read.
type stored struct {
	seq   uint64
	time  time.Time
	event session.Event
}

// New returns a hub. epoch must differ between runs of the hub, so a token
// from an earlier run is refused rather than misread.
func New(epoch string, limits Limits, now func() time.Time) *Hub {
	return &Hub{limits: limits.withDefaults(), epoch: epoch, now: now,
		sessions: map[Key]*buffer{}, namespaces: map[string]*namespaceUsage{}}
}

// Epoch is this hub run's mark in its tokens.
func (h *Hub) Epoch() string { return h.epoch }

// Sizes of what the hub allocates, as the runtime rounds them: a string or
// slice is counted at its length plus a header, a map entry and a list
// element at a fixed cost.
const (
	storedSize    = int64(unsafe.Sizeof(stored{}))
	bufferSize    = int64(unsafe.Sizeof(buffer{})) + int64(unsafe.Sizeof(list.Element{})) + 64 /* channel */ + 96 /* map entry */
	allocOverhead = 16
)

func stringSize(s string) int64 {
	if s == "" {
		return 0
	}
	return int64(len(s)) + allocOverhead
}

func keySize(k Key) int64 {
	// The key is held twice: in the map and in the buffer.
	return 2*(stringSize(k.Namespace)+stringSize(k.Agent)+stringSize(k.AgentUID)+stringSize(k.Session)) + bufferSize + 32 /* binding */
}

// eventSize is the memory one event's contents hold, apart from its slot in
// the records slice.
func eventSize(e session.Event) int64 {
	return stringSize(string(e.Type)) + stringSize(e.TurnID) + stringSize(e.StepExecutionID) + int64(cap(e.Payload)) + allocOverhead
}

func (h *Hub) usageLocked(k Key, create bool) (*namespaceUsage, *agentUsage) {
	ns := h.namespaces[k.Namespace]
	if ns == nil {
		if !create {
			return nil, nil
		}
		ns = &namespaceUsage{agents: map[agentKey]*agentUsage{}}
		h.namespaces[k.Namespace] = ns
	}
	a := ns.agents[k.agent()]
	if a == nil && create {
		a = &agentUsage{order: list.New()}
		ns.agents[k.agent()] = a
	}
	return ns, a
}

// grow counts bytes, which may be negative, against the buffer's tenants.
func (h *Hub) grow(b *buffer, bytes int64) {
	ns, a := h.usageLocked(b.key, false)
	b.size += bytes
	a.bytes += bytes
	ns.bytes += bytes
	h.total += bytes
}

// bufferLocked returns the session's buffer, creating it when create is set.
func (h *Hub) bufferLocked(k Key, create bool) *buffer {
	if b, ok := h.sessions[k]; ok {
		return b
	}
	if !create {
		return nil
	}
	h.nextGen++
	b := &buffer{key: k, gen: h.nextGen, first: 1, changed: make(chan struct{})}
	b.binding = binding(h.epoch, k, b.gen)
	ns, a := h.usageLocked(k, true)
	h.sessions[k] = b
	b.el = a.order.PushFront(b)
	a.sessions++
	ns.sessions++
	h.grow(b, keySize(k))
	h.evictLocked(b)
	return b
}

// evictLocked drops whole sessions until every tenant is within its
// limits: from the Agent over its bytes, else from the namespace's largest
// Agent, else from the largest namespace's largest Agent, each time the
// session that Agent wrote least recently. keep is never dropped.
func (h *Hub) evictLocked(keep *buffer) {
	ns, a := h.usageLocked(keep.key, false)
	for a.bytes > h.limits.AgentBytes {
		if !h.dropOldest(a, keep) {
			break
		}
	}
	for ns.bytes > h.limits.NamespaceBytes || ns.sessions > h.limits.NamespaceSessions {
		if !h.dropOldest(largestAgent(ns), keep) {
			break
		}
	}
	for h.total > h.limits.TotalBytes || len(h.sessions) > h.limits.Sessions {
		var largest *namespaceUsage
		for _, n := range h.namespaces {
			if largest == nil || n.bytes > largest.bytes {
				largest = n
			}
		}
		if largest == nil || !h.dropOldest(largestAgent(largest), keep) {
			break
		}
	}
}

func largestAgent(ns *namespaceUsage) *agentUsage {
	var largest *agentUsage
	for _, a := range ns.agents {
		if largest == nil || a.bytes > largest.bytes {
			largest = a
		}
	}
	return largest
}

// dropOldest drops the Agent's session written least recently, unless that
// is keep; false when nothing could be dropped.
func (h *Hub) dropOldest(a *agentUsage, keep *buffer) bool {
	if a == nil || a.order.Len() == 0 {
		return false
	}
	b := a.order.Back().Value.(*buffer)
	if b == keep {
		return false
	}
	h.drop(b)
	return true
}

func (h *Hub) drop(b *buffer) {
	ns, a := h.usageLocked(b.key, false)
	h.grow(b, -b.size)
	a.order.Remove(b.el)
	a.sessions--
	ns.sessions--
	if a.sessions == 0 {
		delete(ns.agents, b.key.agent())
	}
	if ns.sessions == 0 {
		delete(h.namespaces, b.key.Namespace)
	}
	delete(h.sessions, b.key)
	b.evicted = true
	close(b.changed)
}

// Publish adds a session's events, in order.
func (h *Hub) Publish(k Key, events []session.Event) {
	if len(events) == 0 {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	b := h.bufferLocked(k, true)
	_, a := h.usageLocked(k, false)
	a.order.MoveToFront(b.el)
	now := h.now()
	before := cap(b.records)
	for _, e := range events {
		b.last++
		b.records = append(b.records, stored{seq: b.last, time: now, event: e})
		h.grow(b, eventSize(e))
	}
	h.grow(b, int64(cap(b.records)-before)*storedSize)
	if b.size > h.limits.SessionBytes || len(b.records) > h.limits.SessionEvents {
		// Drop to nine tenths at once, so a full session copies its records
		// once per many events rather than on every one.
		drop := 0
		size := b.size
		for (size > h.limits.SessionBytes-h.limits.SessionBytes/10 || len(b.records)-drop > h.limits.SessionEvents-h.limits.SessionEvents/10) &&
			drop < len(b.records)-1 {
			size -= eventSize(b.records[drop].event) + storedSize
			drop++
		}
		kept := append([]stored(nil), b.records[drop:]...)
		freed := int64(cap(b.records)-cap(kept)) * storedSize
		for _, r := range b.records[:drop] {
			freed += eventSize(r.event)
		}
		b.records = kept
		b.first += uint64(drop)
		h.grow(b, -freed)
	}
	h.evictLocked(b)
	close(b.changed)
	b.changed = make(chan struct{})
}

// Usage is what one namespace's sessions hold.
func (h *Hub) Usage(namespace string) (bytes int64, sessions int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if ns := h.namespaces[namespace]; ns != nil {
		return ns.bytes, ns.sessions
	}
	return 0, 0
}

// TotalBytes is the memory the hub counts as held.
func (h *Hub) TotalBytes() int64 {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.total
}

func (h *Hub) token(b *buffer, seq uint64) Token {
	return Token{Epoch: h.epoch, Gen: b.gen, Seq: seq, Binding: b.binding}
}

func (h *Hub) record(b *buffer, r stored) Record {
	return Record{Token: h.token(b, r.seq), Time: r.time, Event: r.event}
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
		if r.event.TurnID == turnID {
			return h.token(b, r.seq-1)
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
		size += eventSize(r.event)
		if len(out) > 0 && size > maxBytes {
			break
		}
		out = append(out, h.record(b, r))
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
