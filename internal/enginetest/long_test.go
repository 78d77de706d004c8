package enginetest

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.temporal.io/api/enums/v1"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
	"google.golang.org/protobuf/proto"

	"github.com/stepwise-run/stepwise/internal/engine"
	"github.com/stepwise-run/stepwise/internal/loop"
	"github.com/stepwise-run/stepwise/internal/session"
	"github.com/stepwise-run/stepwise/internal/tenancy"
	"github.com/stepwise-run/stepwise/pkg/agent"
	sessions "github.com/stepwise-run/stepwise/pkg/client"
)

// LongSessionTurnsEnv asks TestALongSessionStaysBounded for more turns than
// CI runs, such as 2000.
const LongSessionTurnsEnv = "STEPWISE_LONG_SESSION_TURNS"

// Bounds a long session stays under, whatever its length: the messages
// retention keeps (100, a block, and those after the summary), the largest
// payload (the state a new run carries), and a run's history.
const (
	maxLongSessionMessages = 260
	maxLongSessionPayload  = 256 << 10
	maxLongSessionHistory  = 4 << 20
)

// turnEnds passes the end of every turn from the worker's events.
type turnEnds chan session.Event

func (c turnEnds) Write(_ string, e session.Event) {
	if e.Type == session.EventTurnCompleted || e.Type == session.EventTurnFailed {
		c <- e
	}
}

// TestALongSessionStaysBounded runs one session for hundreds of turns with
// compaction and a retention limit of 100 on a real dev server. The
// session continues as new as its runs fill, and neither a run's history
// nor any payload in it grows with the session's length.
func TestALongSessionStaysBounded(t *testing.T) {
	turns := 800
	if v := os.Getenv(LongSessionTurnsEnv); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			t.Fatalf("%s=%q is not a number of turns", LongSessionTurnsEnv, v)
		}
		turns = n
	}
	server := StartDevServer(t)
	c := server.Client()
	model := agent.NewScriptedModel(func(req agent.ModelRequest) (agent.ScriptedReply, error) {
		if req.Instructions == session.ContextSummaryInstructions {
			return agent.ScriptedReply{Text: fmt.Sprintf("Summary: %d messages about numbered questions.", len(req.Input))}, nil
		}
		texts := agent.UserTexts(req)
		return agent.ScriptedReply{Text: "The answer to " + texts[len(texts)-1] + " is " + strings.Repeat("forty-two ", 8)}, nil
	})
	runner, err := loop.New(agent.Definition{Name: "long", Model: model,
		Compaction: &agent.CompactionPolicy{ContextWindowTokens: 4000, RetainedMessages: 100}})
	if err != nil {
		t.Fatal(err)
	}
	ends := make(turnEnds, 16)
	w := engine.NewWorker(c, engine.WorkerOptions{FlowType: "LongSession", TaskQueue: tenancy.Shared("LongSession").TaskQueue(),
		TaskSlots: 8, Runner: runner, Events: ends})
	if err := w.Start(); err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	s := sessions.New(c, sessions.Agent{FlowType: "LongSession"})
	ctx := context.Background()
	if ok, err := s.Start(ctx, "long", ""); !ok || err != nil {
		t.Fatalf("Start = %v, %v", ok, err)
	}
	started := time.Now()
	for i := 1; i <= turns; i++ {
		if ok, err := s.Send(ctx, "long", fmt.Sprintf("question %d of the long session", i)); !ok || err != nil {
			t.Fatalf("Send %d = %v, %v", i, ok, err)
		}
		select {
		case e := <-ends:
			if e.Type != session.EventTurnCompleted {
				t.Fatalf("turn %d: %s %s", i, e.Type, e.Payload)
			}
		case <-time.After(time.Minute):
			t.Fatalf("turn %d did not end", i)
		}
	}
	elapsed := time.Since(started)

	snap, err := s.Snapshot(ctx, "long")
	if err != nil {
		t.Fatal(err)
	}
	if snap.State.TurnCount != turns || snap.State.LastTurnError != "" {
		t.Fatalf("state = %+v", snap.State)
	}
	page, err := s.Messages(ctx, "long", sessions.MessagesRequest{Limit: 200})
	if err != nil {
		t.Fatal(err)
	}
	stored := 2*turns - int(page.FirstSequence) + 1
	if page.DeletedBeforeSequence == 0 || stored > maxLongSessionMessages {
		t.Errorf("retention kept %d of %d messages (deleted before %d)", stored, 2*turns, page.DeletedBeforeSequence)
	}
	runs, largestHistory, largestPayload := historyStats(t, c, "long")
	t.Logf("%d turns in %s (%.1f turns/s): %d runs, largest run history %d bytes, largest payload %d bytes, %d messages stored",
		turns, elapsed.Round(time.Second), float64(turns)/elapsed.Seconds(), runs, largestHistory, largestPayload, stored)
	if runs < 2 {
		t.Errorf("the session never continued as new in %d turns", turns)
	}
	if largestPayload > maxLongSessionPayload || largestHistory > maxLongSessionHistory {
		t.Errorf("largest payload %d bytes (bound %d), largest history %d bytes (bound %d)",
			largestPayload, maxLongSessionPayload, largestHistory, maxLongSessionHistory)
	}
}

// historyStats reads every run of a session: how many there are, the
// largest history, and the largest single payload in any event.
func historyStats(t *testing.T, c client.Client, id string) (runs int, largestHistory, largestPayload int) {
	t.Helper()
	ctx := context.Background()
	resp, err := c.ListWorkflow(ctx, &workflowservice.ListWorkflowExecutionsRequest{Query: fmt.Sprintf("WorkflowId = %q", id)})
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range resp.GetExecutions() {
		runs++
		size := 0
		it := c.GetWorkflowHistory(ctx, id, e.GetExecution().GetRunId(), false, enums.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
		for it.HasNext() {
			event, err := it.Next()
			if err != nil {
				t.Fatal(err)
			}
			n := proto.Size(event)
			size += n
			largestPayload = max(largestPayload, n)
		}
		largestHistory = max(largestHistory, size)
	}
	return runs, largestHistory, largestPayload
}
