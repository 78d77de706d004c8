// Package hubapi is the event hub's HTTP face: workers publish session
// events to it in batches, and gateway replicas read them. Who may do
// which is the hub's keyring (hub.PublishKeys, hub.ReadTokens).
package hubapi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/time/rate"

	"github.com/stepwise-run/stepwise/internal/hub"
	"github.com/stepwise-run/stepwise/internal/session"
)

// Limits of what one request may carry.
const (
	// MaxPublishBytes bounds one publish request's body.
	MaxPublishBytes = 4 << 20
	// MaxPublishEvents bounds the events in one publish request.
	MaxPublishEvents = 10_000
	// MaxSessionIDBytes is the longest session ID the hub keeps events for,
	// the engine's limit on a workflow ID.
	MaxSessionIDBytes = 1000
	// MaxWait is the longest a read waits for an event.
	MaxWait = 30 * time.Second
	// maxReadBytes bounds the events one read returns.
	maxReadBytes = 1 << 20
	maxTypeBytes = 64
)

// Paths of the hub's routes.
const (
	PublishPath  = "/v1/publish"
	EventsPath   = "/v1/events"
	PositionPath = "/v1/position"
)

// PublishedEvent is one event in a publish request.
type PublishedEvent struct {
	Session string        `json:"session"`
	Event   session.Event `json:"event"`
}

// PublishRequest is a batch of events from one worker; the token says whose
// Agent they belong to.
type PublishRequest struct {
	Events []PublishedEvent `json:"events"`
}

// WireRecord is a record as a read returns it.
type WireRecord struct {
	Token string        `json:"token"`
	Time  time.Time     `json:"time"`
	Event session.Event `json:"event"`
}

// EventsResponse answers a read.
type EventsResponse struct {
	Records []WireRecord `json:"records"`
}

// PositionResponse answers a position request.
type PositionResponse struct {
	// End resumes after every event the session has now.
	End string `json:"end"`
	// TurnStart replays the named turn's events; empty when no turn was
	// named.
	TurnStart string `json:"turnStart,omitempty"`
}

// ErrorResponse is every refusal's body.
type ErrorResponse struct {
	// Reason is stable: invalid_token, expired_token, bad_request,
	// unauthorized, rate_limited.
	Reason  string `json:"reason"`
	Message string `json:"message"`
}

// PublishRate bounds what one Agent's workers may publish, together: a
// steady rate and a burst, in events and in request bytes. A worker over it
// is answered 429 with Retry-After and sends again later.
type PublishRate struct {
	EventsPerSecond float64
	EventBurst      int
	BytesPerSecond  float64
	ByteBurst       int
	// Concurrent is how many publish requests of one Agent the hub reads
	// at once; more wait a few seconds for their turn.
	Concurrent int
}

// DefaultPublishRate lets an Agent stream a few hundred sessions' text at
// once while one Agent alone cannot fill the hub faster than it drops.
var DefaultPublishRate = PublishRate{
	EventsPerSecond: 5_000, EventBurst: 2 * MaxPublishEvents,
	BytesPerSecond: 4 << 20, ByteBurst: 4 * MaxPublishBytes,
	Concurrent: 2,
}

// maxConcurrentPublishes bounds the publish bodies the hub holds at once,
// whoever sends them, so its memory beyond the events it keeps is bounded.
const maxConcurrentPublishes = 16

// ServerOptions say whom a hub serves.
type ServerOptions struct {
	// PublishKeys check the workers' publish tokens.
	PublishKeys func() *hub.PublishKeys
	// ReadTokens check the gateways' read tokens.
	ReadTokens func() *hub.ReadTokens
	// Rate bounds each Agent's publishing; zero fields take
	// DefaultPublishRate's.
	Rate PublishRate
	// Now is the clock tokens expire by; nil is time.Now.
	Now func() time.Time
}

// Server serves one hub.
type Server struct {
	hub  *hub.Hub
	opts ServerOptions
	// publishing bounds the publish bodies read at once.
	publishing chan struct{}

	mu       sync.Mutex
	limiters map[hub.PublishClaims]*agentLimiter
}

type agentLimiter struct {
	events, bytes *rate.Limiter
	// slots holds one token per publish request of the Agent being read.
	slots chan struct{}
	used  time.Time
}

