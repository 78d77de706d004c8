// Package demo drives the support Agent's demo session through the Go
// client, for the local default, the cluster run and the end-to-end suite:
// a message asks for a refund, the model looks the order up and asks to
// refund it, a person approves, and the session replies.
package demo

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	sessions "github.com/stepwise-run/stepwise/pkg/client"
)

// SessionID is the demo session's ID.
const SessionID = "demo-session"

// Refund sends message to the session (starting it when start is set),
// approves the refund the model asks for, waits for the reply, prints the
// session's messages to out and returns its snapshot. It finds the session
// among the Agent's sessions waiting for a person on the way.
func Refund(ctx context.Context, out io.Writer, s *sessions.Sessions,
	id, message string, start bool) (sessions.Snapshot, error) {
	before := 0
	if start {
		step(out, "starting session %s: %q", id, message)
		if ok, err := s.Start(ctx, id, message); err != nil || !ok {
			return sessions.Snapshot{}, fmt.Errorf("starting session %s: started=%v: %w", id, ok, err)
		}
	} else {
		snap, err := s.Snapshot(ctx, id)
		if err != nil {
			return sessions.Snapshot{}, err
		}
		before = len(snap.Messages)
		step(out, "sending to session %s: %q", id, message)
		if ok, err := s.Send(ctx, id, message); err != nil || !ok {
			return sessions.Snapshot{}, fmt.Errorf("sending to session %s: accepted=%v: %w", id, ok, err)
		}
	}
	var interrupt sessions.Interrupt
	if err := Poll(ctx, func() (bool, error) {
		snap, err := s.Snapshot(ctx, id)
		if err != nil || len(snap.PendingInterrupts) == 0 {
			return false, err
		}
		interrupt = snap.PendingInterrupts[0]
		return true, nil
	}); err != nil {
		return sessions.Snapshot{}, fmt.Errorf("waiting for the approval: %w", err)
	}
	fmt.Fprintf(out, "the session waits for approval of %s %s (interrupt %s)\n", interrupt.ToolName, interrupt.Arguments, interrupt.ID)
	if err := Poll(ctx, func() (bool, error) {
		found, _, err := s.Waiting(ctx, sessions.WaitingQuery{Steps: []string{sessions.StepAwaitToolApproval}})
		for _, w := range found {
			if w.SessionID == id {
				fmt.Fprintf(out, "found waiting for a person: %s %s in %s\n", w.FlowType, w.SessionID, sessions.StepAwaitToolApproval)
				return true, nil
			}
		}
		return false, err
	}); err != nil {
		return sessions.Snapshot{}, fmt.Errorf("searching for sessions waiting for approval: %w", err)
	}
	step(out, "approving %s", interrupt.ID)
	if ok, err := s.Approve(ctx, id, interrupt.ID); err != nil || !ok {
		return sessions.Snapshot{}, fmt.Errorf("approving: ok=%v: %w", ok, err)
	}
	var snap sessions.Snapshot
	if err := Poll(ctx, func() (bool, error) {
		var err error
		snap, err = s.Snapshot(ctx, id)
		return err == nil && snap.State != nil && snap.State.ActiveTurnID == "" && len(snap.PendingInterrupts) == 0 &&
			len(snap.Messages) > before+1, err
	}); err != nil {
		return sessions.Snapshot{}, fmt.Errorf("waiting for the reply: %w", err)
	}
	step(out, "the session's messages")
	for _, m := range snap.Messages {
		text := m.Text
		for _, call := range m.ToolCalls {
			text = strings.TrimSpace(text + fmt.Sprintf(" [calls %s %s]", call.Name, call.Arguments))
		}
		fmt.Fprintf(out, "  %3d %-9s %s\n", m.Sequence, m.Role, text)
	}
	fmt.Fprintf(out, "usage: %d model calls, %d input and %d output tokens\n", snap.Usage.ModelCalls, snap.Usage.InputTokens, snap.Usage.OutputTokens)
	return snap, nil
}

// Poll calls cond until it reports true or ctx ends, returning the last
// error cond gave with the context's.
func Poll(ctx context.Context, cond func() (bool, error)) error {
	var last error
	for {
		ok, err := cond()
		if ok {
			return nil
		}
		last = err
		select {
		case <-ctx.Done():
			return errors.Join(ctx.Err(), last)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func step(out io.Writer, format string, args ...any) {
	fmt.Fprintf(out, "\n==> "+format+"\n", args...)
}
