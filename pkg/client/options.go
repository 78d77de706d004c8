package client

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"strings"

	"github.com/stepwise-run/stepwise/internal/sessionrpc"
)

// RequestOption changes one request to a session: ExecutePlan, Steer,
// SteerQueued, DeleteQueued, CancelTurn, Approve, Reject, Answer and
// UpdateSettings take it. WithRequestID is one.
type RequestOption interface {
	applyToRequest(o *requestOptions)
}

// StartOption changes how Start starts a session: WithRequestID,
// WithSettings and WithoutStepSearch.
type StartOption interface {
	applyToStart(o *startOptions)
}

// SendOption changes how Send sends a message: WithRequestID and
// InPlanMode.
type SendOption interface {
	applyToSend(o *sendOptions)
}

// requestOptions are what every request takes.
type requestOptions struct {
	requestID string
}

type startOptions struct {
	requestOptions
	stepSearch sessionrpc.StepSearchMode
	settings   SessionSettings
}

type sendOptions struct {
	requestOptions
	planMode bool
	images   []ImageReference
}

// RequestIDOption names a request; see WithRequestID.
type RequestIDOption struct{ id string }

func (r RequestIDOption) applyToRequest(o *requestOptions) { o.requestID = r.id }
func (r RequestIDOption) applyToStart(o *startOptions)     { o.requestID = r.id }
func (r RequestIDOption) applyToSend(o *sendOptions)       { o.requestID = r.id }

// WithRequestID names a request, so that sending it again is the same
// request: a retry after an error the caller cannot judge, such as
// ErrWaitingForWorker or a lost connection, learns the first call's outcome
// instead of making a second request. Without it (or with an empty ID) each
// call gets a random ID, which a PendingError reports. Use one ID for one request only; the
// same ID on another kind of request is another request.
func WithRequestID(id string) RequestIDOption {
	return RequestIDOption{id: id}
}

type startOptionFunc func(*startOptions)

func (f startOptionFunc) applyToStart(o *startOptions) { f(o) }

type sendOptionFunc func(*sendOptions)

func (f sendOptionFunc) applyToSend(o *sendOptions) { f(o) }

// WithSettings starts the session with session settings, which its first
// turn uses. Start refuses settings beyond MaxSessionSettingsBytes before it
// sends anything.
func WithSettings(settings SessionSettings) StartOption {
	return startOptionFunc(func(o *startOptions) { o.settings = settings })
}

// WithoutStepSearch starts a session that never writes the ActiveStepTypes
// search attribute, for a namespace where it is not registered. Such a
// session is not found by Waiting.
func WithoutStepSearch() StartOption {
	return startOptionFunc(func(o *startOptions) { o.stepSearch = sessionrpc.StepSearchDisabled })
}

// InPlanMode sends a message that starts a planning turn: the model may only
// write the plan, which the user then reviews and approves with
// ExecutePlan. The Agent must enable plan mode.
func InPlanMode() SendOption {
	return sendOptionFunc(func(o *sendOptions) { o.planMode = true })
}

// ErrInvalidImage refuses a Send whose image references could never be
// stored: more than 20, or one that is not a well-formed reference. Nothing
// was sent.
var ErrInvalidImage = errors.New("invalid image reference")

// WithImages sends images with the message: references to images already
// in the Agent's media store, at most 20. Send checks each reference before
// it sends, and the session refuses images when its Agent has no media
// store or a reference is not in it.
func WithImages(images ...ImageReference) SendOption {
	return sendOptionFunc(func(o *sendOptions) { o.images = append(o.images, images...) })
}

// resolveRequestID returns the caller's request ID, else a random one.
func resolveRequestID(id string) (string, error) {
	if id == "" {
		b := make([]byte, 16)
		_, _ = rand.Read(b)
		return hex.EncodeToString(b), nil
	}
	if strings.TrimSpace(id) == "" || len(id) > maxRequestIDBytes {
		return "", errors.New("a request ID must not be blank and must be at most 200 bytes")
	}
	return id, nil
}

// maxRequestIDBytes keeps the engine's update ID, the request name and the
// request ID, well within the engine's limits.
const maxRequestIDBytes = 200
