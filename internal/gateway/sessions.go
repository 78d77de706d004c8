package gateway

import (
	"context"
	"fmt"
	"strconv"

	"github.com/stepwise-run/stepwise/internal/gatewayapi"
	sessions "github.com/stepwise-run/stepwise/pkg/client"
)

// optionalBody decodes a body that may be empty.
func (c *call) optionalBody(v any) error {
	if c.r.ContentLength == 0 && c.r.Header.Get("Transfer-Encoding") == "" {
		return nil
	}
	return c.decode(v)
}

func accepted(ok bool, err error) (any, error) {
	if err != nil {
		return nil, err
	}
	return gatewayapi.Accepted{Accepted: ok}, nil
}

func (s *Server) start(c *call) (any, error) {
	var req gatewayapi.StartRequest
	if err := c.optionalBody(&req); err != nil {
		return nil, err
	}
	var opts []sessions.StartOption
	if req.Settings != nil {
		opts = append(opts, sessions.WithSettings(req.Settings))
	}
	if req.RequestID != "" {
		opts = append(opts, sessions.WithRequestID(req.RequestID))
	}
	return accepted(c.sessions.Start(c.ctx, c.sessionID, req.Message, opts...))
}

func (s *Server) send(c *call) (any, error) {
	var req gatewayapi.SendRequest
	if err := c.decode(&req); err != nil {
		return nil, err
	}
	var opts []sessions.SendOption
	if len(req.Images) > 0 {
		opts = append(opts, sessions.WithImages(req.Images...))
	}
	if req.PlanMode {
		opts = append(opts, sessions.InPlanMode())
	}
	if req.RequestID != "" {
		opts = append(opts, sessions.WithRequestID(req.RequestID))
	}
	return accepted(c.sessions.Send(c.ctx, c.sessionID, req.Text, opts...))
}

func requestID(id string) []sessions.RequestOption {
	if id == "" {
		return nil
	}
	return []sessions.RequestOption{sessions.WithRequestID(id)}
}

func (s *Server) steer(c *call) (any, error) {
	var req gatewayapi.SteerRequest
	if err := c.decode(&req); err != nil {
		return nil, err
	}
	switch {
	case (req.Text == "") == (req.QueuedMessageID == ""):
		return nil, badRequest("body", "a steer carries one of text or queuedMessageId")
	case req.QueuedMessageID != "":
		return accepted(c.sessions.SteerQueued(c.ctx, c.sessionID, req.QueuedMessageID, requestID(req.RequestID)...))
	}
	return accepted(c.sessions.Steer(c.ctx, c.sessionID, req.Text, requestID(req.RequestID)...))
}

// onPathID answers a route whose request is one session method on the ID
// its path names, with an optional body carrying only a request ID.
func onPathID(pathName string, method func(*sessions.Sessions, context.Context, string, string, ...sessions.RequestOption) (bool, error)) func(*call) (any, error) {
	return func(c *call) (any, error) {
		var req gatewayapi.RequestBody
		if err := c.optionalBody(&req); err != nil {
			return nil, err
		}
		return accepted(method(c.sessions, c.ctx, c.sessionID, c.r.PathValue(pathName), requestID(req.RequestID)...))
	}
}

func (s *Server) reject(c *call) (any, error) {
	var req gatewayapi.RejectRequest
	if err := c.optionalBody(&req); err != nil {
		return nil, err
	}
	return accepted(c.sessions.Reject(c.ctx, c.sessionID, c.r.PathValue("interrupt"), req.Message, requestID(req.RequestID)...))
}

func (s *Server) answer(c *call) (any, error) {
	var req gatewayapi.AnswerRequest
	if err := c.decode(&req); err != nil {
		return nil, err
	}
	return accepted(c.sessions.Answer(c.ctx, c.sessionID, c.r.PathValue("interrupt"), req.Answer, requestID(req.RequestID)...))
}

func (s *Server) executePlan(c *call) (any, error) {
	var req gatewayapi.ExecutePlanRequest
	if err := c.decode(&req); err != nil {
		return nil, err
	}
	if req.Revision < 1 {
		return nil, badRequest("revision", fmt.Sprintf("%d is not a plan revision; revisions start at 1", req.Revision))
	}
	return accepted(c.sessions.ExecutePlan(c.ctx, c.sessionID, req.Revision, requestID(req.RequestID)...))
}

func (s *Server) updateSettings(c *call) (any, error) {
	var req gatewayapi.SettingsRequest
	if err := c.decode(&req); err != nil {
		return nil, err
	}
	if req.Settings == nil {
		return nil, badRequest("settings", "required: a JSON object, {} to clear")
	}
	return accepted(c.sessions.UpdateSettings(c.ctx, c.sessionID, req.Settings, requestID(req.RequestID)...))
}

func (s *Server) snapshot(c *call) (any, error) {
	if s.opts.Hub == nil {
		snap, err := c.sessions.Snapshot(c.ctx, c.sessionID)
		return gatewayapi.SnapshotResponse{Snapshot: snap, ActiveSteps: nonNil(c.activeSteps)}, err
	}
	key := c.hubKey()
	// The position is read before the snapshot, so no event after the
	// snapshot is missed; an event between the two may come twice, and
	// events carry the IDs that make them safe to apply twice.
	before, err := s.opts.Hub.Position(c.ctx, key, "")
	if err != nil {
		return nil, err
	}
	snap, err := c.sessions.Snapshot(c.ctx, c.sessionID)
	if err != nil {
		return nil, err
	}
	token := before.End
	if snap.State != nil && snap.State.ActiveTurnID != "" {
		turn, err := s.opts.Hub.Position(c.ctx, key, snap.State.ActiveTurnID)
		if err != nil {
			return nil, err
		}
		token = turn.TurnStart
	}
	return gatewayapi.SnapshotResponse{Snapshot: snap, ResumeToken: token, ActiveSteps: nonNil(c.activeSteps)}, nil
}

// nonNil keeps an empty list a JSON array, which a page iterates without a
// check.
func nonNil(steps []string) []string {
	if steps == nil {
		return []string{}
	}
	return steps
}

func (s *Server) messages(c *call) (any, error) {
	var req sessions.MessagesRequest
	q := c.r.URL.Query()
	if v := q.Get("beforeSequence"); v != "" {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < 0 {
			return nil, badRequest("beforeSequence", fmt.Sprintf("%q is not a message sequence", v))
		}
		req.BeforeSequence = n
	}
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > 200 {
			return nil, badRequest("limit", fmt.Sprintf("%q: from 1 to 200", v))
		}
		req.Limit = n
	}
	return c.sessions.Messages(c.ctx, c.sessionID, req)
}
