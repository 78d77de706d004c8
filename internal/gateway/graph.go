package gateway

import (
	"errors"
	"fmt"
	"net/http"

	"github.com/stepwise-run/stepwise/internal/grants"
)

func (s *Server) graph(w http.ResponseWriter, r *http.Request) {
	ref := AgentRef{Namespace: r.PathValue("namespace"), Name: r.PathValue("agent")}
	if err := checkAgentRef(ref); err != nil {
		s.fail(w, r, err)
		return
	}
	if err := s.opts.Authorizer.Authorize(r.Context(), r, ref, grants.VerbGet); err != nil {
		s.fail(w, r, err)
		return
	}
	doc, err := s.opts.Agents.Graph(r.Context(), ref)
	if errors.Is(err, ErrGraphNotPublished) {
		err = &httpError{status: http.StatusServiceUnavailable, reason: "not_ready",
			message: fmt.Sprintf("the operator has not published the session Flow graph of Agent %s yet", ref)}
	}
	if err != nil {
		s.fail(w, r, err)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "private, no-cache")
	_, _ = w.Write(doc)
}
