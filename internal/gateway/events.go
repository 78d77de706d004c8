package gateway

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/stepwise-run/stepwise/internal/grants"
	"github.com/stepwise-run/stepwise/internal/hub"
	"github.com/stepwise-run/stepwise/internal/hubapi"
	"github.com/stepwise-run/stepwise/internal/serving"
)

// Event is the data of one event frame. A Step execution's text may come
// from several attempts; a page keeps the text of the highest attempt of
// each stepExecutionId and drops the rest.
type Event struct {
	Type            string    `json:"type"`
	TurnID          string    `json:"turnId,omitempty"`
	StepExecutionID string    `json:"stepExecutionId,omitempty"`
	Attempt         int       `json:"attempt,omitempty"`
	Time            time.Time `json:"time"`
	// Payload is the event's JSON, as text.
	Payload string `json:"payload"`
}

// KeepAliveFrame is the comment an idle stream sends.
const KeepAliveFrame = ": keep-alive\n\n"

func (c *call) hubKey() hub.Key {
	return hub.Key{Namespace: c.agent.Namespace, Agent: c.agent.Name, AgentUID: c.target.Agent.UID, Session: c.sessionID}
}

// tokenRefusal is a resume token the hub refused, for the browser to load
// the snapshot again; 400 stops an EventSource from reconnecting.
func tokenRefusal(err error) error {
	switch {
	case errors.Is(err, hub.ErrInvalidToken):
		return &httpError{status: http.StatusBadRequest, reason: "invalid_token",
			message: "the resume token is not one of this session's; load the snapshot again"}
	case errors.Is(err, hub.ErrExpiredToken):
		return &httpError{status: http.StatusBadRequest, reason: "expired_token",
			message: "the events after the resume token are no longer kept; load the snapshot again"}
	}
	return err
}

// events streams a session's events as Server-Sent Events, from the
// Last-Event-ID header or the resumeToken query parameter.
func (s *Server) events(c *call) {
	if s.opts.Hub == nil {
		s.fail(c.w, c.r, &httpError{status: http.StatusNotFound, reason: "no_event_hub", message: "this gateway has no event hub"})
		return
	}
	token := c.r.Header.Get("Last-Event-ID")
	if token == "" {
		token = c.r.URL.Query().Get("resumeToken")
	}
	if token == "" {
		s.fail(c.w, c.r, badRequest("resumeToken", "required: the snapshot gives one"))
		return
	}
	key := c.hubKey()
	// One short read checks the token before the response starts, so a
	// refusal is still a 400.
	records, err := s.opts.Hub.Events(c.ctx, key, token, 0)
	if err != nil {
		s.fail(c.w, c.r, tokenRefusal(err))
		return
	}
	h := c.w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache, no-store")
	h.Set("X-Accel-Buffering", "no")
	// The server's read and write timeouts would end the stream; each write
	// below gets a deadline of its own instead.
	serving.Stream(c.w)
	c.w.WriteHeader(http.StatusOK)
	rc := http.NewResponseController(c.w)
	authorized := time.Now()
	for {
		if time.Since(authorized) >= s.opts.Reauthorize {
			// Authorized once, a stream would outlive the permission that
			// opened it; any failure ends it, and the reconnection is
			// authorized as a new request.
			if err := s.opts.Authorizer.Authorize(c.ctx, c.r, c.agent, grants.VerbGet); err != nil {
				s.opts.Logger.Info("ending an event stream whose caller is no longer authorized",
					"session", c.sessionID, "agent", c.agent.String(), "error", err)
				return
			}
			authorized = time.Now()
		}
		_ = rc.SetWriteDeadline(time.Now().Add(2 * s.opts.KeepAlive))
		if len(records) == 0 {
			if _, err := fmt.Fprint(c.w, KeepAliveFrame); err != nil {
				return
			}
		}
		for _, rec := range records {
			if err := writeFrame(c.w, rec); err != nil {
				return
			}
			token = rec.Token
		}
		if err := rc.Flush(); err != nil {
			return
		}
		records, err = s.opts.Hub.Events(c.ctx, key, token, s.opts.KeepAlive)
		if c.ctx.Err() != nil {
			return
		}
		if err != nil {
			// The stream ends; the browser reconnects with its last ID and
			// learns then whether the hub still holds its place.
			if !errors.Is(err, hub.ErrExpiredToken) && !errors.Is(err, hub.ErrInvalidToken) {
				s.opts.Logger.Warn("reading the event hub", "session", c.sessionID, "agent", c.agent.String(), "error", err)
			}
			return
		}
	}
}

func writeFrame(w http.ResponseWriter, rec hubapi.WireRecord) error {
	data, err := json.Marshal(Event{
		Type: string(rec.Event.Type), TurnID: rec.Event.TurnID, StepExecutionID: rec.Event.StepExecutionID,
		Attempt: rec.Event.Attempt, Time: rec.Time, Payload: string(rec.Event.Payload),
	})
	if err != nil {
		return err
	}
	// The token and the JSON hold no line breaks, so each is one field.
	_, err = fmt.Fprintf(w, "id: %s\ndata: %s\n\n", rec.Token, data)
	return err
}
