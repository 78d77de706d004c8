package engine

import (
	"context"
	"fmt"

	"go.temporal.io/sdk/client"

	"github.com/stepwise-run/stepwise/internal/session"
)

// StateLoader loads committed session state for the call Steps.
type StateLoader interface {
	// LoadTurn loads what a RunModel attempt works from.
	LoadTurn(ctx context.Context, sessionID, runID, turnID string) (session.TurnContext, error)
	// ToolCallControl says whether a tool call may start: empty, or the
	// reason a steer or cancel_turn settled it.
	ToolCallControl(ctx context.Context, sessionID, runID, turnID, toolCallID string) (string, error)
}

// QueryLoader loads committed state by querying the session workflow, which
// answers from the worker that holds it.
type QueryLoader struct {
	Client client.Client
}

// LoadTurn queries the session for the turn's committed state.
func (q QueryLoader) LoadTurn(ctx context.Context, sessionID, runID, turnID string) (session.TurnContext, error) {
	resp, err := q.Client.QueryWorkflow(ctx, sessionID, runID, queryTurnContext, turnID)
	if err != nil {
		return session.TurnContext{}, err
	}
	var turn session.TurnContext
	if err := resp.Get(&turn); err != nil {
		return session.TurnContext{}, fmt.Errorf("decoding: %w", err)
	}
	return turn, nil
}

// ToolCallControl queries the session whether a tool call may start.
func (q QueryLoader) ToolCallControl(ctx context.Context, sessionID, runID, turnID, toolCallID string) (string, error) {
	resp, err := q.Client.QueryWorkflow(ctx, sessionID, runID, queryToolCallControl, ToolCallControlRequest{TurnID: turnID, ToolCallID: toolCallID})
	if err != nil {
		return "", err
	}
	var reason string
	if err := resp.Get(&reason); err != nil {
		return "", fmt.Errorf("decoding: %w", err)
	}
	return reason, nil
}

// The queries a StateLoader other than QueryLoader answers, for tests that
// run the workflow in a test environment.
const (
	QueryTurnContext     = queryTurnContext
	QueryToolCallControl = queryToolCallControl
)
