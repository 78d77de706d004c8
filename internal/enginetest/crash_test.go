package enginetest

import (
	"context"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stepwise-run/stepwise/internal/session"
	"github.com/stepwise-run/stepwise/pkg/client"
)

const waitLong = 60 * time.Second

// lastAnswer waits until the session has finished count turns and returns
// its last message.
func lastAnswer(t *testing.T, sessions *client.Sessions, id string, turns int) string {
	t.Helper()
	var last string
	Eventually(t, waitLong, "turn "+itoa(turns)+" to end", func() (bool, error) {
		snap, err := sessions.Snapshot(context.Background(), id)
		if err != nil || snap.State == nil {
			return false, err
		}
		if snap.State.TurnCount < turns || snap.State.ActiveTurnID != "" {
			return false, nil
		}
		last = snap.Messages[len(snap.Messages)-1].Text
		return true, nil
	})
	return last
}

func callsOf(s *Stack, tool string) [][]string {
	var out [][]string
	for _, c := range s.Calls() {
		if c[0] == tool {
			out = append(out, c)
		}
	}
	return out
}

func TestANonIdempotentWriteKilledMidCallIsOutcomeUnknownAndNeverRunsAgain(t *testing.T) {
	s := NewStack(t, "CrashWrite")
	sessions, first, gate := stopAtGate(t, s, "write_once")
	replaceAtGate(t, s, first, gate)
	answer := lastAnswer(t, sessions, "s1", 1)
	if !strings.Contains(answer, session.OutcomeUnknownText) {
		t.Errorf("the model saw %q, want the outcome-unknown text", answer)
	}
	if calls := callsOf(s, "write_once"); len(calls) != 1 {
		t.Errorf("write_once ran %d times, want once: %v", len(calls), calls)
	}
}

func TestAReadKilledMidCallRunsAgainWithTheSameIdempotencyKey(t *testing.T) {
	s := NewStack(t, "CrashRead")
	sessions, first, gate := stopAtGate(t, s, "read_a")
	second := replaceAtGate(t, s, first, gate)
	answer := lastAnswer(t, sessions, "s1", 1)
	if answer != "results: read_a=read_a done: n1" {
		t.Errorf("answer = %q", answer)
	}
	calls := callsOf(s, "read_a")
	if len(calls) != 2 {
		t.Fatalf("read_a ran %d times, want twice: %v", len(calls), calls)
	}
	// The key starts with the session's engine ID, which names its tenant,
	// so two namespaces' sessions s1 never share a key at a tool's server.
	if want := s.WorkflowID("s1") + "/turn-1/c1"; calls[0][1] != calls[1][1] || calls[0][1] != want {
		t.Errorf("idempotency keys = %q and %q, want %s both times", calls[0][1], calls[1][1], want)
	}
	if calls[0][2] != "1" || calls[1][2] != "2" {
		t.Errorf("attempts = %s and %s, want 1 and 2", calls[0][2], calls[1][2])
	}
	if calls[1][3] != itoa(second.Pid()) {
		t.Errorf("the second attempt ran in pid %s, want the replacement worker %d", calls[1][3], second.Pid())
	}
}

func TestAWorkerKilledWhileASessionWaitsForApprovalIsReplacedAndTheCallRunsOnce(t *testing.T) {
	s := NewStack(t, "CrashApproval")
	sessions := client.New(s.Client, s.Agent())
	first := s.StartWorker()
	ctx := context.Background()
	if ok, err := sessions.Start(ctx, "s1", "tools: write_approved"); !ok || err != nil {
		t.Fatalf("Start = %v, %v", ok, err)
	}
	interrupt := firstInterrupt(t, sessions, "s1").ID
	Eventually(t, waitLong, "the session to be found waiting for approval", func() (bool, error) {
		found, _, err := sessions.Waiting(ctx, client.WaitingQuery{Steps: []string{client.StepAwaitToolApproval}})
		for _, w := range found {
			if w.SessionID == "s1" && w.FlowType == s.FlowType {
				return true, nil
			}
		}
		return false, err
	})
	first.Kill()
	s.StartWorker()
	if ok, err := sessions.Approve(ctx, "s1", interrupt); !ok || err != nil {
		t.Fatalf("Approve = %v, %v", ok, err)
	}
	if answer := lastAnswer(t, sessions, "s1", 1); answer != "results: write_approved=write_approved done: n1" {
		t.Errorf("answer = %q", answer)
	}
	if calls := callsOf(s, "write_approved"); len(calls) != 1 {
		t.Errorf("write_approved ran %d times, want once", len(calls))
	}
	Eventually(t, waitLong, "the session to leave the approval search", func() (bool, error) {
		found, _, err := sessions.Waiting(ctx, client.WaitingQuery{Steps: []string{client.StepAwaitToolApproval}})
		for _, w := range found {
			if w.SessionID == "s1" {
				return false, err
			}
		}
		return err == nil, err
	})
}

