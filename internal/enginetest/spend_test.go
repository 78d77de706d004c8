package enginetest

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/stepwise-run/stepwise/internal/engineadmin"
	"github.com/stepwise-run/stepwise/internal/spend"
	"github.com/stepwise-run/stepwise/internal/tenancy"
	"github.com/stepwise-run/stepwise/pkg/client"
	"github.com/stepwise-run/stepwise/pkg/workerconfig"
)

// endedTurn waits until the session's turn ended and returns its state.
func endedTurn(t *testing.T, sessions *client.Sessions, id string, turns int) client.Snapshot {
	t.Helper()
	var snap client.Snapshot
	Eventually(t, waitLong, id+"'s turn "+itoa(turns)+" to end", func() (bool, error) {
		var err error
		snap, err = sessions.Snapshot(context.Background(), id)
		if err != nil || snap.State == nil {
			return false, err
		}
		return snap.State.TurnCount >= turns && snap.State.ActiveTurnID == "", nil
	})
	return snap
}

// counterOf reads the Flow type's spend counter as the operator does.
func counterOf(t *testing.T, s *Stack) spend.Counter {
	t.Helper()
	admin := engineadmin.New(logr.Discard())
	defer admin.Close()
	conn := engineadmin.Connection{Address: s.Server.FrontendHostPort(), Namespace: s.Config.Engine.Namespace}
	c, err := admin.SpendCounter(context.Background(), conn, s.Names())
	if err != nil {
		t.Fatalf("reading the spend counter: %v", err)
	}
	// A Flow type that never spent under a budget has no counter.
	if none, err := admin.SpendCounter(context.Background(), conn, tenancy.Tenant("test", "NeverSpent")); err != nil || none.Calls != 0 {
		t.Errorf("a Flow type with no counter reads as %+v, %v", none, err)
	}
	return c
}

