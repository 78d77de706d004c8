package client_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	tclient "go.temporal.io/sdk/client"

	"github.com/stepwise-run/stepwise/internal/contract"
	"github.com/stepwise-run/stepwise/internal/engine"
	"github.com/stepwise-run/stepwise/internal/enginetest"
	"github.com/stepwise-run/stepwise/internal/loop"
	"github.com/stepwise-run/stepwise/internal/session"
	"github.com/stepwise-run/stepwise/internal/sessionrpc"
	"github.com/stepwise-run/stepwise/internal/tenancy"
	"github.com/stepwise-run/stepwise/pkg/agent"
	"github.com/stepwise-run/stepwise/pkg/client"
)

func TestStartIsTrueOnlyForTheCallThatStartedTheSession(t *testing.T) {
	server := enginetest.StartDevServer(t)
	c := server.Client()
	runner, err := loop.New(agent.Definition{Name: "demo", Model: agent.NewScriptedModel(agent.DemoScript)})
	if err != nil {
		t.Fatal(err)
	}
	w := engine.NewWorker(c, engine.WorkerOptions{FlowType: "Demo", TaskQueue: tenancy.Tenant("test", "Demo").TaskQueue(), TaskSlots: 4, Runner: runner})
	if err := w.Start(); err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	s := client.New(c, testAgent("Demo"))
	ctx := context.Background()

	for i, tc := range []struct {
		what string
		opts []client.StartOption
		want bool
	}{
		{"the first start", []client.StartOption{client.WithRequestID("req-1")}, true},
		{"a retry of the same call", []client.StartOption{client.WithRequestID("req-1")}, true},
		{"another call", []client.StartOption{client.WithRequestID("req-2")}, false},
		{"a call without a request ID", nil, false},
	} {
		got, err := s.Start(ctx, "s1", "hello", tc.opts...)
		if err != nil || got != tc.want {
			t.Errorf("%d: %s: Start = %v, %v; want %v", i, tc.what, got, err, tc.want)
		}
	}
	enginetest.Eventually(t, time.Minute, "the first turn", func() (bool, error) {
		snap, err := s.Snapshot(ctx, "s1")
		return err == nil && snap.State.TurnCount == 1 && snap.State.ActiveTurnID == "", err
	})
	snap, err := s.Snapshot(ctx, "s1")
	if err != nil {
		t.Fatal(err)
	}
	if len(snap.Messages) != 2 || snap.Messages[1].Text != "Demo reply: hello" {
		t.Errorf("messages = %+v, want one turn: the retried and refused starts add nothing", snap.Messages)
	}

	if desc, err := c.DescribeWorkflow(ctx, s.WorkflowIDOf("s1"), ""); err != nil ||
		desc.RawResponse.GetWorkflowExecutionInfo().GetSearchAttributes().GetIndexedFields()[tenancy.AttributeActiveSteps] == nil {
		t.Fatalf("a session with step search has no %s (%v)", tenancy.AttributeActiveSteps, err)
	}

	// A session that ended is never started again under its ID.
	if err := c.TerminateWorkflow(ctx, s.WorkflowIDOf("s1"), "", "test"); err != nil {
		t.Fatal(err)
	}
	if got, err := s.Start(ctx, "s1", "again"); got || err != nil {
		t.Errorf("Start of an ended session's ID = %v, %v; want false", got, err)
	}

	// A session without the step search runs as any other.
	if got, err := s.Start(ctx, "s2", "hi", client.WithoutStepSearch()); !got || err != nil {
		t.Fatalf("Start without step search = %v, %v", got, err)
	}
	enginetest.Eventually(t, time.Minute, "the reply", func() (bool, error) {
		snap, err := s.Snapshot(ctx, "s2")
		return err == nil && len(snap.Messages) == 2 && snap.Messages[1].Text == "Demo reply: hi", err
	})
	desc, err := c.DescribeWorkflow(ctx, s.WorkflowIDOf("s2"), "")
	if err != nil {
		t.Fatal(err)
	}
	if fields := desc.RawResponse.GetWorkflowExecutionInfo().GetSearchAttributes().GetIndexedFields(); fields[tenancy.AttributeActiveSteps] != nil {
		t.Errorf("a session started without step search has %s = %v", tenancy.AttributeActiveSteps, fields[tenancy.AttributeActiveSteps])
	}
}

