// Package tenancy derives the names an Agent's sessions and workers have on
// the engine. Every Kubernetes namespace is a tenant, and one Temporal
// namespace may serve many of them: from engine 0.8.0 on, every name on the
// engine (the task queue, the Worker Deployment, the session's workflow ID,
// the spend counter) carries the Agent's Kubernetes namespace as well as its
// Flow type, so two namespaces never share one, whatever they name.
//
// Workers of engine 0.7.0 and earlier know only the shared names, one per
// Flow type for the whole Temporal namespace; they are kept for the Agents
// that still run such workers, until their sessions have moved to the
// tenant names.
//
// The package is plain Go, imported by the operator, the workers, the client
// and the gateway, so all four derive the same names.
package tenancy

import (
	"fmt"
	"regexp"
	"strings"
)

// Names are the names of one Agent's sessions and workers on its engine.
// The zero value is not valid: use Tenant or Shared.
type Names struct {
	// Namespace is the Agent's Kubernetes namespace; empty for the shared
	// names.
	Namespace string
	// FlowType is the Agent's Flow type.
	FlowType string
}

// Tenant returns the names of an Agent in a Kubernetes namespace.
func Tenant(namespace, flowType string) Names {
	return Names{Namespace: namespace, FlowType: flowType}
}

// Shared returns the names workers of engine 0.7.0 and earlier use: one per
// Flow type for the whole Temporal namespace.
func Shared(flowType string) Names { return Names{FlowType: flowType} }

// IsShared says whether these are the shared names.
func (n Names) IsShared() bool { return n.Namespace == "" }

const (
	// taskQueuePrefix starts every task queue an Agent's workers poll.
	taskQueuePrefix = "stepwise/"
	// sharedCounterPrefix starts a shared spend counter's workflow ID. No
	// session ID holds a "/", so no shared session can take it.
	sharedCounterPrefix = "stepwise-spend-counter/"
	// tenantCounterPrefix starts a tenant spend counter's workflow ID. A
	// tenant session's workflow ID starts with a Kubernetes namespace,
	// which holds no ".", so none can take it.
	tenantCounterPrefix = "stepwise.spend-counter/"
)

// TaskQueue is the task queue the Agent's workers poll and its sessions
// run on: stepwise/<namespace>/<flowType>, or stepwise/<flowType> for the
// shared names.
func (n Names) TaskQueue() string {
	if n.IsShared() {
		return taskQueuePrefix + n.FlowType
	}
	return taskQueuePrefix + n.Namespace + "/" + n.FlowType
}

// WorkerDeployment is the Temporal Worker Deployment the Agent's versioned
// workers join: the task queue's name, which holds no ".", the one
// character a Worker Deployment name may not.
func (n Names) WorkerDeployment() string { return n.TaskQueue() }

// WorkflowID is the engine's ID of one of the Agent's sessions:
// <namespace>/<flowType>/<sessionID>, so every Agent's session IDs are its
// own; under the shared names, the session ID itself.
func (n Names) WorkflowID(sessionID string) string {
	if n.IsShared() {
		return sessionID
	}
	return n.workflowIDPrefix() + sessionID
}

func (n Names) workflowIDPrefix() string { return n.Namespace + "/" + n.FlowType + "/" }

// SessionID is the session ID a workflow ID of these names carries; ok is
// false for a workflow ID that is not one of theirs.
func (n Names) SessionID(workflowID string) (sessionID string, ok bool) {
	if n.IsShared() {
		return workflowID, CheckSessionID(workflowID) == nil
	}
	id, ok := strings.CutPrefix(workflowID, n.workflowIDPrefix())
	return id, ok && CheckSessionID(id) == nil
}

// SpendCounterID is the workflow ID of the Agent's spend counter.
func (n Names) SpendCounterID() string {
	if n.IsShared() {
		return sharedCounterPrefix + n.FlowType
	}
	return tenantCounterPrefix + n.Namespace + "/" + n.FlowType
}

// String names the names for messages: the task queue says it all.
func (n Names) String() string { return n.TaskQueue() }

// sessionIDPattern is what a session ID may hold: safe in a URL path
// segment and a log line, and never a "/", so a session ID can be no other
// session's workflow ID.
var sessionIDPattern = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._:@=+-]{0,255}$`)

// CheckSessionID refuses a session ID that is not 1 to 256 letters, digits
// and ._:@=+-, starting with a letter or digit.
func CheckSessionID(id string) error {
	if !sessionIDPattern.MatchString(id) {
		return fmt.Errorf("%q is not a session ID: 1 to 256 letters, digits and ._:@=+-, starting with a letter or digit", id)
	}
	return nil
}

// AttributeActiveSteps is the KeywordList search attribute of the Steps a
// session is in, shared by every Flow type, so one query finds the
// sessions waiting for a person.
const AttributeActiveSteps = "ActiveStepTypes"

// Search attributes that record, when a session starts, the Agent that owns
// it. The operator registers them on every engine it runs Agents on; the
// client and the gateway serve a session only to the Agent they name.
const (
	AttributeNamespace = "StepwiseAgentNamespace"
	AttributeAgent     = "StepwiseAgentName"
	AttributeAgentUID  = "StepwiseAgentUID"
)

// Owner is the Agent that owns a session.
type Owner struct {
	// Namespace is the Agent's Kubernetes namespace.
	Namespace string `json:"namespace"`
	// Agent is the Agent's name.
	Agent string `json:"agent"`
	// AgentUID is the Agent's UID: which Agent of that name started the
	// session.
	AgentUID string `json:"agentUID,omitempty"`
}

// Owns says whether a session recorded as owned by recorded belongs to the
// Agent o names: the same namespace and Agent name. A session outlives an
// Agent deleted and created again under its name, as its workers take it
// up again, so the UID records which Agent started it without deciding.
func (o Owner) Owns(recorded Owner) bool {
	return o.Namespace != "" && o.Agent != "" && o.Namespace == recorded.Namespace && o.Agent == recorded.Agent
}
