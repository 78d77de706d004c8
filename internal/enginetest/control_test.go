package enginetest

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stepwise-run/stepwise/pkg/client"
)

// TestASteerDuringAToolCallLetsTheToolFinishAndThenStartsTheSteeredTurn
// steers while a read runs in the worker: the read runs to its end once,
// its result is stored, and the steered message starts the next turn.
func TestASteerDuringAToolCallLetsTheToolFinishAndThenStartsTheSteeredTurn(t *testing.T) {
	s := NewStack(t, "SteerTool")
	sessions, _, gate := stopAtGate(t, s, "read_a")
	ctx := context.Background()
	if ok, err := sessions.Steer(ctx, "s1", "use staging"); !ok || err != nil {
		t.Fatalf("Steer = %v, %v", ok, err)
	}
	snap, err := sessions.Snapshot(ctx, "s1")
	if err != nil {
		t.Fatal(err)
	}
	if snap.State.ActiveTurnID != "turn-1" || len(snap.SteeredMessages) != 1 || snap.SteeredMessages[0].Text != "use staging" {
		t.Fatalf("while the tool runs: state %+v, steered %+v; want turn 1 still running", snap.State, snap.SteeredMessages)
	}
	if err := gate.Release(); err != nil {
		t.Fatal(err)
	}
	if answer := lastAnswer(t, sessions, "s1", 2); answer != "echo: use staging" {
		t.Errorf("the steered turn answered %q", answer)
	}
	snap, err = sessions.Snapshot(ctx, "s1")
	if err != nil {
		t.Fatal(err)
	}
	var turn1 []string
	for _, m := range snap.Messages {
		if m.TurnID == "turn-1" {
			turn1 = append(turn1, string(m.Role)+": "+m.Text)
		}
	}
	if len(turn1) != 3 || turn1[2] != "tool: read_a done: n1" {
		t.Errorf("turn 1 = %q, want the read's own result last", turn1)
	}
	if calls := callsOf(s, "read_a"); len(calls) != 1 {
		t.Errorf("read_a ran %d times, want once", len(calls))
	}
}

// TestCancelTurnBeforeAToolAsksLeavesNobodyToAnswer cancels the turn while
// a tool that is about to ask a question runs in the worker: the question
// is asked of nobody, the call is rejected, and the turn ends rather than
// wait for a person; the write never runs.
func TestCancelTurnBeforeAToolAsksLeavesNobodyToAnswer(t *testing.T) {
	s := NewStack(t, "CancelAsking")
	sessions, _, gate := stopAtGate(t, s, "confirm_write")
	ctx := context.Background()
	if ok, err := sessions.CancelTurn(ctx, "s1", "turn-1"); !ok || err != nil {
		t.Fatalf("CancelTurn = %v, %v", ok, err)
	}
	if err := gate.Release(); err != nil {
		t.Fatal(err)
	}
	var snap client.Snapshot
	Eventually(t, waitLong, "turn 1 to end", func() (bool, error) {
		var err error
		snap, err = sessions.Snapshot(ctx, "s1")
		return err == nil && snap.State != nil && snap.State.ActiveTurnID == "", err
	})
	if len(snap.PendingInterrupts) != 0 {
		t.Errorf("interrupts = %+v, want the question asked of nobody", snap.PendingInterrupts)
	}
	var results []string
	for _, m := range snap.Messages {
		if m.Role == "tool" {
			results = append(results, m.Text)
		}
	}
	if len(results) != 1 || results[0] != `{"status":"cancelled","reason":"turn_cancelled_by_user"}` {
		t.Errorf("tool results = %q, want confirm_write cancelled by the user", results)
	}
	if calls := callsOf(s, "confirm_write"); len(calls) != 0 {
		t.Errorf("confirm_write wrote %d times after the cancel", len(calls))
	}
}

