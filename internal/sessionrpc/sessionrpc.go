// Package sessionrpc is the wire contract of the session workflow: the
// names of its updates and queries, the input that starts it, the requests
// whose shape the session package does not already give, the error type of
// a refusal, and the search attributes that record a session's owner.
// Clients and the workflow both import it, so a client links none of the
// workflow code.
package sessionrpc

import (
	"encoding/json"

	"go.temporal.io/sdk/temporal"

	"github.com/stepwise-run/stepwise/internal/session"
	"github.com/stepwise-run/stepwise/internal/tenancy"
)

// The session workflow's updates, one per RPC, and its queries.
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
)

// RejectedErrorType marks an RPC the session refused; clients turn it into
// false.
const RejectedErrorType = "stepwise.Rejected"

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
	// StepSearchEnabled keeps the active-Step search attribute
	// (tenancy.AttributeActiveSteps) current; the default.
	StepSearchEnabled StepSearchMode = ""
	// StepSearchDisabled never writes it, for namespaces where it is not
	// registered.
	StepSearchDisabled StepSearchMode = "disabled"
)

// SettingsRequest is update_session_settings' input: the settings that
// replace the stored ones, a JSON object.
type SettingsRequest struct {
	Settings json.RawMessage `json:"settings"`
}

// The typed keys of the owner search attributes.
var (
	ownerNamespaceKey = temporal.NewSearchAttributeKeyKeyword(tenancy.AttributeNamespace)
	ownerAgentKey     = temporal.NewSearchAttributeKeyKeyword(tenancy.AttributeAgent)
	ownerAgentUIDKey  = temporal.NewSearchAttributeKeyKeyword(tenancy.AttributeAgentUID)
)

// OwnerAttributes are the search attributes that record a session's owner,
// as a client sets them when it starts the session.
func OwnerAttributes(o tenancy.Owner) temporal.SearchAttributes {
	return temporal.NewSearchAttributes(OwnerUpdates(o)...)
}

// OwnerUpdates are the same attributes as updates, as the workflow records
// them on a session that began without.
func OwnerUpdates(o tenancy.Owner) []temporal.SearchAttributeUpdate {
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
