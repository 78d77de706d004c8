// Package engine binds the session Flow to Temporal: one workflow per
// session under the Agent's Flow type, an activity per call Step, workflow
// code for the waiting Steps and failure routes, updates for the RPCs,
// queries for snapshots, and a search attribute of the Steps a session waits
// in. The session's rules live in package session; this package only maps
// them onto the engine.
package engine

import (
	"errors"
	"time"

	"go.temporal.io/sdk/temporal"

	"github.com/stepwise-run/stepwise/internal/session"
	"github.com/stepwise-run/stepwise/internal/sessionrpc"
	"github.com/stepwise-run/stepwise/internal/tenancy"
)

// The workflow's own queries, between its activities and itself; the RPCs'
// names are package sessionrpc's.
const (
	// queryTurnContext is how a RunModel attempt loads committed state, so
	// model input never travels in activity inputs.
	queryTurnContext = "stepwise_turn_context"
	// queryToolCallControl is how a tool Step learns, before its tool first
	// starts, that the turn was steered or cancelled.
	queryToolCallControl = "stepwise_tool_call_control"
)

// activeStepsKey is the typed key of the active-Step search attribute.
var activeStepsKey = temporal.NewSearchAttributeKeyKeywordList(tenancy.AttributeActiveSteps)

// rejected turns a session rejection into the error an update validator
// returns.
func rejected(err error) error {
	var r *session.Rejection
	if errors.As(err, &r) {
		return temporal.NewNonRetryableApplicationError(r.Reason, sessionrpc.RejectedErrorType, nil)
	}
	return err
}

// ToolCallControlRequest asks whether a tool call may start.
type ToolCallControlRequest struct {
	TurnID     string `json:"turnId"`
	ToolCallID string `json:"toolCallId"`
}

// toolNotStartedType marks a tool Step attempt that failed before its tool
// started, so its failure is recorded as "did not run".
const toolNotStartedType = "stepwise.ToolNotStarted"

// invalidImageType marks a tool Step attempt whose result carried an image
// reference a session cannot store.
const invalidImageType = "stepwise.InvalidImage"

// Timings are the Step timeouts and retry limits. The defaults are the
// Step definitions'; a shorter heartbeat timeout finds a dead worker sooner
// at the cost of more heartbeats.
type Timings struct {
	// ModelAttempt bounds one RunModel attempt.
	ModelAttempt time.Duration
	// ModelWithin bounds all RunModel attempts together.
	ModelWithin time.Duration
	// ModelAttempts is RunModel's attempt count.
	ModelAttempts int32
	// ToolAttempt bounds one tool Step attempt.
	ToolAttempt time.Duration
	// ToolAttempts is CallTool's attempt count.
	ToolAttempts int32
	// ToolQueueTimeout is how long a tool Step waits for a worker before
	// it is recorded as not run; zero waits as long as it takes, so an
	// approved call survives an outage of every worker.
	ToolQueueTimeout time.Duration
	// Heartbeat is the heartbeat timeout of every call Step; the Step
	// heartbeats in the background six times as often.
	Heartbeat time.Duration
	// RetryInterval is the first wait between attempts.
	RetryInterval time.Duration
}

// DefaultTimings are the Step limits, read from the Step definitions the
// published Flow graph shows, so the graph and the engine never differ.
func DefaultTimings() Timings {
	model, _ := session.Step(session.StepRunModel)
	tool, _ := session.Step(session.StepCallTool)
	return Timings{
		ModelAttempt: model.AttemptTimeout, ModelWithin: model.Retry.Within,
		ModelAttempts: int32(model.Retry.MaxAttempts), //nolint:gosec // a handful of attempts
		ToolAttempt:   tool.AttemptTimeout,
		ToolAttempts:  int32(tool.Retry.MaxAttempts), //nolint:gosec // a handful of attempts
		Heartbeat:     model.HeartbeatTimeout, RetryInterval: time.Second,
	}
}
