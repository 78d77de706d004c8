// Package gateway is the HTTP face of sessions: every session request and
// query of the Go client, addressed by Agent rather than by engine address
// and Flow type, each authorized for the caller on that Agent, and each
// session's events as Server-Sent Events from the event hub.
package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"regexp"
	"sync"
	"time"

	"go.temporal.io/sdk/client"

	"github.com/stepwise-run/stepwise/internal/gatewayapi"
	"github.com/stepwise-run/stepwise/internal/grants"
	"github.com/stepwise-run/stepwise/internal/hubapi"
	sessions "github.com/stepwise-run/stepwise/pkg/client"
)

// AgentRef names an Agent.
type AgentRef struct {
	Namespace string
	Name      string
}

func (a AgentRef) String() string { return a.Namespace + "/" + a.Name }

// Target is what driving one Agent's sessions takes.
type Target struct {
	// Client is an SDK client of the Agent's engine, for as long as the
	// request runs.
	Client client.Client
	// Agent is the Agent as its sessions are reached.
	Agent sessions.Agent
}

// Agents finds Agents' engines.
type Agents interface {
	// Target returns the Agent's engine and a release to call once the
	// request is done. It returns ErrAgentNotFound for an Agent that does
	// not exist.
	Target(ctx context.Context, ref AgentRef) (Target, func(), error)
	// List returns the Agents of a namespace, or of every namespace for
	// "", whoever may read them: the caller's permissions are checked per
	// Agent.
	List(ctx context.Context, namespace string) ([]AgentRef, error)
	// Graph returns the session Flow graph the operator published for the
	// Agent, a JSON document; ErrAgentNotFound for an Agent that does not
	// exist, ErrGraphNotPublished for one whose graph is not published yet.
	Graph(ctx context.Context, ref AgentRef) ([]byte, error)
}

// ErrGraphNotPublished is an Agent whose session Flow graph the operator
// has not published yet.
var ErrGraphNotPublished = errors.New("session Flow graph not published")

// ErrAgentNotFound is an Agent that does not exist.
var ErrAgentNotFound = errors.New("agent not found")

// Authorizer decides whether a request's caller may do verb on an Agent's
// sessions. It returns an error wrapping ErrUnauthenticated or ErrForbidden
// to refuse.
type Authorizer interface {
	Authorize(ctx context.Context, r *http.Request, ref AgentRef, verb grants.Verb) error
	// Authenticate checks only that the caller is known, for a route that
	// then authorizes Agent by Agent: an unknown caller is refused even
	// where there is no Agent to refuse them.
	Authenticate(ctx context.Context, r *http.Request) error
}

// Refusals of an Authorizer.
var (
	ErrUnauthenticated = errors.New("unauthenticated")
	ErrForbidden       = errors.New("forbidden")
)

// Options configure a Server.
type Options struct {
	Agents     Agents
	Authorizer Authorizer
	// Hub reads session events; nil serves no events and no resume tokens.
	Hub *hubapi.Reader
	// KeepAlive is how often an idle event stream sends a comment; default
	// 15 s, below the idle timeouts of common proxies.
	KeepAlive time.Duration
	// RequestTimeout bounds a session request; default 30 s. A request that
	// no worker ran by then answers 202 with its request ID.
	RequestTimeout time.Duration
	// Reauthorize is how often an open event stream authorizes its caller
	// again; default a minute. A stream whose caller may no longer read the
	// session (a deleted token, a revoked RoleBinding) ends, and its
	// reconnection is refused.
	Reauthorize time.Duration
	Logger      *slog.Logger
}

// Server serves the gateway's routes.
type Server struct {
	opts       Options
	openAPIDoc func() ([]byte, error)
}

