// Package gatewayapi is the gateway's wire contract: its paths, and the
// request and response bodies of its session routes, its waiting search
// and its refusals. The gateway serves it and the kubectl plugin speaks
// it, so the plugin links none of the gateway's server.
package gatewayapi

import (
	"time"

	"github.com/stepwise-run/stepwise/pkg/client"
)

// HealthPath answers the kubelet's probes without a token.
const HealthPath = "/healthz"

// SessionPath is the prefix of one session's routes.
const SessionPath = "/api/v1/namespaces/{namespace}/agents/{agent}/sessions/{session}"

// GraphPath serves an Agent's session Flow graph, the document the operator
// publishes, to whoever may read the Agent's sessions: a page draws it with
// the Steps a session is in, which the snapshot lists.
const GraphPath = "/api/v1/namespaces/{namespace}/agents/{agent}/graph"

// PagePath is where the gateway serves its web page: the sessions waiting
// for a person, and a live session with its approvals, questions, plan,
// steering, Stop and Flow graph. The page holds no secret: it calls the
// routes with the bearer token its user pastes, as any other client does.
const PagePath = "/ui/"

// OpenAPIPath serves the gateway's OpenAPI document to anyone: it tells
// which routes exist, not what any session holds.
const OpenAPIPath = "/api/v1/openapi.json"

// Accepted answers a session request: whether the session took it.
type Accepted struct {
	Accepted bool `json:"accepted"`
}

// Pending answers, with 202, a request no worker ran in time: it was sent
// and takes effect, or is refused, when a worker runs it. Send it again
// with its request ID to learn the outcome.
type Pending struct {
	Accepted         bool   `json:"accepted"`
	Pending          bool   `json:"pending"`
	RequestID        string `json:"requestId"`
	WaitingForWorker bool   `json:"waitingForWorker"`
	Message          string `json:"message"`
}

// StartRequest starts a session.
type StartRequest struct {
	// Message starts the first turn unless blank.
	Message string `json:"message,omitempty"`
	// Settings are the session settings, a JSON object.
	Settings client.SessionSettings `json:"settings,omitempty"`
	// RequestID makes a retry safe.
	RequestID string `json:"requestId,omitempty"`
}

// SendRequest sends a message.
type SendRequest struct {
	Text      string                  `json:"text"`
	Images    []client.ImageReference `json:"images,omitempty"`
	PlanMode  bool                    `json:"planMode,omitempty"`
	RequestID string                  `json:"requestId,omitempty"`
}

// SteerRequest steers the running turn with new text, or with a queued
// message by its ID: one of the two.
type SteerRequest struct {
	Text            string `json:"text,omitempty"`
	QueuedMessageID string `json:"queuedMessageId,omitempty"`
	RequestID       string `json:"requestId,omitempty"`
}

// RequestBody carries only a request ID; the body may be empty.
type RequestBody struct {
	RequestID string `json:"requestId,omitempty"`
}

// RejectRequest rejects a tool call with a message the model sees.
type RejectRequest struct {
	Message   string `json:"message,omitempty"`
	RequestID string `json:"requestId,omitempty"`
}

// AnswerRequest answers a question.
type AnswerRequest struct {
	Answer    string `json:"answer"`
	RequestID string `json:"requestId,omitempty"`
}

// ExecutePlanRequest approves a plan revision.
type ExecutePlanRequest struct {
	Revision  int    `json:"revision"`
	RequestID string `json:"requestId,omitempty"`
}

// SettingsRequest replaces the session settings.
type SettingsRequest struct {
	Settings  client.SessionSettings `json:"settings"`
	RequestID string                 `json:"requestId,omitempty"`
}

// SnapshotResponse is a session's snapshot with the resume token that opens
// its event stream: while a turn runs, the token replays that turn's
// events, so a page rebuilds its live text.
type SnapshotResponse struct {
	Snapshot client.Snapshot `json:"snapshot"`
	// ResumeToken is empty when the gateway has no event hub.
	ResumeToken string `json:"resumeToken,omitempty"`
	// ActiveSteps are the Steps of the Agent's session Flow graph the
	// session is in, sorted; empty while it waits for a message.
	ActiveSteps []string `json:"activeSteps"`
}

// ErrorBody is every refusal's body.
type ErrorBody struct {
	// Reason is stable, for programs: bad_request, unauthenticated,
	// forbidden, authorization_unavailable, not_found, not_ready,
	// flow_type_conflict, invalid_token, expired_token,
	// invalid_image, invalid_settings, feature_not_in_effect, no_event_hub,
	// engine_error.
	Reason  string `json:"reason"`
	Message string `json:"message"`
}

// WaitingPath lists sessions waiting for a person across the caller's
// Agents; NamespaceWaitingPath across those of one namespace.
const (
	WaitingPath          = "/api/v1/waiting"
	NamespaceWaitingPath = "/api/v1/namespaces/{namespace}/waiting"
)

// WaitingResponse lists the sessions waiting in the searched Steps, newest
// first, of every Agent the caller may read sessions of.
type WaitingResponse struct {
	Sessions []WaitingSession `json:"sessions"`
	// Truncated reports sessions left out by the limit.
	Truncated bool `json:"truncated,omitempty"`
	// Unavailable are the Agents, readable by the caller, whose sessions
	// could not be searched; the list holds the others' client.
	Unavailable []UnavailableAgent `json:"unavailable,omitempty"`
}

// WaitingSession is one session waiting in a searched Step.
type WaitingSession struct {
	Namespace string    `json:"namespace"`
	Agent     string    `json:"agent"`
	SessionID string    `json:"sessionId"`
	Steps     []string  `json:"steps"`
	StartTime time.Time `json:"startTime"`
}

// UnavailableAgent is an Agent whose sessions could not be searched, with
// the reason an ErrorBody would carry.
type UnavailableAgent struct {
	Namespace string `json:"namespace"`
	Agent     string `json:"agent"`
	Reason    string `json:"reason"`
	Message   string `json:"message"`
}
