package client

import (
	"context"
	"errors"
	"fmt"
	"sync"

	commonpb "go.temporal.io/api/common/v1"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/converter"

	agentsv1 "github.com/stepwise-run/stepwise/api/v1alpha1"
	"github.com/stepwise-run/stepwise/internal/sessionrpc"
	"github.com/stepwise-run/stepwise/internal/tenancy"
)

// Agent is the Agent whose sessions a Sessions drives, as its resource and
// status name it. Every Kubernetes namespace is a tenant of the engine:
// a session belongs to the Agent that started it, and a Sessions reaches
// only its own Agent's sessions, whatever session ID it is given.
type Agent struct {
	// Namespace and Name name the Agent resource; UID is its UID, which
	// the sessions it starts record. With no namespace, the Sessions
	// drives the shared sessions of a Flow type that workers of engine
	// 0.7.0 and earlier run, and nothing else.
	Namespace, Name, UID string
	// FlowType is the Agent's Flow type.
	FlowType string
	// TaskQueue is where new sessions start: the Agent's
	// status.taskQueue. Empty starts them on the task queue of the Agent's
	// own names, stepwise/<namespace>/<flowType>.
	TaskQueue string
	// SharedTaskQueue is the Agent's status.sharedTaskQueue: set while
	// the Agent's workers still serve sessions started under the shared
	// names of engine 0.7.0 and earlier, which are then reached too.
	SharedTaskQueue string
}

// AgentOf is an Agent resource as a Sessions addresses it: its names, and
// where its status says new sessions start and old ones are still served.
func AgentOf(a *agentsv1.Agent) Agent {
	return Agent{
		Namespace: a.Namespace, Name: a.Name, UID: string(a.UID), FlowType: a.Spec.FlowType,
		TaskQueue: a.Status.TaskQueue, SharedTaskQueue: a.Status.SharedTaskQueue,
	}
}

// String names the Agent for messages.
func (a Agent) String() string {
	if a.Namespace == "" {
		return "Flow type " + a.FlowType
	}
	return "Agent " + a.Namespace + "/" + a.Name
}

// ErrSessionNotFound is a session ID the Agent has no session of: none
// exists, or another Agent's session has it. The two read the same, so no
// one learns of another Agent's sessions.
var ErrSessionNotFound = errors.New("session not found")

// ErrInvalidSessionID is a session ID that is not 1 to 256 letters, digits
// and ._:@=+-, starting with a letter or digit. Nothing was sent.
var ErrInvalidSessionID = errors.New("invalid session ID")

// sessionRef is where one session runs: its workflow ID and task queue.
type sessionRef struct {
	workflowID string
	taskQueue  string
}

// resolver finds the sessions of one Agent, remembering those it found:
// a session's workflow ID never changes.
type resolver struct {
	mu    sync.Mutex
	found map[string]sessionRef
}

// own are the Agent's own names: its namespace's, or the shared names for
// an Agent named by Flow type alone.
func (s *Sessions) own() tenancy.Names {
	if s.agent.Namespace == "" {
		return tenancy.Shared(s.agent.FlowType)
	}
	return tenancy.Tenant(s.agent.Namespace, s.agent.FlowType)
}

// owner is the owner the Agent's sessions record; nil for the shared
// sessions of an Agent named by Flow type alone.
func (s *Sessions) owner() *tenancy.Owner {
	if s.agent.Namespace == "" {
		return nil
	}
	return &tenancy.Owner{Namespace: s.agent.Namespace, Agent: s.agent.Name, AgentUID: s.agent.UID}
}

// sharedQueue is the shared task queue the Agent still serves, or "": its
// status names it as the shared task queue, or as the task queue itself
// while its workers, of engine 0.7.0 or earlier, know no other.
func (s *Sessions) sharedQueue() string {
	shared := tenancy.Shared(s.agent.FlowType).TaskQueue()
	if s.agent.Namespace == "" || s.agent.TaskQueue == shared {
		return shared
	}
	return s.agent.SharedTaskQueue
}

// startNames are the names new sessions start under: the shared names while
// the Agent's status still starts them on the shared task queue.
func (s *Sessions) startNames() tenancy.Names {
	if shared := tenancy.Shared(s.agent.FlowType); s.agent.TaskQueue == shared.TaskQueue() {
		return shared
	}
	return s.own()
}

// taskQueues are the task queues the Agent's workers poll: its own, and
// the shared one while they serve it.
func (s *Sessions) taskQueues() []string {
	own := s.own().TaskQueue()
	if shared := s.sharedQueue(); shared != "" && shared != own {
		return []string{own, shared}
	}
	return []string{own}
}

// Session describes one of the Agent's sessions as the engine holds it.
type Session struct {
	// ID is the session ID.
	ID string
	// WorkflowID is the engine's ID of the session.
	WorkflowID string
	// TaskQueue is where it runs.
	TaskQueue string
	// ActiveSteps are the Steps it is in, sorted; nil where the engine
	// does not keep them.
	ActiveSteps []string
	// Running is false once the session ended.
	Running bool
}