// TestSessionSettingsChooseTheModelOfTheNextTurn changes the settings while
// a turn waits for an approval: the running turn keeps its model, the next
// turn uses the new one.
func TestSessionSettingsChooseTheModelOfTheNextTurn(t *testing.T) {
	server := enginetest.StartDevServer(t)
	c := server.Client()
	answering := func(name string) agent.ModelClient {
		return agent.NewScriptedModel(func(req agent.ModelRequest) (agent.ScriptedReply, error) {
			last := req.Input[len(req.Input)-1]
			if last.Role == agent.RoleUser && last.Text == "hold" {
				return agent.ScriptedReply{ToolCalls: []agent.ScriptedToolCall{{ID: "h1", Name: "hold"}}}, nil
			}
			return agent.ScriptedReply{Text: name + " answers"}, nil
		})
	}
	hold, err := agent.NewTool("hold", "Needs an approval.", agent.EffectNonIdempotentWrite,
		func(context.Context, agent.ToolContext, struct{}) (string, error) { return "held", nil })
	if err != nil {
		t.Fatal(err)
	}
	choices := agent.ModelChoices{
		Default: agent.ModelChoice{Client: answering("default")},
		Named:   map[string]agent.ModelChoice{"small": {Client: answering("small")}, "large": {Client: answering("large")}},
	}
	runner, err := loop.New(agent.Definition{Name: "demo", Model: choices.Default.Client, ResolveModel: choices.Resolve, Tools: []agent.Tool{hold}})
	if err != nil {
		t.Fatal(err)
	}
	w := engine.NewWorker(c, engine.WorkerOptions{FlowType: "Settings", TaskQueue: tenancy.Tenant("test", "Settings").TaskQueue(), TaskSlots: 4, Runner: runner})
	if err := w.Start(); err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	s := client.New(c, testAgent("Settings"))
	ctx := context.Background()

	if ok, err := s.UpdateSettings(ctx, "never-started", client.SessionSettings{"model": "large"}); ok || err == nil {
		t.Errorf("UpdateSettings of a session that does not exist = %v, %v; want an error", ok, err)
	}
	huge := client.SessionSettings{"note": strings.Repeat("x", contract.MaxSessionSettingsBytes)}
	if ok, err := s.Start(ctx, "too-big", "hi", client.WithSettings(huge)); ok || err == nil || !strings.Contains(err.Error(), "more than the limit of 16384") {
		t.Errorf("Start with oversized settings = %v, %v; want an error naming the limit", ok, err)
	}

	if ok, err := s.Start(ctx, "s1", "hold", client.WithSettings(client.SessionSettings{"model": "small"})); !ok || err != nil {
		t.Fatalf("Start = %v, %v", ok, err)
	}
	enginetest.Eventually(t, time.Minute, "the approval", func() (bool, error) {
		snap, err := s.Snapshot(ctx, "s1")
		return err == nil && len(snap.PendingInterrupts) == 1, err
	})
	if ok, err := s.UpdateSettings(ctx, "s1", client.SessionSettings{"model": "large"}); !ok || err != nil {
		t.Fatalf("UpdateSettings = %v, %v", ok, err)
	}
	if ok, err := s.UpdateSettings(ctx, "s1", huge); ok || err == nil {
		t.Errorf("UpdateSettings with oversized settings = %v, %v; want an error", ok, err)
	}
	snap, err := s.Snapshot(ctx, "s1")
	if err != nil || string(snap.Settings) != `{"model":"large"}` {
		t.Fatalf("snapshot settings = %s, %v", snap.Settings, err)
	}
	if ok, err := s.Approve(ctx, "s1", "h1"); !ok || err != nil {
		t.Fatalf("Approve = %v, %v", ok, err)
	}
	if ok, err := s.Send(ctx, "s1", "next"); !ok || err != nil {
		t.Fatalf("Send = %v, %v", ok, err)
	}
	enginetest.Eventually(t, time.Minute, "two turns", func() (bool, error) {
		snap, err = s.Snapshot(ctx, "s1")
		return err == nil && snap.State.TurnCount == 2 && snap.State.ActiveTurnID == "", err
	})
	var answers []string
	for _, m := range snap.Messages {
		if m.Role == client.RoleAssistant && m.Text != "" {
			answers = append(answers, m.TurnID+": "+m.Text)
		}
	}
	if want := []string{"turn-1: small answers", "turn-2: large answers"}; !slices.Equal(answers, want) {
		t.Errorf("answers = %v, want %v", answers, want)
	}

	// A model the settings name but the worker never built fails the turn
	// with an error that does not repeat the settings.
	if ok, err := s.UpdateSettings(ctx, "s1", client.SessionSettings{"model": "https://evil.example/v1"}); !ok || err != nil {
		t.Fatalf("UpdateSettings = %v, %v", ok, err)
	}
	if ok, err := s.Send(ctx, "s1", "third"); !ok || err != nil {
		t.Fatalf("Send = %v, %v", ok, err)
	}
	enginetest.Eventually(t, time.Minute, "the third turn's failure", func() (bool, error) {
		snap, err = s.Snapshot(ctx, "s1")
		return err == nil && snap.State.TurnCount == 3 && snap.State.ActiveTurnID == "", err
	})
	if want := `choosing the model: session setting "model" names a model this agent does not offer; it offers: large, small`; snap.State.LastTurnError != want {
		t.Errorf("last turn error = %q, want %q", snap.State.LastTurnError, want)
	}

	// Settings that bypass the client's check are refused by the session.
	handle, err := c.UpdateWorkflow(ctx, tclient.UpdateWorkflowOptions{
		WorkflowID: s.WorkflowIDOf("s1"), UpdateName: sessionrpc.UpdateSessionSettings, WaitForStage: tclient.WorkflowUpdateStageCompleted,
		Args: []any{sessionrpc.SettingsRequest{Settings: json.RawMessage(`["large"]`)}},
	})
	if err == nil {
		err = handle.Get(ctx, nil)
	}
	if err == nil || !strings.Contains(err.Error(), "session settings must be a JSON object") {
		t.Errorf("update with an array = %v, want a refusal", err)
	}

	// A session started around the client with settings that are not an
	// object fails at once, without a retry.
	run, err := c.ExecuteWorkflow(ctx, tclient.StartWorkflowOptions{ID: "bad-start", TaskQueue: tenancy.Tenant("test", "Settings").TaskQueue()}, "Settings",
		sessionrpc.SessionInput{Start: session.StartInput{RequestID: "r", Settings: json.RawMessage(`"large"`)}})
	if err != nil {
		t.Fatal(err)
	}
	if err := run.Get(ctx, nil); err == nil || !strings.Contains(err.Error(), session.InvalidStartSettingsReason+": session settings must be a JSON object") {
		t.Errorf("the session's end = %v, want the invalid settings reason", err)
	}
}