// NewServer serves h to holders of the tokens opts checks.
func NewServer(h *hub.Hub, opts ServerOptions) *Server {
	def := DefaultPublishRate
	if opts.Rate.EventsPerSecond <= 0 {
		opts.Rate.EventsPerSecond, opts.Rate.EventBurst = def.EventsPerSecond, def.EventBurst
	}
	if opts.Rate.BytesPerSecond <= 0 {
		opts.Rate.BytesPerSecond, opts.Rate.ByteBurst = def.BytesPerSecond, def.ByteBurst
	}
	// A request the burst can never cover would wait forever.
	opts.Rate.EventBurst = max(opts.Rate.EventBurst, MaxPublishEvents)
	opts.Rate.ByteBurst = max(opts.Rate.ByteBurst, MaxPublishBytes)
	if opts.Rate.Concurrent <= 0 {
		opts.Rate.Concurrent = def.Concurrent
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	return &Server{hub: h, opts: opts, publishing: make(chan struct{}, maxConcurrentPublishes), limiters: map[hub.PublishClaims]*agentLimiter{}}
}

// limiterIdle is how long an Agent's limiter is kept after its last
// publish; a new one starts with a full burst.
const limiterIdle = 10 * time.Minute

// slotWait is how long a publish request waits for one of its Agent's
// slots, behind the Agent's other workers, before it is told to come back.
const slotWait = 5 * time.Second

// limiter returns an Agent's limiter, made on its first publish.
func (s *Server) limiter(agent hub.PublishClaims, now time.Time) *agentLimiter {
	agent.Expires = time.Time{}
	s.mu.Lock()
	defer s.mu.Unlock()
	l := s.limiters[agent]
	if l == nil {
		if len(s.limiters) >= 1024 {
			for k, v := range s.limiters {
				if len(v.slots) == 0 && now.Sub(v.used) > limiterIdle {
					delete(s.limiters, k)
				}
			}
		}
		l = &agentLimiter{
			events: rate.NewLimiter(rate.Limit(s.opts.Rate.EventsPerSecond), s.opts.Rate.EventBurst),
			bytes:  rate.NewLimiter(rate.Limit(s.opts.Rate.BytesPerSecond), s.opts.Rate.ByteBurst),
			slots:  make(chan struct{}, s.opts.Rate.Concurrent),
		}
		s.limiters[agent] = l
	}
	l.used = now
	return l
}

// enter admits one publish request of an Agent: within its rate, and once
// one of its slots is free. Otherwise it says how long to wait.
func (s *Server) enter(ctx context.Context, agent hub.PublishClaims, now time.Time) (release func(), retryAfter time.Duration) {
	l := s.limiter(agent, now)
	if l.events.TokensAt(now) < 1 || l.bytes.TokensAt(now) < 1 {
		return nil, retryAfterOf(l, now)
	}
	timer := time.NewTimer(slotWait)
	defer timer.Stop()
	select {
	case l.slots <- struct{}{}:
		return func() { <-l.slots }, 0
	case <-timer.C:
		return nil, time.Second
	case <-ctx.Done():
		return nil, time.Second
	}
}

// charge takes what a read request carried from its Agent's allowance; the
// debt makes the next request wait.
func (s *Server) charge(agent hub.PublishClaims, now time.Time, events, bytes int) {
	agent.Expires = time.Time{}
	s.mu.Lock()
	defer s.mu.Unlock()
	if l := s.limiters[agent]; l != nil {
		l.events.ReserveN(now, min(events, s.opts.Rate.EventBurst))
		l.bytes.ReserveN(now, min(bytes, s.opts.Rate.ByteBurst))
	}
}

func retryAfterOf(l *agentLimiter, now time.Time) time.Duration {
	wait := time.Second
	for _, lim := range []*rate.Limiter{l.events, l.bytes} {
		if lack := 1 - lim.TokensAt(now); lack > 0 {
			wait = max(wait, time.Duration(math.Ceil(lack/float64(lim.Limit())))*time.Second)
		}
	}
	return wait
}

// Handler returns the hub's routes.
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST "+PublishPath, s.publish)
	mux.HandleFunc("GET "+EventsPath, s.events)
	mux.HandleFunc("GET "+PositionPath, s.position)
	mux.HandleFunc("GET "+HealthPath, Healthy)
	return mux
}

// HealthPath answers the kubelet's probes; it needs no token and tells
// nothing but that the process serves.
const HealthPath = "/healthz"