// Describe finds one of the Agent's sessions: ErrSessionNotFound when the
// Agent has no session of that ID.
func (s *Sessions) Describe(ctx context.Context, sessionID string) (Session, error) {
	if err := tenancy.CheckSessionID(sessionID); err != nil {
		return Session{}, fmt.Errorf("%w: %w", ErrInvalidSessionID, err)
	}
	for _, workflowID := range s.candidates(sessionID) {
		desc, err := s.c.DescribeWorkflow(ctx, workflowID, "")
		var notFound *serviceerror.NotFound
		switch {
		case errors.As(err, &notFound):
			continue
		case err != nil:
			return Session{}, fmt.Errorf("reading session %s of %s: %w", sessionID, s.agent, err)
		}
		recorded, hasOwner := sessionrpc.RecordedOwner(desc.TypedSearchAttributes)
		if !s.belongs(sessionID, workflowID, desc.TaskQueueName, recorded, hasOwner) {
			continue
		}
		s.remember(sessionID, sessionRef{workflowID: workflowID, taskQueue: desc.TaskQueueName})
		return Session{
			ID: sessionID, WorkflowID: workflowID, TaskQueue: desc.TaskQueueName,
			ActiveSteps: ActiveSteps(desc.RawResponse.GetWorkflowExecutionInfo().GetSearchAttributes()),
			Running:     desc.RawResponse.GetWorkflowExecutionInfo().GetCloseTime() == nil,
		}, nil
	}
	return Session{}, s.notFound(sessionID)
}

func (s *Sessions) notFound(sessionID string) error {
	return fmt.Errorf("%w: %s has no session %s", ErrSessionNotFound, s.agent, sessionID)
}

// candidates are the workflow IDs a session of the Agent may have: its own
// names' first, then the shared ID, which sessions started under the
// shared names keep after they moved to the Agent's own task queue.
func (s *Sessions) candidates(sessionID string) []string {
	own := s.own().WorkflowID(sessionID)
	if own == sessionID {
		return []string{own}
	}
	return []string{own, sessionID}
}

// belongs decides whether a workflow found under a candidate ID is the
// Agent's session. The task queue is the engine's own record of whose
// workers run it, which no request of another Agent can change, and the
// owner the session recorded must be this Agent. A shared session that
// records no owner, started before owners were recorded, is the Agent's
// only on the shared task queue its status still names, which only the
// Agent that holds the shared names has.
func (s *Sessions) belongs(sessionID, workflowID, taskQueue string, recorded tenancy.Owner, hasOwner bool) bool {
	ownQueue := taskQueue == s.own().TaskQueue()
	sharedQueue := s.sharedQueue() != "" && taskQueue == s.sharedQueue()
	owner := s.owner()
	switch {
	case owner == nil:
		// The shared sessions of a Flow type, for an Agent named by it
		// alone: never one an Agent of a namespace owns.
		return ownQueue && !hasOwner
	case hasOwner:
		return owner.Owns(recorded) && (ownQueue || sharedQueue)
	}
	return sharedQueue && workflowID == sessionID
}

func (s *Sessions) remember(sessionID string, ref sessionRef) {
	s.resolved.mu.Lock()
	defer s.resolved.mu.Unlock()
	if s.resolved.found == nil {
		s.resolved.found = map[string]sessionRef{}
	}
	s.resolved.found[sessionID] = ref
}

// workflowID is the engine's ID of one of the Agent's sessions, found once
// and then remembered; ErrSessionNotFound for another Agent's or none.
func (s *Sessions) workflowID(ctx context.Context, sessionID string) (string, error) {
	s.resolved.mu.Lock()
	ref, ok := s.resolved.found[sessionID]
	s.resolved.mu.Unlock()
	if ok {
		return ref.workflowID, nil
	}
	session, err := s.Describe(ctx, sessionID)
	if err != nil {
		return "", err
	}
	return session.WorkflowID, nil
}

// recordedOwner reads the owner search attributes of a visibility listing.
func recordedOwner(attrs *commonpb.SearchAttributes) (tenancy.Owner, bool) {
	read := func(name string) (string, bool) {
		payload := attrs.GetIndexedFields()[name]
		if payload == nil {
			return "", false
		}
		var v string
		if err := converter.GetDefaultDataConverter().FromPayload(payload, &v); err != nil {
			return "", false
		}
		return v, v != ""
	}
	ns, hasNS := read(tenancy.AttributeNamespace)
	agent, hasAgent := read(tenancy.AttributeAgent)
	uid, _ := read(tenancy.AttributeAgentUID)
	return tenancy.Owner{Namespace: ns, Agent: agent, AgentUID: uid}, hasNS && hasAgent
}
