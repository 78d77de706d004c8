package enginetest

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.temporal.io/api/enums/v1"
	historypb "go.temporal.io/api/history/v1"
	"go.temporal.io/api/workflowservice/v1"
	tclient "go.temporal.io/sdk/client"
	"google.golang.org/protobuf/encoding/protojson"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/stepwise-run/stepwise/internal/contract"
	"github.com/stepwise-run/stepwise/internal/media"
	"github.com/stepwise-run/stepwise/internal/media/localstore"
	"github.com/stepwise-run/stepwise/internal/media/mediatest"
	"github.com/stepwise-run/stepwise/internal/tenancy"
	"github.com/stepwise-run/stepwise/internal/tools/mcp/mcptest"
	"github.com/stepwise-run/stepwise/pkg/client"
	"github.com/stepwise-run/stepwise/pkg/workerconfig"
)

// RecordHistoriesEnv names the directory TestRecordHistories writes to. The
// histories it records are the replay tests' fixtures: record them with
// `make record-histories` before a change to workflow code, so the replay
// tests prove the new code replays what the old code wrote.
const RecordHistoriesEnv = "STEPWISE_RECORD_HISTORIES"

// ReplayFlowType is the Flow type the recorded sessions run under.
const ReplayFlowType = "Recorded"

func TestRecordHistories(t *testing.T) {
	dir := os.Getenv(RecordHistoriesEnv)
	if dir == "" {
		t.Skipf("set %s to a directory to record session histories for the replay tests", RecordHistoriesEnv)
	}
	s := NewStack(t, ReplayFlowType)
	// Since 0.4.0: plan mode and write_todos. The replay tests replay with
	// plan mode off, as after an Agent turned it off.
	s.Config.Definition.BuiltInTools = append(s.Config.Definition.BuiltInTools, "write_todos")
	s.Config.Definition.PlanMode = &workerconfig.PlanMode{PlanningToolChoice: "auto"}
	// Since 0.3.0: an MCP tool source.
	ledger := mcptest.NewLedger(t)
	s.Config.ToolSources = []workerconfig.ToolSource{{
		SourceName: "ledger", TrustToolAnnotations: true, StreamableHTTP: &workerconfig.StreamableHTTP{URL: ledger.URL},
	}}
	// Since 0.6.0: a media store in a local directory.
	mediaRoot := filepath.Join(t.TempDir(), "media")
	s.Config.MediaStore = &workerconfig.MediaStore{StoreURI: media.LocalStoreURI(mediaRoot), LocalDirectory: &workerconfig.LocalDirectoryMediaStore{Root: mediaRoot}}
	sessions := client.New(s.Client, s.Agent())
	ctx := context.Background()
	first := s.StartWorker()
	interrupt := func(id string) string { return firstInterrupt(t, sessions, id).ID }
	must := func(ok bool, err error) {
		t.Helper()
		if !ok || err != nil {
			t.Fatalf("RPC = %v, %v", ok, err)
		}
	}

	must(sessions.Start(ctx, "chat", "hello"))
	must(sessions.Send(ctx, "chat", "again"))
	lastAnswer(t, sessions, "chat", 2)

	must(sessions.Start(ctx, "approvals", "tools: write_approved"))
	must(sessions.Approve(ctx, "approvals", interrupt("approvals")))
	lastAnswer(t, sessions, "approvals", 1)
	must(sessions.Send(ctx, "approvals", "tools: write_approved, read_a"))
	must(sessions.Reject(ctx, "approvals", interrupt("approvals"), "not today"))
	lastAnswer(t, sessions, "approvals", 2)

	must(sessions.Start(ctx, "builtins", "ask: Which color?"))
	must(sessions.Answer(ctx, "builtins", interrupt("builtins"), "blue"))
	lastAnswer(t, sessions, "builtins", 1)
	must(sessions.Send(ctx, "builtins", "wait: 1"))
	lastAnswer(t, sessions, "builtins", 2)
	must(sessions.Send(ctx, "builtins", "tools: confirm_write"))
	must(sessions.Answer(ctx, "builtins", interrupt("builtins"), "yes"))
	lastAnswer(t, sessions, "builtins", 3)

	gate := s.Gate("read_a")
	if err := gate.Arm(); err != nil {
		t.Fatal(err)
	}
	must(sessions.Start(ctx, "crash", "tools: read_a, read_b"))
	if err := gate.WaitReached(waitLong); err != nil {
		t.Fatal(err)
	}
	replaceAtGate(t, s, first, gate)
	lastAnswer(t, sessions, "crash", 1)

	// Since 0.2.0: session settings, steering and cancel_turn.
	must(sessions.Start(ctx, "settings", "hello", client.WithSettings(client.SessionSettings{"tone": "brief"})))
	lastAnswer(t, sessions, "settings", 1)
	must(sessions.UpdateSettings(ctx, "settings", client.SessionSettings{}))
	must(sessions.Send(ctx, "settings", "again"))
	lastAnswer(t, sessions, "settings", 2)

	must(sessions.Start(ctx, "steered", "tools: write_approved, read_b"))
	interrupt("steered")
	must(sessions.Send(ctx, "steered", "queued"))
	must(sessions.Steer(ctx, "steered", "steered text"))
	// The steered text starts turn 2, and the queued message turn 3.
	lastAnswer(t, sessions, "steered", 3)
	must(sessions.Send(ctx, "steered", "wait: 3600"))
	Eventually(t, waitLong, "the durable wait", func() (bool, error) {
		snap, err := sessions.Snapshot(ctx, "steered")
		return err == nil && len(snap.ToolCalls) == 1, err
	})
	must(sessions.CancelTurn(ctx, "steered", "turn-4"))
	must(sessions.Send(ctx, "steered", "after the cancel"))
	lastAnswer(t, sessions, "steered", 5)

	// Since 0.2.0: a tool task, polled until done.
	must(sessions.Start(ctx, "task", "tools: report_task"))
	lastAnswer(t, sessions, "task", 1)

	// Since 0.3.0: MCP calls, with declared writes in order and a write
	// skipped after one whose outcome is unknown.
	must(sessions.Start(ctx, "mcp", "tools: ledger__uncertain, ledger__send_payment, ledger__balance"))
	lastAnswer(t, sessions, "mcp", 1)

	// Since 0.4.0: a plan-mode message writes a draft, execute_plan runs
	// it, and a message queued during a turn is deleted.
	must(sessions.Start(ctx, "plans", "hello"))
	lastAnswer(t, sessions, "plans", 1)
	must(sessions.Send(ctx, "plans", "plan: draft the notes; send them", client.InPlanMode()))
	lastAnswer(t, sessions, "plans", 2)
	must(sessions.ExecutePlan(ctx, "plans", 1))
	lastAnswer(t, sessions, "plans", 3)
	must(sessions.Send(ctx, "plans", "tools: write_approved"))
	approval := interrupt("plans")
	must(sessions.Send(ctx, "plans", "never mind"))
	snap, err := sessions.Snapshot(ctx, "plans")
	if err != nil || len(snap.QueuedMessages) != 1 {
		t.Fatalf("snapshot = %+v, %v; want one queued message", snap.QueuedMessages, err)
	}
	must(sessions.DeleteQueued(ctx, "plans", snap.QueuedMessages[0].ID))
	must(sessions.Approve(ctx, "plans", approval))
	lastAnswer(t, sessions, "plans", 4)
	if snap, err := sessions.Snapshot(ctx, "plans"); err != nil || snap.Plan == nil || snap.Plan.Status != client.PlanCompleted {
		t.Fatalf("plan = %+v, %v; want the executed plan completed", snap.Plan, err)
	}

	// Since 0.6.0: a message with an image, and a tool result with one.
	store, err := localstore.New(mediaRoot)
	if err != nil {
		t.Fatal(err)
	}
	chart, err := store.PutImage(ctx, mediatest.PNG(6, 4, 7))
	if err != nil {
		t.Fatal(err)
	}
	must(sessions.Start(ctx, "images", ""))
	must(sessions.Send(ctx, "images", "what is this chart?", client.WithImages(client.ImageReference(chart))))
	lastAnswer(t, sessions, "images", 1)
	must(sessions.Send(ctx, "images", "tools: screenshot"))
	lastAnswer(t, sessions, "images", 2)

	// Since 0.7.0: a tool that asks its question after a steer asks
	// nobody; the call is rejected and the steered text starts turn 2.
	confirmGate := s.Gate("confirm_write")
	if err := confirmGate.Arm(); err != nil {
		t.Fatal(err)
	}
	must(sessions.Start(ctx, "late-question", "tools: confirm_write"))
	if err := confirmGate.WaitReached(waitLong); err != nil {
		t.Fatal(err)
	}
	must(sessions.Steer(ctx, "late-question", "no, leave it"))
	if err := confirmGate.Release(); err != nil {
		t.Fatal(err)
	}
	lastAnswer(t, sessions, "late-question", 2)

	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	save := func(on *Stack, id, runID, file string) {
		workflowID := on.WorkflowID(id)
		if _, err := on.Client.DescribeWorkflow(ctx, workflowID, ""); err != nil {
			// A session that moved from the shared names keeps its ID.
			workflowID = id
		}
		saveHistory(t, on.Client, workflowID, runID, filepath.Join(dir, file))
	}
	for _, id := range []string{"chat", "approvals", "builtins", "crash", "settings", "steered", "task", "mcp", "plans", "images", "late-question"} {
		save(s, id, "", id+".json")
	}

	// Since 0.2.0: a session that compacts and continues as new, on a
	// server that suggests a new run early. A later run starts from the
	// carried state.
	long := NewStack(t, ReplayFlowType, "--dynamic-config-value", "limit.historyCount.suggestContinueAsNew=80")
	long.Config.Definition.Compaction = &workerconfig.Compaction{ContextWindowTokens: 150, TriggerRatio: 0.85, KeepRatio: 0.3, RetainedMessageLimit: 4}
	long.StartWorker()
	longSessions := client.New(long.Client, long.Agent())
	must(longSessions.Start(ctx, "continued", "question 1"))
	lastAnswer(t, longSessions, "continued", 1)
	for i := 2; i <= 12; i++ {
		must(longSessions.Send(ctx, "continued", "question "+itoa(i)+" "+strings.Repeat("?", 40)))
		lastAnswer(t, longSessions, "continued", i)
	}
	runs, err := long.Client.ListWorkflow(ctx, &workflowservice.ListWorkflowExecutionsRequest{Query: `WorkflowId = "` + long.WorkflowID("continued") + `"`})
	if err != nil {
		t.Fatal(err)
	}
	all := runs.GetExecutions()
	if len(all) < 3 {
		t.Fatalf("the session ran in %d runs, want at least 3", len(all))
	}
	// Runs are listed newest first: keep the first run, and one that began
	// from carried state and continued again.
	save(long, "continued", all[len(all)-1].GetExecution().GetRunId(), "continued-first-run.json")
	save(long, "continued", all[1].GetExecution().GetRunId(), "continued-carried-run.json")

	// Since 0.5.0: a session pinned to a worker version, woken by the move
	// signal once another version is current, continues as new on it.
	versioned := NewStack(t, ReplayFlowType, VersionedServerArgs...)
	startVersion(t, versioned, "record_Recorded", "0.5.0-old")
	versionedSessions := client.New(versioned.Client, versioned.Agent())
	must(versionedSessions.Start(ctx, "moved", "hello"))
	lastAnswer(t, versionedSessions, "moved", 1)
	_, firstRun := pinnedTo(t, versioned, "moved")
	startVersion(t, versioned, "record_Recorded", "0.5.0-new")
	Eventually(t, waitLong, "the session to move", func() (bool, error) {
		if build, _ := pinnedTo(t, versioned, "moved"); build == "0.5.0-new" {
			return true, nil
		}
		time.Sleep(time.Second)
		return false, versioned.Client.SignalWorkflow(ctx, versioned.WorkflowID("moved"), "", contract.SignalMoveToCurrentVersion, nil)
	})
	must(versionedSessions.Send(ctx, "moved", "again"))
	lastAnswer(t, versionedSessions, "moved", 2)
	save(versioned, "moved", firstRun, "moved-first-run.json")
	save(versioned, "moved", "", "moved-carried-run.json")

	// Since 0.8.0: a session of the shared names, woken by the move
	// signal, moves to its Agent's own task queue and goes on there.
	moving := NewStack(t, ReplayFlowType)
	shared, own := tenancy.Shared(moving.FlowType), tenancy.Tenant(moving.Config.Agent.Namespace, moving.FlowType)
	moving.Config.Engine.TaskQueue = shared.TaskQueue()
	before := moving.StartWorker()
	earlier := client.New(moving.Client, client.Agent{FlowType: moving.FlowType})
	must(earlier.Start(ctx, "to-own-names", "hello"))
	lastAnswer(t, earlier, "to-own-names", 1)
	sharedRun := runOf(t, moving, "to-own-names")
	before.Kill()
	moving.Config.Engine.TaskQueue, moving.Config.Engine.SharedTaskQueue = own.TaskQueue(), shared.TaskQueue()
	moving.StartWorker()
	Eventually(t, waitLong, "the session to move to its Agent's own names", func() (bool, error) {
		desc, err := moving.Client.DescribeWorkflow(ctx, "to-own-names", "")
		if err != nil || desc.TaskQueueName == own.TaskQueue() {
			return err == nil, err
		}
		time.Sleep(time.Second)
		return false, moving.Client.SignalWorkflow(ctx, "to-own-names", "", contract.SignalMoveToCurrentVersion, nil)
	})
	ownSessions := client.New(moving.Client, moving.Agent())
	must(ownSessions.Send(ctx, "to-own-names", "again"))
	lastAnswer(t, ownSessions, "to-own-names", 2)
	save(moving, "to-own-names", sharedRun, "to-own-names-shared-run.json")
	save(moving, "to-own-names", "", "to-own-names-own-run.json")
}