func TestAKillDuringRunModelRepeatsOnlyThatModelCall(t *testing.T) {
	s := NewStack(t, "CrashModel")
	sessions := client.New(s.Client, s.Agent())
	first := s.StartWorker()
	ctx := context.Background()
	if ok, err := sessions.Start(ctx, "s1", "tools: read_a"); !ok || err != nil {
		t.Fatalf("Start = %v, %v", ok, err)
	}
	lastAnswer(t, sessions, "s1", 1)
	before := len(s.ModelCalls())
	gate := s.Gate("model")
	if err := gate.Arm(); err != nil {
		t.Fatal(err)
	}
	if ok, err := sessions.Send(ctx, "s1", "gate-model hello"); !ok || err != nil {
		t.Fatalf("Send = %v, %v", ok, err)
	}
	if err := gate.WaitReached(waitLong); err != nil {
		t.Fatal(err)
	}
	second := replaceAtGate(t, s, first, gate)
	if answer := lastAnswer(t, sessions, "s1", 2); answer != "echo: gate-model hello" {
		t.Errorf("answer = %q", answer)
	}
	calls := s.ModelCalls()[before:]
	if len(calls) != 2 {
		t.Fatalf("model calls after the kill = %v, want the killed call and its repeat", calls)
	}
	if calls[0][1] != calls[1][1] || calls[1][2] != itoa(second.Pid()) {
		t.Errorf("the repeat %v differs from the killed call %v", calls[1], calls[0])
	}
	if reads := callsOf(s, "read_a"); len(reads) != 1 {
		t.Errorf("read_a of the first turn ran %d times, want once", len(reads))
	}
}

func TestTwoToolCallsOfOneResponseRunAtTheSameTime(t *testing.T) {
	s := NewStack(t, "Parallel")
	sessions := client.New(s.Client, s.Agent())
	a, b := s.Gate("read_a"), s.Gate("read_b")
	for _, g := range []Gate{a, b} {
		if err := g.Arm(); err != nil {
			t.Fatal(err)
		}
	}
	s.StartWorker()
	if ok, err := sessions.Start(context.Background(), "s1", "tools: read_a, read_b"); !ok || err != nil {
		t.Fatalf("Start = %v, %v", ok, err)
	}
	// Neither call can finish before both started: each waits at its gate.
	for _, g := range []Gate{a, b} {
		if err := g.WaitReached(waitLong); err != nil {
			t.Fatal(err)
		}
	}
	for _, g := range []Gate{a, b} {
		if err := g.Release(); err != nil {
			t.Fatal(err)
		}
	}
	if answer := lastAnswer(t, sessions, "s1", 1); answer != "results: read_a=read_a done: n1; read_b=read_b done: n2" {
		t.Errorf("answer = %q", answer)
	}
}

func itoa(n int) string { return strconv.Itoa(n) }

// firstInterrupt waits until a session has a pending interrupt and returns
// the first.
func firstInterrupt(t *testing.T, sessions *client.Sessions, id string) client.Interrupt {
	t.Helper()
	var found client.Interrupt
	Eventually(t, waitLong, "an interrupt of "+id, func() (bool, error) {
		snap, err := sessions.Snapshot(context.Background(), id)
		if err != nil || len(snap.PendingInterrupts) == 0 {
			return false, err
		}
		found = snap.PendingInterrupts[0]
		return true, nil
	})
	return found
}

// stopAtGate arms a tool's gate, starts a worker and a session "s1" that
// calls the tool, and returns once the worker stopped at the gate.
// replaceAtGate kills a worker held at a gate, releases the gate, and
// starts a replacement worker.
func replaceAtGate(t *testing.T, s *Stack, w *Worker, gate Gate) *Worker {
	t.Helper()
	w.Kill()
	if err := gate.Release(); err != nil {
		t.Fatal(err)
	}
	return s.StartWorker()
}

func stopAtGate(t *testing.T, s *Stack, tool string) (*client.Sessions, *Worker, Gate) {
	t.Helper()
	sessions := client.New(s.Client, s.Agent())
	gate := s.Gate(tool)
	if err := gate.Arm(); err != nil {
		t.Fatal(err)
	}
	w := s.StartWorker()
	if ok, err := sessions.Start(context.Background(), "s1", "tools: "+tool); !ok || err != nil {
		t.Fatalf("Start = %v, %v", ok, err)
	}
	if err := gate.WaitReached(waitLong); err != nil {
		t.Fatal(err)
	}
	return sessions, w, gate
}

func TestSIGTERMStopsTakingTasksAndLetsARunningStepFinish(t *testing.T) {
	s := NewStack(t, "Drain")
	sessions, first, gate := stopAtGate(t, s, "read_a")
	first.Terminate()
	Eventually(t, waitLong, "the worker to report not ready", func() (bool, error) {
		resp, err := http.Get("http://" + first.Health + "/readyz")
		if err != nil {
			return false, err
		}
		_ = resp.Body.Close()
		return resp.StatusCode == http.StatusServiceUnavailable, nil
	})
	if first.Exited() {
		t.Fatal("the worker exited while its Step was still running")
	}
	if err := gate.Release(); err != nil {
		t.Fatal(err)
	}
	Eventually(t, waitLong, "the worker to exit after its Step finished", func() (bool, error) { return first.Exited(), nil })
	s.StartWorker()
	if answer := lastAnswer(t, sessions, "s1", 1); answer != "results: read_a=read_a done: n1" {
		t.Errorf("answer = %q", answer)
	}
	calls := callsOf(s, "read_a")
	if len(calls) != 1 || calls[0][2] != "1" || calls[0][3] != itoa(first.Pid()) {
		t.Errorf("read_a calls = %v, want one attempt, finished by the stopping worker %d", calls, first.Pid())
	}
}