// New returns a server.
func New(opts Options) *Server {
	if opts.KeepAlive <= 0 {
		opts.KeepAlive = 15 * time.Second
	}
	if opts.RequestTimeout <= 0 {
		opts.RequestTimeout = 30 * time.Second
	}
	if opts.Reauthorize <= 0 {
		opts.Reauthorize = time.Minute
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	s := &Server{opts: opts}
	s.openAPIDoc = sync.OnceValues(s.OpenAPIDocument)
	return s
}

// maxBodyBytes bounds a request body: a message with its image references.
const maxBodyBytes = 4 << 20

// sessionRoute is one route on one session: what the handler serves and
// the OpenAPI document describes, from one table so the two agree.
type sessionRoute struct {
	method string
	// path follows gatewayapi.SessionPath.
	path    string
	verb    grants.Verb
	handle  func(*call) (any, error)
	start   bool
	summary string
	// operationID names the route for generated clients.
	operationID string
	// request is a zero value of the body, nil for none; optional bodies
	// may be empty.
	request      any
	optionalBody bool
	response     any
	query        []parameter
}

// sessionRoutes is the table of session routes.
func (s *Server) sessionRoutes() []sessionRoute {
	return []sessionRoute{
		{method: http.MethodPost, verb: grants.VerbCreate, handle: s.start, start: true, operationID: "startSession",
			summary: "Start a session, with a first message unless it is blank.", request: gatewayapi.StartRequest{}, optionalBody: true, response: gatewayapi.Accepted{}},
		{method: http.MethodGet, path: "/snapshot", verb: grants.VerbGet, handle: s.snapshot, operationID: "getSnapshot",
			summary: "Read the session as a page shows it, with the resume token of its event stream.", response: gatewayapi.SnapshotResponse{}},
		{method: http.MethodGet, path: "/messages", verb: grants.VerbGet, handle: s.messages, operationID: "listMessages",
			summary: "Read a page of stored messages, oldest first.", response: sessions.MessagesPage{}, query: messagesQuery},
		{method: http.MethodPost, path: "/messages", verb: grants.VerbSend, handle: s.send, operationID: "sendMessage",
			summary: "Send a message; it starts a turn, or waits for the running one to end.", request: gatewayapi.SendRequest{}, response: gatewayapi.Accepted{}},
		{method: http.MethodPost, path: "/steer", verb: grants.VerbSend, handle: s.steer, operationID: "steer",
			summary: "Steer the running turn with new text or a queued message.", request: gatewayapi.SteerRequest{}, response: gatewayapi.Accepted{}},
		{method: http.MethodDelete, path: "/queued/{message}", verb: grants.VerbSend, handle: onPathID("message", (*sessions.Sessions).DeleteQueued), operationID: "deleteQueuedMessage",
			summary: "Delete a queued message before its turn starts.", request: gatewayapi.RequestBody{}, optionalBody: true, response: gatewayapi.Accepted{}},
		{method: http.MethodPost, path: "/turns/{turn}/cancel", verb: grants.VerbCancel, handle: onPathID("turn", (*sessions.Sessions).CancelTurn), operationID: "cancelTurn",
			summary: "Stop a turn.", request: gatewayapi.RequestBody{}, optionalBody: true, response: gatewayapi.Accepted{}},
		{method: http.MethodPost, path: "/interrupts/{interrupt}/approve", verb: grants.VerbApprove, handle: onPathID("interrupt", (*sessions.Sessions).Approve), operationID: "approveToolCall",
			summary: "Approve a tool call that waits for approval.", request: gatewayapi.RequestBody{}, optionalBody: true, response: gatewayapi.Accepted{}},
		{method: http.MethodPost, path: "/interrupts/{interrupt}/reject", verb: grants.VerbApprove, handle: s.reject, operationID: "rejectToolCall",
			summary: "Reject a tool call that waits for approval, with a message the model sees.", request: gatewayapi.RejectRequest{}, optionalBody: true, response: gatewayapi.Accepted{}},
		{method: http.MethodPost, path: "/interrupts/{interrupt}/answer", verb: grants.VerbAnswer, handle: s.answer, operationID: "answerQuestion",
			summary: "Answer a question.", request: gatewayapi.AnswerRequest{}, response: gatewayapi.Accepted{}},
		{method: http.MethodPost, path: "/plan/execute", verb: grants.VerbApprove, handle: s.executePlan, operationID: "executePlan",
			summary: "Approve a plan revision and run it.", request: gatewayapi.ExecutePlanRequest{}, response: gatewayapi.Accepted{}},
		{method: http.MethodPut, path: "/settings", verb: grants.VerbUpdate, handle: s.updateSettings, operationID: "updateSettings",
			summary: "Replace the session settings the next turn starts with.", request: gatewayapi.SettingsRequest{}, response: gatewayapi.Accepted{}},
	}
}

// Handler returns the routes.
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	for _, rt := range s.sessionRoutes() {
		mux.Handle(rt.method+" "+gatewayapi.SessionPath+rt.path, s.route(rt.verb, rt.start, rt.handle))
	}
	mux.Handle("GET "+gatewayapi.SessionPath+"/events", s.route(grants.VerbGet, false, nil))
	mux.HandleFunc("GET "+gatewayapi.WaitingPath, s.waiting)
	mux.HandleFunc("GET "+gatewayapi.NamespaceWaitingPath, s.waiting)
	mux.HandleFunc("GET "+gatewayapi.OpenAPIPath, s.openAPI)
	mux.HandleFunc("GET "+gatewayapi.GraphPath, s.graph)
	s.pageRoutes(mux)
	mux.HandleFunc("GET "+gatewayapi.HealthPath, hubapi.Healthy)
	return mux
}