// TestAPlanIsReviewedThenExecuted runs plan mode on the dev server: a
// planning turn writes a draft, the user approves its revision, and an
// executing turn runs it to completion.
func TestAPlanIsReviewedThenExecuted(t *testing.T) {
	server := enginetest.StartDevServer(t)
	c := server.Client()
	model := agent.NewScriptedModel(func(req agent.ModelRequest) (agent.ScriptedReply, error) {
		texts := agent.UserTexts(req)
		last := texts[len(texts)-1]
		if len(agent.ToolResults(req)) > 0 {
			if strings.Contains(last, "approved plan revision") {
				return agent.ScriptedReply{Text: "Plan done."}, nil
			}
			return agent.ScriptedReply{Text: "Here is the plan."}, nil
		}
		todo := func(status string) []map[string]string {
			return []map[string]string{{"content": "migrate", "status": status}, {"content": "verify", "status": status}}
		}
		if strings.Contains(last, "approved plan revision") {
			return agent.ScriptedReply{ToolCalls: []agent.ScriptedToolCall{{ID: "t2", Name: "write_todos", Arguments: map[string]any{"todos": todo("completed")}}}}, nil
		}
		if len(req.Tools) == 1 && req.Tools[0].Name == "write_todos" {
			return agent.ScriptedReply{ToolCalls: []agent.ScriptedToolCall{{ID: "t1", Name: "write_todos", Arguments: map[string]any{"todos": todo("pending")}}}}, nil
		}
		return agent.ScriptedReply{Text: "chat"}, nil
	})
	runner, err := loop.New(agent.Definition{Name: "planner", Model: model, PlanModeEnabled: true,
		BuiltInTools: []agent.BuiltInTool{agent.BuiltInWriteTodos}})
	if err != nil {
		t.Fatal(err)
	}
	w := engine.NewWorker(c, engine.WorkerOptions{FlowType: "Planner", TaskQueue: tenancy.Tenant("test", "Planner").TaskQueue(), TaskSlots: 4, Runner: runner, PlanMode: true})
	if err := w.Start(); err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	s := client.New(c, testAgent("Planner"))
	ctx := context.Background()
	if ok, err := s.Start(ctx, "s1", ""); !ok || err != nil {
		t.Fatalf("Start = %v, %v", ok, err)
	}
	if ok, err := s.Send(ctx, "s1", "Plan the migration", client.InPlanMode()); !ok || err != nil {
		t.Fatalf("Send in plan mode = %v, %v", ok, err)
	}
	var snap client.Snapshot
	enginetest.Eventually(t, time.Minute, "the draft", func() (bool, error) {
		snap, err = s.Snapshot(ctx, "s1")
		return err == nil && snap.State.TurnCount == 1 && snap.State.ActiveTurnID == "", err
	})
	if snap.Plan == nil || snap.Plan.Status != client.PlanDraft || snap.Plan.Revision != 1 || len(snap.Plan.Todos) != 2 {
		t.Fatalf("plan = %+v, want a draft of revision 1", snap.Plan)
	}
	if ok, err := s.ExecutePlan(ctx, "s1", 2); ok || err != nil {
		t.Errorf("ExecutePlan of a revision that does not exist = %v, %v", ok, err)
	}
	if ok, err := s.ExecutePlan(ctx, "s1", 1); !ok || err != nil {
		t.Fatalf("ExecutePlan = %v, %v", ok, err)
	}
	enginetest.Eventually(t, time.Minute, "the executing turn", func() (bool, error) {
		snap, err = s.Snapshot(ctx, "s1")
		return err == nil && snap.State.TurnCount == 2 && snap.State.ActiveTurnID == "", err
	})
	if snap.Plan.Status != client.PlanCompleted || snap.Plan.Revision != 2 || snap.PendingPlanExecution != 0 {
		t.Errorf("plan = %+v (pending %d), want revision 2 completed", snap.Plan, snap.PendingPlanExecution)
	}
	var turn2 []string
	for _, m := range snap.Messages {
		if m.TurnID == "turn-2" {
			turn2 = append(turn2, string(m.Role)+": "+m.Text)
		}
	}
	if len(turn2) != 4 || turn2[0] != "user: [stepwise] The user approved plan revision 1. Execute it and keep the task statuses current with write_todos." ||
		turn2[3] != "assistant: Plan done." {
		t.Errorf("turn 2 = %q", turn2)
	}
	if ok, err := s.ExecutePlan(ctx, "s1", 2); ok || err != nil {
		t.Errorf("ExecutePlan of a completed plan = %v, %v", ok, err)
	}
}