// Healthy answers a probe.
func Healthy(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	_, _ = w.Write([]byte("ok\n"))
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func refuse(w http.ResponseWriter, status int, reason, message string) {
	writeJSON(w, status, ErrorResponse{Reason: reason, Message: message})
}

func (s *Server) publish(w http.ResponseWriter, r *http.Request) {
	now := s.opts.Now()
	claims, err := s.opts.PublishKeys().Check(bearer(r.Header.Get("Authorization")), now)
	if err != nil {
		refuse(w, http.StatusUnauthorized, "unauthorized", err.Error())
		return
	}
	release, retryAfter := s.enter(r.Context(), claims, now)
	if release == nil {
		w.Header().Set("Retry-After", strconv.Itoa(int(retryAfter.Seconds())))
		refuse(w, http.StatusTooManyRequests, "rate_limited", fmt.Sprintf(
			"Agent %s/%s publishes more than the event hub takes from one Agent; send again in %s", claims.Namespace, claims.Agent, retryAfter))
		return
	}
	defer release()
	select {
	case s.publishing <- struct{}{}:
		defer func() { <-s.publishing }()
	case <-r.Context().Done():
		return
	}
	body := &countingReader{r: http.MaxBytesReader(w, r.Body, MaxPublishBytes)}
	defer func() { s.charge(claims, now, body.events, body.n) }()
	var req PublishRequest
	if err := json.NewDecoder(body).Decode(&req); err != nil {
		var tooLarge *http.MaxBytesError
		if errors.As(err, &tooLarge) {
			refuse(w, http.StatusRequestEntityTooLarge, "bad_request", fmt.Sprintf("a publish request carries at most %d bytes", MaxPublishBytes))
			return
		}
		refuse(w, http.StatusBadRequest, "bad_request", "the body is not a publish request: "+err.Error())
		return
	}
	if len(req.Events) > MaxPublishEvents {
		refuse(w, http.StatusBadRequest, "bad_request", fmt.Sprintf("events: %d events; a request carries at most %d", len(req.Events), MaxPublishEvents))
		return
	}
	for i, e := range req.Events {
		switch {
		case e.Session == "" || len(e.Session) > MaxSessionIDBytes:
			refuse(w, http.StatusBadRequest, "bad_request", fmt.Sprintf("events[%d].session: a session ID has 1 to %d bytes", i, MaxSessionIDBytes))
			return
		case e.Event.Type == "" || len(e.Event.Type) > maxTypeBytes:
			refuse(w, http.StatusBadRequest, "bad_request", fmt.Sprintf("events[%d].event.type: an event type has 1 to %d bytes", i, maxTypeBytes))
			return
		}
	}
	body.events = len(req.Events)
	// Keep each session's events in the order the worker wrote them.
	var batch []session.Event
	for i, e := range req.Events {
		batch = append(batch, e.Event)
		if i+1 == len(req.Events) || req.Events[i+1].Session != e.Session {
			s.hub.Publish(hub.Key{Namespace: claims.Namespace, Agent: claims.Agent, AgentUID: claims.AgentUID, Session: e.Session}, batch)
			batch = nil
		}
	}
	w.WriteHeader(http.StatusNoContent)
}

// sessionKey reads the session a read names, after the reader's token.
func (s *Server) sessionKey(w http.ResponseWriter, r *http.Request) (hub.Key, bool) {
	if err := s.opts.ReadTokens().Check(bearer(r.Header.Get("Authorization"))); err != nil {
		refuse(w, http.StatusUnauthorized, "unauthorized", err.Error())
		return hub.Key{}, false
	}
	q := r.URL.Query()
	k := hub.Key{Namespace: q.Get("namespace"), Agent: q.Get("agent"), AgentUID: q.Get("uid"), Session: q.Get("session")}
	if k.Namespace == "" || k.Agent == "" || k.AgentUID == "" || k.Session == "" {
		refuse(w, http.StatusBadRequest, "bad_request", "namespace, agent, uid and session are required")
		return hub.Key{}, false
	}
	return k, true
}

func (s *Server) events(w http.ResponseWriter, r *http.Request) {
	k, ok := s.sessionKey(w, r)
	if !ok {
		return
	}
	q := r.URL.Query()
	wait := time.Duration(0)
	if v := q.Get("wait"); v != "" {
		seconds, err := strconv.ParseFloat(v, 64)
		if err != nil || seconds < 0 || seconds > MaxWait.Seconds() {
			refuse(w, http.StatusBadRequest, "bad_request", fmt.Sprintf("wait=%q: seconds from 0 to %g", v, MaxWait.Seconds()))
			return
		}
		wait = time.Duration(seconds * float64(time.Second))
	}
	after, err := hub.ParseToken(q.Get("after"))
	if err != nil {
		refuse(w, http.StatusBadRequest, "invalid_token", err.Error())
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), wait)
	defer cancel()
	records, err := s.hub.Wait(ctx, k, after, maxReadBytes)
	switch {
	case errors.Is(err, hub.ErrInvalidToken):
		refuse(w, http.StatusBadRequest, "invalid_token", err.Error())
		return
	case errors.Is(err, hub.ErrExpiredToken):
		refuse(w, http.StatusBadRequest, "expired_token", err.Error())
		return
	}
	resp := EventsResponse{Records: make([]WireRecord, 0, len(records))}
	for _, rec := range records {
		resp.Records = append(resp.Records, WireRecord{Token: rec.Token.String(), Time: rec.Time, Event: rec.Event})
	}
	writeJSON(w, http.StatusOK, resp)
}

func (s *Server) position(w http.ResponseWriter, r *http.Request) {
	k, ok := s.sessionKey(w, r)
	if !ok {
		return
	}
	resp := PositionResponse{End: s.hub.End(k).String()}
	if turn := r.URL.Query().Get("turn"); turn != "" {
		resp.TurnStart = s.hub.TurnStart(k, turn).String()
	}
	writeJSON(w, http.StatusOK, resp)
}

// countingReader counts the bytes of a publish request as they are read.
type countingReader struct {
	r      interface{ Read([]byte) (int, error) }
	n      int
	events int
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += n
	return n, err
}

func bearer(header string) string {
	const prefix = "Bearer "
	if len(header) > len(prefix) && strings.EqualFold(header[:len(prefix)], prefix) {
		return header[len(prefix):]
	}
	return ""
}