// TestSessionsOnTwoWorkersStopAtTheAgentsBudget runs sessions four at a
// time on two workers against one Agent budget: they stop at the budget
// within one model call's usage, the counter holds exactly what the
// sessions recorded, refused turns fail with a clear error, and the
// counter outlives every worker.
func TestSessionsOnTwoWorkersStopAtTheAgentsBudget(t *testing.T) {
	const budget = 12000
	s := NewStack(t, "BudgetAgent")
	s.Config.SpendLimit = &workerconfig.SpendLimit{
		Window: metav1.Duration{Duration: 24 * time.Hour}, AgentTokens: budget, AgentMicroCost: 1 << 40,
		// One millionth per input token and two per output token, so the
		// cost is exact and checkable.
		Prices: []workerconfig.ModelPrice{
			{Model: "scripted", InputMicroPerMillion: 1_000_000, OutputMicroPerMillion: 2_000_000},
			{Model: "test", InputMicroPerMillion: 1_000_000, OutputMicroPerMillion: 2_000_000},
		},
	}
	s.StartWorker()
	s.StartWorker()
	sessions := client.New(s.Client, s.Agent())
	ctx := context.Background()
	// Every turn is one model call of the same size: a long message, so a
	// handful of calls spend the budget.
	message := func(i int) string { return fmt.Sprintf("hello %02d %s", i, strings.Repeat("x", 400)) }
	var completed, refused []client.Snapshot
	for round := 0; len(refused) == 0 || round < 2; round++ {
		if round == 10 {
			t.Fatalf("after %d turns no session was refused", len(completed))
		}
		var ids []string
		for i := range 4 {
			id := fmt.Sprintf("b%d-%d", round, i)
			if ok, err := sessions.Start(ctx, id, message(round*4+i)); !ok || err != nil {
				t.Fatalf("Start(%s) = %v, %v", id, ok, err)
			}
			ids = append(ids, id)
		}
		for _, id := range ids {
			snap := endedTurn(t, sessions, id, 1)
			switch {
			case snap.State.LastTurnError == "":
				completed = append(completed, snap)
			case strings.HasPrefix(snap.State.LastTurnError, "spend limit reached: the Agent's sessions spent "):
				refused = append(refused, snap)
				if snap.Usage.ModelCalls != 0 {
					t.Errorf("%s was refused after %d model calls", id, snap.Usage.ModelCalls)
				}
			default:
				t.Fatalf("%s failed for another reason: %s", id, snap.State.LastTurnError)
			}
		}
	}
	var tokens, microCost, largest int64
	for _, snap := range completed {
		used := snap.Usage.InputTokens + snap.Usage.OutputTokens
		tokens += used
		microCost += snap.Usage.InputTokens + 2*snap.Usage.OutputTokens
		largest = max(largest, used)
	}
	counter := counterOf(t, s)
	if counter.Spent.Tokens != tokens || counter.Spent.MicroCost != microCost || counter.Calls != int64(len(completed)) {
		t.Errorf("the counter holds %+v over %d calls; the sessions recorded %d tokens costing %d over %d calls",
			counter.Spent, counter.Calls, tokens, microCost, len(completed))
	}
	if tokens < budget-largest || tokens > budget+largest {
		t.Errorf("the sessions spent %d tokens of a %d budget; calls used up to %d", tokens, budget, largest)
	}
	t.Logf("%d turns completed with %d tokens of %d, %d refused", len(completed), tokens, budget, len(refused))
	pids := map[string]bool{}
	for _, line := range s.ModelCalls() {
		pids[line[len(line)-1]] = true
	}
	if len(pids) != 2 {
		t.Errorf("the model calls ran on %d workers, not 2", len(pids))
	}
	if len(counter.Reserved) != 0 {
		t.Errorf("calls still hold budget after every turn ended: %v", counter.Reserved)
	}

	// The counter is not the workers': with every worker replaced, the
	// budget is still spent.
	for _, w := range s.started {
		w.Kill()
	}
	s.StartWorker()
	if ok, err := sessions.Start(ctx, "after-restart", message(99)); !ok || err != nil {
		t.Fatalf("Start = %v, %v", ok, err)
	}
	snap := endedTurn(t, sessions, "after-restart", 1)
	if !strings.HasPrefix(snap.State.LastTurnError, "spend limit reached") || snap.Usage.ModelCalls != 0 {
		t.Errorf("after a restart the turn ended with %q after %d model calls", snap.State.LastTurnError, snap.Usage.ModelCalls)
	}
	if after := counterOf(t, s); after.Spent != counter.Spent {
		t.Errorf("the counter changed across the restart: %+v, then %+v", counter.Spent, after.Spent)
	}
}

// TestASessionStopsAtItsOwnBudget lets each session spend one model call's
// worth: its next turn fails before the model call, and another session
// still runs.
func TestASessionStopsAtItsOwnBudget(t *testing.T) {
	s := NewStack(t, "SessionBudgetAgent")
	s.Config.SpendLimit = &workerconfig.SpendLimit{Window: metav1.Duration{Duration: time.Hour}, SessionTokens: 1}
	s.StartWorker()
	sessions := client.New(s.Client, s.Agent())
	ctx := context.Background()
	for _, id := range []string{"s1", "s2"} {
		if ok, err := sessions.Start(ctx, id, "hello"); !ok || err != nil {
			t.Fatalf("Start(%s) = %v, %v", id, ok, err)
		}
		if snap := endedTurn(t, sessions, id, 1); snap.State.LastTurnError != "" {
			t.Fatalf("%s's first turn failed: %s", id, snap.State.LastTurnError)
		}
	}
	if ok, err := sessions.Send(ctx, "s1", "again"); !ok || err != nil {
		t.Fatalf("Send = %v, %v", ok, err)
	}
	snap := endedTurn(t, sessions, "s1", 2)
	used := snap.Usage.InputTokens + snap.Usage.OutputTokens
	want := fmt.Sprintf("spend limit reached: this session spent %d of its 1 tokens", used)
	if snap.State.LastTurnError != want || snap.Usage.ModelCalls != 1 {
		t.Errorf("the second turn ended with %q after %d model calls, want %q after 1", snap.State.LastTurnError, snap.Usage.ModelCalls, want)
	}
}
