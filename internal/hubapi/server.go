package hubapi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"

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
	// unauthorized.
	Reason  string `json:"reason"`
	Message string `json:"message"`
}

// Server serves one hub.
type Server struct {
	hub  *hub.Hub
	keys *Keyring
}

// NewServer serves h to holders of tokens from keys.
func NewServer(h *hub.Hub, keys *Keyring) *Server { return &Server{hub: h, keys: keys} }

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
	namespace, agent, err := s.keys.checkPublish(bearer(r.Header.Get("Authorization")))
	if err != nil {
		refuse(w, http.StatusUnauthorized, "unauthorized", err.Error())
		return
	}
	var req PublishRequest
	body := http.MaxBytesReader(w, r.Body, MaxPublishBytes)
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
	// Keep each session's events in the order the worker wrote them.
	var batch []session.Event
	for i, e := range req.Events {
		batch = append(batch, e.Event)
		if i+1 == len(req.Events) || req.Events[i+1].Session != e.Session {
			s.hub.Publish(hub.Key{Namespace: namespace, Agent: agent, Session: e.Session}, batch)
			batch = nil
		}
	}
	w.WriteHeader(http.StatusNoContent)
}

// sessionKey reads the session a read names, after the reader's token.
func (s *Server) sessionKey(w http.ResponseWriter, r *http.Request) (hub.Key, bool) {
	if err := s.keys.checkRead(bearer(r.Header.Get("Authorization"))); err != nil {
		refuse(w, http.StatusUnauthorized, "unauthorized", err.Error())
		return hub.Key{}, false
	}
	q := r.URL.Query()
	k := hub.Key{Namespace: q.Get("namespace"), Agent: q.Get("agent"), Session: q.Get("session")}
	if k.Namespace == "" || k.Agent == "" || k.Session == "" {
		refuse(w, http.StatusBadRequest, "bad_request", "namespace, agent and session are required")
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