// call is one authorized request on one session.
type call struct {
	w         http.ResponseWriter
	r         *http.Request
	ctx       context.Context
	agent     AgentRef
	sessionID string
	target    Target
	sessions  *sessions.Sessions
	// activeSteps are the Steps the session is in when checkSession read
	// it.
	activeSteps []string
}

// decode reads the JSON body into v; unknown fields are refused, so a
// misspelt field is not silently dropped.
func (c *call) decode(v any) error {
	dec := json.NewDecoder(http.MaxBytesReader(c.w, c.r.Body, maxBodyBytes))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		var tooLarge *http.MaxBytesError
		if errors.As(err, &tooLarge) {
			return badRequest("body", fmt.Sprintf("a request body carries at most %d bytes", maxBodyBytes))
		}
		return badRequest("body", "not the JSON this route takes: "+err.Error())
	}
	return nil
}

var (
	namespacePattern = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$`)
	agentPattern     = regexp.MustCompile(`^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$`)
	// sessionPattern is what a session ID may hold to be reached through
	// the gateway: safe in a URL path segment and in a log line.
	sessionPattern = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._:@=+-]{0,255}$`)
	idPattern      = sessionPattern
)

// checkAgentRef refuses a path whose namespace or Agent cannot name one.
func checkAgentRef(ref AgentRef) error {
	switch {
	case !namespacePattern.MatchString(ref.Namespace):
		return badRequest("namespace", fmt.Sprintf("%q is not a namespace name", ref.Namespace))
	case !agentPattern.MatchString(ref.Name):
		return badRequest("agent", fmt.Sprintf("%q is not an Agent name", ref.Name))
	}
	return nil
}

// route authorizes a request, finds the Agent's engine and checks that the
// session is the Agent's before handle runs. A nil handle streams events.
func (s *Server) route(verb grants.Verb, start bool, handle func(*call) (any, error)) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ref := AgentRef{Namespace: r.PathValue("namespace"), Name: r.PathValue("agent")}
		sessionID := r.PathValue("session")
		if err := checkAgentRef(ref); err != nil {
			s.fail(w, r, err)
			return
		}
		if !sessionPattern.MatchString(sessionID) {
			s.fail(w, r, badRequest("session", fmt.Sprintf("%q is not a session ID the gateway serves: 1 to 256 letters, digits and ._:@=+-, starting with a letter or digit", sessionID)))
			return
		}
		for _, name := range []string{"message", "turn", "interrupt"} {
			if v := r.PathValue(name); v != "" && !idPattern.MatchString(v) {
				s.fail(w, r, badRequest(name, fmt.Sprintf("%q is not an ID", v)))
				return
			}
		}
		if err := s.opts.Authorizer.Authorize(r.Context(), r, ref, verb); err != nil {
			s.fail(w, r, err)
			return
		}
		ctx := r.Context()
		if handle != nil {
			var cancel context.CancelFunc
			ctx, cancel = context.WithTimeout(ctx, s.opts.RequestTimeout)
			defer cancel()
		}
		target, release, err := s.opts.Agents.Target(ctx, ref)
		if err != nil {
			s.fail(w, r, err)
			return
		}
		defer release()
		c := &call{w: w, r: r, ctx: ctx, agent: ref, sessionID: sessionID, target: target,
			sessions: sessions.New(target.Client, target.Agent)}
		if err := s.checkSession(c, start); err != nil {
			s.fail(w, r, err)
			return
		}
		if handle == nil {
			s.events(c)
			return
		}
		out, err := handle(c)
		if err != nil {
			s.fail(w, r, err)
			return
		}
		writeJSON(w, http.StatusOK, out)
	})
}

