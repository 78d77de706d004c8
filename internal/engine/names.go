// Package engine binds the session Flow to Temporal: one workflow per
// session under the Agent's Flow type, an activity per effect Step, workflow
// code for the waiting Steps and failure routes, updates for the RPCs,
// queries for snapshots, and a search attribute of the Steps a session waits
// in. The session's rules live in package session; this package only maps
// them onto the engine.
package engine

import (
	"encoding/json"
	"errors"
	"time"

	"go.temporal.io/sdk/temporal"

	"github.com/stepwise-run/stepwise/internal/contract"
	"github.com/stepwise-run/stepwise/internal/session"
	"github.com/stepwise-run/stepwise/internal/tenancy"
)

// RPC names: Temporal updates and queries of the session workflow.
const (
	UpdateStartSession        = "start_session"
	UpdateSendUserMessage     = "send_user_message"
	UpdateResolveInterrupt    = "resolve_interrupt"
	UpdateAnswerQuestion      = "answer_question"
	UpdateSessionSettings     = "update_session_settings"
	UpdateSteerUserMessage    = "steer_user_message"
	UpdateDeleteQueuedMessage = "delete_queued_message"
	UpdateCancelTurn          = "cancel_turn"
	UpdateExecutePlan         = "execute_plan"
	QuerySnapshot             = "get_agent_snapshot"
	QueryListMessages         = "list_agent_messages"
	// queryTurnContext is how a RunModel attempt loads committed state, so
	// model input never travels in activity inputs.
	queryTurnContext = "stepwise_turn_context"
	// queryToolCallControl is how a tool Step learns, before its tool first
	// starts, that the turn was steered or cancelled.
	queryToolCallControl = "stepwise_tool_call_control"
)

// SignalMoveToCurrentVersion is the session's move signal, whose name the
// operator shares from internal/contract.
const SignalMoveToCurrentVersion = contract.SignalMoveToCurrentVersion

// ActiveStepsAttribute is the KeywordList search attribute of the Steps a
// session is in, shared by every Flow type so one query finds every session
// waiting for a person across agents.
const ActiveStepsAttribute = tenancy.AttributeActiveSteps

// activeStepsKey is the typed key of ActiveStepsAttribute.
var activeStepsKey = temporal.NewSearchAttributeKeyKeywordList(ActiveStepsAttribute)

// The typed keys of the owner search attributes.
var (
	ownerNamespaceKey = temporal.NewSearchAttributeKeyKeyword(tenancy.AttributeNamespace)
	ownerAgentKey     = temporal.NewSearchAttributeKeyKeyword(tenancy.AttributeAgent)
	ownerAgentUIDKey  = temporal.NewSearchAttributeKeyKeyword(tenancy.AttributeAgentUID)
)

// OwnerAttributes are the search attributes that record a session's owner,
// as a client sets them when it starts the session.
func OwnerAttributes(o tenancy.Owner) temporal.SearchAttributes {
	return temporal.NewSearchAttributes(ownerUpdates(o)...)
}

func ownerUpdates(o tenancy.Owner) []temporal.SearchAttributeUpdate {
	updates := []temporal.SearchAttributeUpdate{ownerNamespaceKey.ValueSet(o.Namespace), ownerAgentKey.ValueSet(o.Agent)}
	if o.AgentUID != "" {
		updates = append(updates, ownerAgentUIDKey.ValueSet(o.AgentUID))
	}
	return updates
}

// RecordedOwner reads the owner a session's search attributes record; ok
// is false for a session that records none.
func RecordedOwner(attrs temporal.SearchAttributes) (owner tenancy.Owner, ok bool) {
	ns, hasNS := attrs.GetKeyword(ownerNamespaceKey)
	agent, hasAgent := attrs.GetKeyword(ownerAgentKey)
	uid, _ := attrs.GetKeyword(ownerAgentUIDKey)
	return tenancy.Owner{Namespace: ns, Agent: agent, AgentUID: uid}, hasNS && hasAgent
}

// RejectedErrorType marks an RPC the session refused; clients turn it into
// false.
const RejectedErrorType = "stepwise.Rejected"

// rejected turns a session rejection into the error an update validator
// returns.
func rejected(err error) error {
	var r *session.Rejection
	if errors.As(err, &r) {
		return temporal.NewNonRetryableApplicationError(r.Reason, RejectedErrorType, nil)
	}
	return err
}

// SessionInput starts a session workflow.
type SessionInput struct {
	Start session.StartInput `json:"start"`
	// SessionID is the session's ID, which its workflow ID carries with the
	// Agent's namespace and Flow type (tenancy.Names); empty for a session
	// under the shared names, whose workflow ID is its session ID.
	SessionID string `json:"sessionId,omitempty"`
	// Owner is the Agent that owns the session, recorded in its search
	// attributes; nil under the shared names, where a session started
	// before owners were recorded has none.
	Owner *tenancy.Owner `json:"owner,omitempty"`
	// StepSearch says whether the session keeps the active-Step search
	// attribute; the zero value keeps it.
	StepSearch StepSearchMode `json:"stepSearch,omitempty"`
	// Carried is the state a session carries into a new run of its
	// workflow when it continues as new; nil for a new session.
	Carried *CarriedState `json:"carried,omitempty"`
}

// CarriedState is what a new run of a session starts from.
type CarriedState struct {
	State *session.State `json:"state"`
	// StepSeq continues the numbering of Step executions, so events of the
	// new run never share a Step execution ID with the old run's.
	StepSeq int `json:"stepSeq"`
}

// StepSearchMode says whether a session is searchable by the Steps it is in.
type StepSearchMode string

// Step search modes.
const (
	// StepSearchEnabled keeps ActiveStepsAttribute current; the default.
	StepSearchEnabled StepSearchMode = ""
	// StepSearchDisabled never writes it, for namespaces where it is not
	// registered.
	StepSearchDisabled StepSearchMode = "disabled"
)

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

// SettingsRequest is update_session_settings' input: the settings that
// replace the stored ones, a JSON object.
type SettingsRequest struct {
	Settings json.RawMessage `json:"settings"`
}

// SendRequest is send_user_message's input.
type SendRequest = session.SendRequest

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
	// Heartbeat is the heartbeat timeout of every effect Step; the Step
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