// TestCancelTurnDuringAModelCallDropsItsAnswer cancels while the model call
// is held in the worker: the turn ends at once, and the answer that comes
// later is never stored.
func TestCancelTurnDuringAModelCallDropsItsAnswer(t *testing.T) {
	s := NewStack(t, "CancelModel")
	gate := s.Gate("model")
	if err := gate.Arm(); err != nil {
		t.Fatal(err)
	}
	s.StartWorker()
	sessions := client.New(s.Client, s.Agent())
	ctx := context.Background()
	if ok, err := sessions.Start(ctx, "s1", "gate-model please"); !ok || err != nil {
		t.Fatalf("Start = %v, %v", ok, err)
	}
	if err := gate.WaitReached(waitLong); err != nil {
		t.Fatal(err)
	}
	if ok, err := sessions.CancelTurn(ctx, "s1", "turn-1"); !ok || err != nil {
		t.Fatalf("CancelTurn = %v, %v", ok, err)
	}
	// The turn ends while the model call is still held.
	Eventually(t, waitLong, "the cancelled turn to end", func() (bool, error) {
		snap, err := sessions.Snapshot(ctx, "s1")
		return err == nil && snap.State.ActiveTurnID == "" && snap.State.TurnCount == 1, err
	})
	if err := gate.Release(); err != nil {
		t.Fatal(err)
	}
	if ok, err := sessions.Send(ctx, "s1", "hello again"); !ok || err != nil {
		t.Fatalf("Send = %v, %v", ok, err)
	}
	if answer := lastAnswer(t, sessions, "s1", 2); answer != "echo: hello again" {
		t.Errorf("turn 2 answered %q", answer)
	}
	// Give the dropped call time to return, then check nothing of it is
	// stored.
	time.Sleep(500 * time.Millisecond)
	snap, err := sessions.Snapshot(ctx, "s1")
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range snap.Messages {
		if m.TurnID == "turn-1" && m.Role != "user" {
			t.Errorf("turn 1 stored %+v after its cancel", m)
		}
		if strings.Contains(m.Text, "gate-model please") && m.Role != "user" {
			t.Errorf("the dropped answer was stored: %+v", m)
		}
	}
	if snap.Usage.ModelCalls != 1 || snap.State.LastTurnError != "" {
		t.Errorf("usage %+v, last error %q; want only turn 2's model call counted", snap.Usage, snap.State.LastTurnError)
	}
}

// TestAWorkerKilledWhilePollingAToolTaskOnlyDelaysThePoll kills the worker
// in the middle of a poll: a new worker polls again, the task was started
// once, and the session gets the task's result.
func TestAWorkerKilledWhilePollingAToolTaskOnlyDelaysThePoll(t *testing.T) {
	s := NewStack(t, "KillPoll")
	gate := s.Gate("report_poll")
	if err := gate.Arm(); err != nil {
		t.Fatal(err)
	}
	first := s.StartWorker()
	sessions := client.New(s.Client, s.Agent())
	ctx := context.Background()
	if ok, err := sessions.Start(ctx, "s1", "tools: report_task"); !ok || err != nil {
		t.Fatalf("Start = %v, %v", ok, err)
	}
	if err := gate.WaitReached(waitLong); err != nil {
		t.Fatal(err)
	}
	second := replaceAtGate(t, s, first, gate)
	if answer := lastAnswer(t, sessions, "s1", 1); answer != "results: report_task=report job-c1 ready" {
		t.Errorf("answer = %q", answer)
	}
	if starts := callsOf(s, "report_task"); len(starts) != 1 {
		t.Errorf("the task was started %d times, want once", len(starts))
	}
	polls := callsOf(s, "report_poll")
	if len(polls) < 2 || polls[0][3] != itoa(first.Pid()) || polls[len(polls)-1][3] != itoa(second.Pid()) {
		t.Errorf("polls = %v, want the killed worker's poll repeated by the new one", polls)
	}
}

// TestARetriedToolStepResumesTheTaskItsCheckpointNames kills the worker
// as soon as the tool has saved the ID of the task it started, well inside
// the window in which heartbeats are batched: the checkpoint was recorded
// when it was saved, so the retried attempt resumes the task instead of
// starting another.
func TestARetriedToolStepResumesTheTaskItsCheckpointNames(t *testing.T) {
	s := NewStack(t, "Checkpoint")
	sessions, first, gate := stopAtGate(t, s, "report_task")
	replaceAtGate(t, s, first, gate)
	if answer := lastAnswer(t, sessions, "s1", 1); answer != "results: report_task=report job-c1 ready" {
		t.Errorf("answer = %q", answer)
	}
	if starts, resumed := callsOf(s, "report_task"), callsOf(s, "report_task_resumed"); len(starts) != 1 || len(resumed) != 1 || resumed[0][1] != "job-c1" {
		t.Errorf("started %v, resumed %v; want one start and one resume of job-c1", starts, resumed)
	}
}