// checkSession makes sure the session is the Agent's: the client finds
// only the Agent's own sessions, and answers another Agent's, in this
// namespace or another, exactly as one that does not exist. A start may
// name a session that does not exist yet, or one of the Agent's own, which
// the start answers; another Agent's session of the same ID is no
// obstacle, as the new session is the Agent's own.
func (s *Server) checkSession(c *call, start bool) error {
	found, err := c.sessions.Describe(c.ctx, c.sessionID)
	switch {
	case errors.Is(err, sessions.ErrSessionNotFound) && start:
		return nil
	case errors.Is(err, sessions.ErrSessionNotFound):
		return sessionNotFound(c)
	case err != nil:
		return fmt.Errorf("reading session %s: %w", c.sessionID, err)
	}
	c.activeSteps = found.ActiveSteps
	return nil
}

func sessionNotFound(c *call) error {
	return &httpError{status: http.StatusNotFound, reason: "not_found",
		message: fmt.Sprintf("Agent %s has no session %s", c.agent, c.sessionID)}
}

// httpError is a refusal with its status and stable reason.
type httpError struct {
	status  int
	reason  string
	message string
}

func (e *httpError) Error() string { return e.message }

func badRequest(field, message string) error {
	return &httpError{status: http.StatusBadRequest, reason: "bad_request", message: field + ": " + message}
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

// fail answers an error with its status. Engine errors are logged, and the
// caller gets a message without the engine's details.
func (s *Server) fail(w http.ResponseWriter, r *http.Request, err error) {
	var he *httpError
	var pending *sessions.PendingError
	var feature *sessions.FeatureError
	switch {
	case errors.As(err, &he):
		writeJSON(w, he.status, gatewayapi.ErrorBody{Reason: he.reason, Message: he.message})
	case errors.Is(err, ErrUnauthenticated):
		w.Header().Set("WWW-Authenticate", `Bearer realm="stepwise"`)
		writeJSON(w, http.StatusUnauthorized, gatewayapi.ErrorBody{Reason: "unauthenticated", Message: err.Error()})
	case errors.Is(err, ErrForbidden):
		writeJSON(w, http.StatusForbidden, gatewayapi.ErrorBody{Reason: "forbidden", Message: err.Error()})
	case errors.Is(err, ErrAgentNotFound):
		writeJSON(w, http.StatusNotFound, gatewayapi.ErrorBody{Reason: "not_found", Message: err.Error()})
	case errors.As(err, &pending):
		writeJSON(w, http.StatusAccepted, gatewayapi.Pending{Accepted: false, Pending: true, RequestID: pending.RequestID,
			WaitingForWorker: pending.NoWorker, Message: pending.Error()})
	case errors.As(err, &feature):
		writeJSON(w, http.StatusConflict, gatewayapi.ErrorBody{Reason: "feature_not_in_effect", Message: feature.Error()})
	case errors.Is(err, sessions.ErrInvalidImage):
		writeJSON(w, http.StatusBadRequest, gatewayapi.ErrorBody{Reason: "invalid_image", Message: err.Error()})
	case errors.Is(err, sessions.ErrInvalidSettings):
		writeJSON(w, http.StatusBadRequest, gatewayapi.ErrorBody{Reason: "invalid_settings", Message: err.Error()})
	default:
		s.opts.Logger.Error("a session request failed", "method", r.Method, "path", r.URL.Path, "error", err)
		writeJSON(w, http.StatusBadGateway, gatewayapi.ErrorBody{Reason: "engine_error", Message: "the engine did not answer the request; see the gateway's log"})
	}
}
