package client

import (
	"context"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"time"

	commonpb "go.temporal.io/api/common/v1"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/converter"

	"github.com/stepwise-run/stepwise/internal/session"
	"github.com/stepwise-run/stepwise/internal/tenancy"
)

// Steps a session waits in for a person.
const (
	StepAwaitToolApproval   = string(session.StepAwaitToolApproval)
	StepAwaitQuestionAnswer = string(session.StepAwaitQuestionAnswer)
)

// WaitingSession is a session found waiting in a Step.
type WaitingSession struct {
	SessionID string `json:"sessionId"`
	FlowType  string `json:"flowType"`
	// Steps are the searched Steps the session waits in.
	Steps []string `json:"steps,omitempty"`
	// StartTime is when the session started.
	StartTime time.Time `json:"startTime"`
}

// WaitingQuery narrows a search for waiting sessions.
type WaitingQuery struct {
	// Steps are the Steps searched; empty searches both Steps a session
	// waits in for a person.
	Steps []string
	// Limit bounds the sessions returned; 0 returns all.
	Limit int
}

// Waiting finds the Agent's running sessions that wait in the query's
// Steps, such as StepAwaitToolApproval, newest first; more reports
// sessions left out by the limit. It lists no other Agent's session. The
// search is eventually consistent: a session appears shortly after it
// starts waiting.
func (s *Sessions) Waiting(ctx context.Context, q WaitingQuery) (found []WaitingSession, more bool, err error) {
	steps := q.Steps
	if len(steps) == 0 {
		steps = []string{StepAwaitToolApproval, StepAwaitQuestionAnswer}
	}
	query, err := s.waitingQuery(steps)
	if err != nil {
		return nil, false, err
	}
	var token []byte
	for {
		resp, err := s.c.ListWorkflow(ctx, &workflowservice.ListWorkflowExecutionsRequest{Query: query, NextPageToken: token})
		if err != nil {
			return nil, false, fmt.Errorf("finding sessions of %s waiting in %s: %w", s.agent, strings.Join(steps, ", "), err)
		}
		for _, e := range resp.GetExecutions() {
			workflowID := e.GetExecution().GetWorkflowId()
			sessionID, ok := s.sessionIDOf(workflowID)
			recorded, hasOwner := recordedOwner(e.GetSearchAttributes())
			if !ok || !s.belongs(sessionID, workflowID, e.GetTaskQueue(), recorded, hasOwner) {
				continue
			}
			if q.Limit > 0 && len(found) == q.Limit {
				return found, true, nil
			}
			found = append(found, WaitingSession{
				SessionID: sessionID,
				FlowType:  e.GetType().GetName(),
				Steps:     activeSteps(e.GetSearchAttributes(), steps),
				StartTime: e.GetStartTime().AsTime(),
			})
		}
		if token = resp.GetNextPageToken(); len(token) == 0 {
			return found, false, nil
		}
	}
}

// sessionIDOf is the session ID of one of the Agent's workflows: its own
// names', or a shared one's.
func (s *Sessions) sessionIDOf(workflowID string) (string, bool) {
	if id, ok := s.own().SessionID(workflowID); ok {
		return id, true
	}
	return tenancy.Shared(s.agent.FlowType).SessionID(workflowID)
}

// waitingQuery is the visibility query of a search: the Agent's task
// queues, and on its own, the owner it recorded. Names are quoted into it,
// so one that could end its quotes is refused rather than escaped.
func (s *Sessions) waitingQuery(steps []string) (string, error) {
	quoted := make([]string, len(steps))
	for i, step := range steps {
		if !queryNamePattern.MatchString(step) {
			return "", fmt.Errorf("%q is not a Step name", step)
		}
		quoted[i] = "'" + step + "'"
	}
	var queues []string
	for _, q := range s.taskQueues() {
		if !queryNamePattern.MatchString(q) {
			return "", fmt.Errorf("%q is not a task queue name", q)
		}
		queues = append(queues, "'"+q+"'")
	}
	query := fmt.Sprintf("%s IN (%s) AND ExecutionStatus = 'Running' AND TaskQueue IN (%s)",
		tenancy.AttributeActiveSteps, strings.Join(quoted, ", "), strings.Join(queues, ", "))
	if owner := s.owner(); owner != nil {
		for _, v := range []string{owner.Namespace, owner.Agent} {
			if !queryNamePattern.MatchString(v) {
				return "", fmt.Errorf("%q is not an Agent's namespace or name", v)
			}
		}
		// A shared session may record no owner; belongs decides those.
		query += fmt.Sprintf(" AND (%s IS NULL OR (%s = '%s' AND %s = '%s'))",
			tenancy.AttributeNamespace, tenancy.AttributeNamespace, owner.Namespace, tenancy.AttributeAgent, owner.Agent)
	}
	// No ORDER BY: SQL visibility stores refuse it, and every store lists
	// running executions newest first.
	return query, nil
}

var queryNamePattern = regexp.MustCompile(`^[A-Za-z0-9_.:/-]{1,256}$`)

// activeSteps are those of searched a session's search attributes list.
func activeSteps(attrs *commonpb.SearchAttributes, searched []string) []string {
	return slices.DeleteFunc(ActiveSteps(attrs), func(s string) bool { return !slices.Contains(searched, s) })
}

// ActiveSteps are the Steps a session is in, sorted, from the search
// attributes a description or a visibility listing of the session carries;
// nil where the engine does not keep them.
func ActiveSteps(attrs *commonpb.SearchAttributes) []string {
	payload := attrs.GetIndexedFields()[tenancy.AttributeActiveSteps]
	if payload == nil {
		return nil
	}
	var active []string
	if err := converter.GetDefaultDataConverter().FromPayload(payload, &active); err != nil {
		return nil
	}
	return active
}