// TestASessionContinuesAsNewAndKeepsEverything runs a session whose runs
// are kept short: it continues as new many times between Steps, and its
// messages, usage, settings, queue and numbering carry over.
func TestASessionContinuesAsNewAndKeepsEverything(t *testing.T) {
	server := enginetest.StartDevServer(t)
	c := server.Client()
	lookup := agent.MustTool("lookup", "Looks up.", agent.EffectRead,
		func(context.Context, agent.ToolContext, struct{}) (string, error) { return "found", nil })
	model := agent.NewScriptedModel(func(req agent.ModelRequest) (agent.ScriptedReply, error) {
		if results := agent.ToolResults(req); len(results) > 0 {
			return agent.ScriptedReply{Text: "looked up"}, nil
		}
		texts := agent.UserTexts(req)
		if strings.HasPrefix(texts[len(texts)-1], "look") {
			return agent.ScriptedReply{ToolCalls: []agent.ScriptedToolCall{{Name: "lookup", Arguments: map[string]any{}}}}, nil
		}
		return agent.ScriptedReply{Text: "echo " + texts[len(texts)-1]}, nil
	})
	runner, err := loop.New(agent.Definition{Name: "long", Model: model, Tools: []agent.Tool{lookup}})
	if err != nil {
		t.Fatal(err)
	}
	w := engine.NewWorker(c, engine.WorkerOptions{FlowType: "Long", TaskQueue: tenancy.Tenant("test", "Long").TaskQueue(), TaskSlots: 4, Runner: runner,
		ContinueAsNewThreshold: engine.ContinueAsNewThreshold{Events: 40, Bytes: 1 << 20}})
	if err := w.Start(); err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	s := client.New(c, testAgent("Long"))
	ctx := context.Background()
	if ok, err := s.Start(ctx, "s1", "", client.WithSettings(client.SessionSettings{"tone": "brief"})); !ok || err != nil {
		t.Fatalf("Start = %v, %v", ok, err)
	}
	first, err := c.DescribeWorkflow(ctx, s.WorkflowIDOf("s1"), "")
	if err != nil {
		t.Fatal(err)
	}
	const turns = 12
	for i := range turns {
		text := fmt.Sprintf("message %d", i)
		if i%3 == 0 {
			text = fmt.Sprintf("look %d", i)
		}
		if ok, err := s.Send(ctx, "s1", text); !ok || err != nil {
			t.Fatalf("Send %d = %v, %v", i, ok, err)
		}
		enginetest.Eventually(t, time.Minute, "turn "+fmt.Sprint(i+1), func() (bool, error) {
			snap, err := s.Snapshot(ctx, "s1")
			return err == nil && snap.State.TurnCount == i+1 && snap.State.ActiveTurnID == "", err
		})
	}
	last, err := c.DescribeWorkflow(ctx, s.WorkflowIDOf("s1"), "")
	if err != nil {
		t.Fatal(err)
	}
	if last.RawResponse.GetWorkflowExecutionInfo().GetExecution().GetRunId() == first.RawResponse.GetWorkflowExecutionInfo().GetExecution().GetRunId() {
		t.Fatal("the session never continued as new")
	}
	snap, err := s.Snapshot(ctx, "s1")
	if err != nil {
		t.Fatal(err)
	}
	// Four turns call a tool (four messages each), the others answer (two).
	wantMessages := 4*4 + (turns-4)*2
	if len(snap.Messages) != wantMessages || snap.Usage.ModelCalls != int64(turns+4) || string(snap.Settings) != `{"tone":"brief"}` {
		t.Errorf("after continuing as new: %d messages (want %d), usage %+v, settings %s", len(snap.Messages), wantMessages, snap.Usage, snap.Settings)
	}
	for i, m := range snap.Messages {
		if m.Sequence != int64(i+1) {
			t.Fatalf("message %d has sequence %d: the numbering broke across runs", i, m.Sequence)
		}
	}
	if last := snap.Messages[len(snap.Messages)-1]; last.Text != "echo message 11" || last.TurnID != fmt.Sprintf("turn-%d", turns) {
		t.Errorf("last message = %+v", last)
	}
}

// TestRequestsRefuseWhatIsNoSessionID keeps every request to the session
// IDs a session may have: none holds a "/", so none is another Agent's
// workflow ID or a spend counter's, and nothing is sent to the engine.
func TestRequestsRefuseWhatIsNoSessionID(t *testing.T) {
	s := client.New(nil, testAgent("F"))
	for _, id := range []string{"stepwise-spend-counter/F", "team-b/F/s1", "", "-s", "a b"} {
		ok, err := s.Start(context.Background(), id, "hello")
		if ok || !errors.Is(err, client.ErrInvalidSessionID) {
			t.Errorf("Start(%q) = %v, %v; want ErrInvalidSessionID", id, ok, err)
		}
		if _, err := s.Snapshot(context.Background(), id); !errors.Is(err, client.ErrInvalidSessionID) {
			t.Errorf("Snapshot(%q) = %v; want ErrInvalidSessionID", id, err)
		}
		if ok, err := s.Approve(context.Background(), id, "i1"); ok || !errors.Is(err, client.ErrInvalidSessionID) {
			t.Errorf("Approve(%q) = %v, %v; want ErrInvalidSessionID", id, ok, err)
		}
	}
}