// runOf is the ID of a session's current run, under its workflow ID.
func runOf(t *testing.T, s *Stack, workflowID string) string {
	t.Helper()
	desc, err := s.Client.DescribeWorkflow(context.Background(), workflowID, "")
	if err != nil {
		t.Fatal(err)
	}
	return desc.WorkflowExecution.RunID
}

// saveHistory writes one run's history as the replayer reads it.
func saveHistory(t *testing.T, c tclient.Client, id, runID, path string) {
	t.Helper()
	var history historypb.History
	it := c.GetWorkflowHistory(context.Background(), id, runID, false, enums.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
	for it.HasNext() {
		event, err := it.Next()
		if err != nil {
			t.Fatal(err)
		}
		history.Events = append(history.Events, event)
	}
	doc, err := protojson.MarshalOptions{Multiline: true, Indent: "  "}.Marshal(&history)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, doc, 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestRecordSpendCounterHistory records the history of an Agent's spend
// counter as sessions on two workers spend under its budget, until one is
// refused, for the replay tests.
func TestRecordSpendCounterHistory(t *testing.T) {
	dir := os.Getenv(RecordHistoriesEnv)
	if dir == "" {
		t.Skipf("set %s to a directory to record the spend counter's history for the replay tests", RecordHistoriesEnv)
	}
	s := NewStack(t, ReplayFlowType)
	s.Config.SpendLimit = &workerconfig.SpendLimit{Window: metav1.Duration{Duration: time.Hour}, AgentTokens: 2000}
	s.StartWorker()
	s.StartWorker()
	sessions := client.New(s.Client, s.Agent())
	refused := 0
	for i := range 4 {
		id := "spender-" + itoa(i)
		if ok, err := sessions.Start(context.Background(), id, "hello "+strings.Repeat("x", 400)); !ok || err != nil {
			t.Fatalf("Start = %v, %v", ok, err)
		}
		if endedTurn(t, sessions, id, 1).State.LastTurnError != "" {
			refused++
		}
	}
	if refused == 0 {
		t.Fatal("no session was refused")
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	saveHistory(t, s.Client, s.Names().SpendCounterID(), "", filepath.Join(dir, "spend-counter.json"))
}
