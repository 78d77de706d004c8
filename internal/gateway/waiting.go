package gateway

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"sync"

	"github.com/stepwise-run/stepwise/internal/gatewayapi"
	"github.com/stepwise-run/stepwise/internal/grants"
	"github.com/stepwise-run/stepwise/internal/session"
	sessions "github.com/stepwise-run/stepwise/pkg/client"
)

// Bounds of a waiting search: one answer stays small enough for a page to
// show, and one caller's search reaches a bounded number of engines at once.
const (
	DefaultWaitingLimit = 100
	MaxWaitingLimit     = 500
	waitingSearches     = 8
)

// waitingRequest is a parsed waiting search.
type waitingRequest struct {
	namespace string
	steps     []string
	limit     int
}

func parseWaiting(r *http.Request) (waitingRequest, error) {
	req := waitingRequest{namespace: r.PathValue("namespace"), limit: DefaultWaitingLimit}
	if req.namespace != "" && !namespacePattern.MatchString(req.namespace) {
		return req, badRequest("namespace", fmt.Sprintf("%q is not a namespace name", req.namespace))
	}
	q := r.URL.Query()
	for _, step := range q["step"] {
		if !slices.ContainsFunc(session.Steps(), func(s session.StepSpec) bool { return string(s.Name) == step }) {
			return req, badRequest("step", fmt.Sprintf("%q is not a Step of the session Flow", step))
		}
		if !slices.Contains(req.steps, step) {
			req.steps = append(req.steps, step)
		}
	}
	if len(req.steps) == 0 {
		req.steps = []string{sessions.StepAwaitToolApproval, sessions.StepAwaitQuestionAnswer}
	}
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > MaxWaitingLimit {
			return req, badRequest("limit", fmt.Sprintf("%q: from 1 to %d", v, MaxWaitingLimit))
		}
		req.limit = n
	}
	return req, nil
}

// waiting answers a search across Agents. An Agent the caller may not read
// is left out without a word, so the answer tells nothing of it; an Agent
// the caller may read but whose engine did not answer is named, so a page
// says the list is partial rather than showing it as whole.
func (s *Server) waiting(w http.ResponseWriter, r *http.Request) {
	req, err := parseWaiting(r)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	if err := s.opts.Authorizer.Authenticate(r.Context(), r); err != nil {
		s.fail(w, r, err)
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), s.opts.RequestTimeout)
	defer cancel()
	refs, err := s.opts.Agents.List(ctx, req.namespace)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	var (
		mu   sync.Mutex
		resp = gatewayapi.WaitingResponse{Sessions: []gatewayapi.WaitingSession{}}
		wg   sync.WaitGroup
		sem  = make(chan struct{}, waitingSearches)
	)
	for _, ref := range refs {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			found, more, err := s.waitingOf(ctx, r, ref, req)
			mu.Lock()
			defer mu.Unlock()
			switch {
			case errors.Is(err, ErrForbidden) || errors.Is(err, ErrUnauthenticated) || errors.Is(err, ErrAgentNotFound):
				// Not the caller's to see, or deleted since the list.
			case err != nil:
				resp.Unavailable = append(resp.Unavailable, s.unavailable(r, ref, err))
			default:
				resp.Sessions = append(resp.Sessions, found...)
				resp.Truncated = resp.Truncated || more
			}
		}()
	}
	wg.Wait()
	slices.SortFunc(resp.Sessions, func(a, b gatewayapi.WaitingSession) int {
		return cmp.Or(b.StartTime.Compare(a.StartTime), cmp.Compare(a.Namespace, b.Namespace),
			cmp.Compare(a.Agent, b.Agent), cmp.Compare(a.SessionID, b.SessionID))
	})
	if len(resp.Sessions) > req.limit {
		resp.Sessions, resp.Truncated = resp.Sessions[:req.limit], true
	}
	slices.SortFunc(resp.Unavailable, func(a, b gatewayapi.UnavailableAgent) int {
		return cmp.Or(cmp.Compare(a.Namespace, b.Namespace), cmp.Compare(a.Agent, b.Agent))
	})
	writeJSON(w, http.StatusOK, resp)
}

// waitingOf searches one Agent's sessions, if the caller may read them.
func (s *Server) waitingOf(ctx context.Context, r *http.Request, ref AgentRef, req waitingRequest) ([]gatewayapi.WaitingSession, bool, error) {
	if err := s.opts.Authorizer.Authorize(ctx, r, ref, grants.VerbGet); err != nil {
		return nil, false, err
	}
	target, release, err := s.opts.Agents.Target(ctx, ref)
	if err != nil {
		return nil, false, err
	}
	defer release()
	found, more, err := sessions.New(target.Client, target.Agent).Waiting(ctx, sessions.WaitingQuery{Steps: req.steps, Limit: req.limit})
	if err != nil {
		return nil, false, err
	}
	out := make([]gatewayapi.WaitingSession, len(found))
	for i, f := range found {
		out[i] = gatewayapi.WaitingSession{Namespace: ref.Namespace, Agent: ref.Name, SessionID: f.SessionID, Steps: f.Steps, StartTime: f.StartTime}
	}
	return out, more, nil
}

// unavailable describes why an Agent was not searched; an engine's own
// error is logged, not shown, as fail does.
func (s *Server) unavailable(r *http.Request, ref AgentRef, err error) gatewayapi.UnavailableAgent {
	u := gatewayapi.UnavailableAgent{Namespace: ref.Namespace, Agent: ref.Name}
	var he *httpError
	switch {
	case errors.As(err, &he):
		u.Reason, u.Message = he.reason, he.message
	default:
		s.opts.Logger.Error("searching waiting sessions failed", "path", r.URL.Path, "agent", ref.String(), "error", err)
		u.Reason, u.Message = "engine_error", "the engine did not answer the search; see the gateway's log"
	}
	return u
}
