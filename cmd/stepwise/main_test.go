package main

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"go.temporal.io/sdk/client"

	"github.com/stepwise-run/stepwise/internal/engine"
	"github.com/stepwise-run/stepwise/internal/enginetest"
	"github.com/stepwise-run/stepwise/internal/loop"
	"github.com/stepwise-run/stepwise/internal/tenancy"
	"github.com/stepwise-run/stepwise/pkg/agent"
	sessions "github.com/stepwise-run/stepwise/pkg/client"
)

const waitLong = 30 * time.Second

type refundArgs struct {
	Order string `json:"order"`
}

// refundScript asks to refund the order of a message "refund <order>" in
// the tool call "r1", reports tool results, and echoes anything else.
func refundScript(req agent.ModelRequest) (agent.ScriptedReply, error) {
	if results := agent.ToolResults(req); len(results) > 0 {
		parts := make([]string, 0, len(results))
		for _, r := range results {
			parts = append(parts, r.Output)
		}
		return agent.ScriptedReply{Text: "Done: " + strings.Join(parts, "; ")}, nil
	}
	texts := agent.UserTexts(req)
	last := texts[len(texts)-1]
	if order, ok := strings.CutPrefix(last, "refund "); ok {
		return agent.ScriptedReply{ToolCalls: []agent.ScriptedToolCall{{ID: "r1", Name: "refund_order", Arguments: refundArgs{Order: order}}}}, nil
	}
	return agent.ScriptedReply{Text: "Echo: " + last}, nil
}

// cli is a dev server with an in-process session worker whose one function
// tool, refund_order, waits for approval.
type cli struct {
	t        *testing.T
	c        client.Client
	flowType string
	sessions *sessions.Sessions
	refunds  *atomic.Int32
}

func newCLI(t *testing.T, flowType string) *cli {
	t.Helper()
	server := enginetest.StartDevServer(t)
	c := newCLIWithoutWorker(t, server.Client(), flowType)
	c.startWorker()
	return c
}

// newCLIWithoutWorker is a CLI whose Flow type has no worker until
// startWorker.
func newCLIWithoutWorker(t *testing.T, c client.Client, flowType string) *cli {
	return &cli{t: t, c: c, flowType: flowType, sessions: sessions.New(c, cliAgent(flowType)), refunds: &atomic.Int32{}}
}

// cliAgent is the Agent the CLI tests address, as --agent team/cli names it.
func cliAgent(flowType string) sessions.Agent {
	return sessions.Agent{Namespace: "team", Name: "cli", FlowType: flowType}
}

// startWorker starts an in-process worker whose one function tool,
// refund_order, waits for approval.
func (c *cli) startWorker() {
	t, refunds := c.t, c.refunds
	refund := agent.MustTool("refund_order", "Refunds an order.", agent.EffectNonIdempotentWrite,
		func(_ context.Context, _ agent.ToolContext, a refundArgs) (string, error) {
			refunds.Add(1)
			return "refunded order " + a.Order, nil
		})
	runner, err := loop.New(agent.Definition{
		Name: "cli", Model: agent.NewScriptedModel(refundScript), Tools: []agent.Tool{refund}, MaxModelCallsPerTurn: 10,
	})
	if err != nil {
		t.Fatal(err)
	}
	w := engine.NewWorker(c.c, engine.WorkerOptions{
		FlowType: c.flowType, TaskQueue: tenancy.Tenant("team", c.flowType).TaskQueue(), TaskSlots: 10, Runner: runner,
	})
	if err := w.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(w.Stop)
}

// runFor runs one command line with flags and a timeout, and returns its
// exit status, output and error.
func (c *cli) runFor(timeout time.Duration, cfg config, args ...string) (int, string, error) {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cfg.agent = cliAgent(c.flowType)
	var out bytes.Buffer
	status, err := run(ctx, c.c, cfg, args, &out)
	return status, out.String(), err
}

// run runs one command line and returns its exit status and output.
func (c *cli) run(args ...string) (int, string) {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitLong)
	defer cancel()
	var out bytes.Buffer
	status, err := run(ctx, c.c, config{agent: cliAgent(c.flowType)}, args, &out)
	if err != nil {
		c.t.Fatalf("stepwise %s = %v", strings.Join(args, " "), err)
	}
	return status, out.String()
}

// want runs a command that answers true or false and checks its answer and
// exit status.
func (c *cli) want(answer bool, args ...string) {
	c.t.Helper()
	status, out := c.run(args...)
	wantStatus, wantOut := 0, "true\n"
	if !answer {
		wantStatus, wantOut = exitFalse, "false\n"
	}
	if status != wantStatus || out != wantOut {
		c.t.Errorf("stepwise %s = status %d, %q; want status %d, %q", strings.Join(args, " "), status, out, wantStatus, wantOut)
	}
}

// waitTurns waits until a session has ended turns turns and returns its last
// message.
func (c *cli) waitTurns(id string, turns int) string {
	c.t.Helper()
	var last string
	enginetest.Eventually(c.t, waitLong, "turn to end", func() (bool, error) {
		snap, err := c.sessions.Snapshot(context.Background(), id)
		if err != nil || snap.State == nil || snap.State.TurnCount < turns || snap.State.ActiveTurnID != "" {
			return false, err
		}
		if snap.State.LastTurnError != "" {
			c.t.Fatalf("the turn failed: %s", snap.State.LastTurnError)
		}
		last = snap.Messages[len(snap.Messages)-1].Text
		return true, nil
	})
	return last
}

// waitInterrupt waits until a session has a pending interrupt.
func (c *cli) waitInterrupt(id, interruptID string) sessions.Interrupt {
	c.t.Helper()
	var found sessions.Interrupt
	enginetest.Eventually(c.t, waitLong, "interrupt "+interruptID+" to be pending", func() (bool, error) {
		snap, err := c.sessions.Snapshot(context.Background(), id)
		if err != nil {
			return false, err
		}
		for _, in := range snap.PendingInterrupts {
			if in.ID == interruptID {
				found = in
				return true, nil
			}
		}
		return false, nil
	})
	return found
}

func TestStartPrintsTrueAndASecondStartOfTheSameSessionPrintsFalseWithStatus3(t *testing.T) {
	c := newCLI(t, "CLIStart")
	c.want(true, "start", "s-start", "hello", "there")
	c.want(false, "start", "s-start", "again")
	if last := c.waitTurns("s-start", 1); last != "Echo: hello there" {
		t.Errorf("the first turn answered %q, want the joined message echoed", last)
	}
	snap, err := c.sessions.Snapshot(context.Background(), "s-start")
	if err != nil {
		t.Fatal(err)
	}
	if snap.State.TurnCount != 1 || len(snap.Messages) != 2 {
		t.Errorf("after a refused second start: %d turns, %d messages; want 1 and 2", snap.State.TurnCount, len(snap.Messages))
	}
}

func TestSendStartsATurnAndBlankTextPrintsFalseWithStatus3(t *testing.T) {
	c := newCLI(t, "CLISend")
	c.want(true, "start", "s-send")
	c.want(true, "send", "s-send", "how", "are", "you")
	if last := c.waitTurns("s-send", 1); last != "Echo: how are you" {
		t.Errorf("the turn answered %q, want the sent message echoed", last)
	}
	c.want(false, "send", "s-send", "   ")
}

func TestSettingsReplacesTheSessionSettings(t *testing.T) {
	c := newCLI(t, "CLISettings")
	c.want(true, "start", "s-settings")
	c.want(true, "settings", "s-settings", `{"model":`, `"large"}`)
	snap, err := c.sessions.Snapshot(context.Background(), "s-settings")
	if err != nil || string(snap.Settings) != `{"model":"large"}` {
		t.Errorf("snapshot settings = %s, %v", snap.Settings, err)
	}
}

func TestSnapshotPrintsJSONThatParsesIntoASnapshot(t *testing.T) {
	c := newCLI(t, "CLISnapshot")
	c.want(true, "start", "s-snap", "hi")
	c.waitTurns("s-snap", 1)
	status, out := c.run("snapshot", "s-snap")
	if status != 0 {
		t.Errorf("snapshot exited with status %d", status)
	}
	var snap sessions.Snapshot
	if err := json.Unmarshal([]byte(out), &snap); err != nil {
		t.Fatalf("snapshot printed what is not a snapshot: %v\n%s", err, out)
	}
	if snap.State == nil || snap.State.TurnCount != 1 {
		t.Fatalf("snapshot state = %+v, want one ended turn", snap.State)
	}
	if len(snap.Messages) != 2 || snap.Messages[0].Text != "hi" || snap.Messages[1].Text != "Echo: hi" {
		t.Errorf("snapshot messages = %+v, want the user's hi and the echo", snap.Messages)
	}
}

func TestMessagesPrintsAPageBeforeASequenceWithALimit(t *testing.T) {
	c := newCLI(t, "CLIMessages")
	c.want(true, "start", "s-msgs", "one")
	c.waitTurns("s-msgs", 1)
	c.want(true, "send", "s-msgs", "two")
	c.waitTurns("s-msgs", 2)

	page := func(args ...string) sessions.MessagesPage {
		t.Helper()
		status, out := c.run(append([]string{"messages", "s-msgs"}, args...)...)
		if status != 0 {
			t.Errorf("messages exited with status %d", status)
		}
		var p sessions.MessagesPage
		if err := json.Unmarshal([]byte(out), &p); err != nil {
			t.Fatalf("messages printed what is not a page: %v\n%s", err, out)
		}
		return p
	}
	sequences := func(p sessions.MessagesPage) []int64 {
		var s []int64
		for _, m := range p.Messages {
			s = append(s, m.Sequence)
		}
		return s
	}
	if all := page("0", "200"); len(all.Messages) != 4 || all.Messages[2].Text != "two" || all.FirstSequence != 1 {
		t.Errorf("messages = %+v, want all four, oldest first", all)
	}
	newest := page("0", "1")
	if got := sequences(newest); len(got) != 1 || got[0] != 4 || newest.NextBeforeSequence != 4 {
		t.Errorf("newest page of one = %v, next before %d; want [4], next before 4", got, newest.NextBeforeSequence)
	}
	older := page("4", "2")
	if got := sequences(older); len(got) != 2 || got[0] != 2 || got[1] != 3 || older.NextBeforeSequence != 2 {
		t.Errorf("page of two before 4 = %v, next before %d; want [2 3], next before 2", got, older.NextBeforeSequence)
	}

	var out bytes.Buffer
	if _, err := run(context.Background(), c.c, config{agent: cliAgent(c.flowType)}, []string{"messages", "s-msgs", "0", "many"}, &out); err == nil ||
		!strings.Contains(err.Error(), `limit must be a number, not "many"`) {
		t.Errorf("messages with a bad limit = %v, want an error naming the limit", err)
	}
}

func TestApproveRunsThePendingToolCallAndASecondApprovePrintsFalseWithStatus3(t *testing.T) {
	c := newCLI(t, "CLIApprove")
	c.want(true, "start", "s-approve", "refund 7")
	in := c.waitInterrupt("s-approve", "r1")
	if in.Kind != sessions.InterruptApproval || in.ToolName != "refund_order" || in.Arguments != `{"order":"7"}` {
		t.Errorf("pending interrupt = %+v, want approval of refund_order for order 7", in)
	}
	if n := c.refunds.Load(); n != 0 {
		t.Errorf("refund_order ran %d times before approval", n)
	}
	c.want(true, "approve", "s-approve", "r1")
	c.want(false, "approve", "s-approve", "r1")
	if last := c.waitTurns("s-approve", 1); last != "Done: refunded order 7" {
		t.Errorf("the turn answered %q, want the refund result", last)
	}
	if n := c.refunds.Load(); n != 1 {
		t.Errorf("refund_order ran %d times, want once", n)
	}
}

func TestRejectGivesTheModelTheReasonAndTheToolNeverRuns(t *testing.T) {
	c := newCLI(t, "CLIReject")
	c.want(true, "start", "s-reject", "refund 8")
	c.waitInterrupt("s-reject", "r1")
	c.want(true, "reject", "s-reject", "r1", "too", "expensive")
	c.want(false, "reject", "s-reject", "r1", "again")
	if last := c.waitTurns("s-reject", 1); last != "Done: The user rejected the tool call: too expensive" {
		t.Errorf("the turn answered %q, want the rejection with its reason", last)
	}
	if n := c.refunds.Load(); n != 0 {
		t.Errorf("refund_order ran %d times after a rejection", n)
	}
}

func TestSteerDeleteQueuedAndCancelEndTheTurnWithoutTheWrite(t *testing.T) {
	c := newCLI(t, "CLISteer")
	c.want(true, "start", "s-steer", "refund 7")
	c.waitInterrupt("s-steer", "r1")
	c.want(true, "send", "s-steer", "later")
	c.want(true, "delete-queued", "s-steer", "msg-2")
	c.want(false, "delete-queued", "s-steer", "msg-2")
	c.want(false, "steer-queued", "s-steer", "msg-2")
	c.want(true, "steer", "s-steer", "never", "mind")
	if last := c.waitTurns("s-steer", 2); last != "Echo: never mind" {
		t.Errorf("the steered turn answered %q", last)
	}

	c.want(true, "send", "s-steer", "refund 8")
	c.waitInterrupt("s-steer", "r1")
	c.want(false, "cancel", "s-steer", "turn-1")
	c.want(true, "cancel", "s-steer", "turn-3")
	c.waitTurns("s-steer", 3)
	snap, err := c.sessions.Snapshot(context.Background(), "s-steer")
	if err != nil {
		t.Fatal(err)
	}
	if last := snap.Messages[len(snap.Messages)-1]; snap.State.TurnCount != 3 || last.Text != `{"status":"cancelled","reason":"turn_cancelled_by_user"}` {
		t.Errorf("after the cancel: %d turns, last message %+v", snap.State.TurnCount, last)
	}
	if n := c.refunds.Load(); n != 0 {
		t.Errorf("refund_order ran %d times", n)
	}
}

func TestAnswerPrintsFalseWithStatus3ForAnApprovalOrAnUnknownInterrupt(t *testing.T) {
	c := newCLI(t, "CLIAnswer")
	c.want(true, "start", "s-answer", "refund 9")
	c.waitInterrupt("s-answer", "r1")
	c.want(false, "answer", "s-answer", "r1", "yes")
	c.want(false, "answer", "s-answer", "no-such-interrupt", "yes")
	in := c.waitInterrupt("s-answer", "r1")
	if in.Kind != sessions.InterruptApproval {
		t.Errorf("after refused answers the interrupt is %+v, want the approval still pending", in)
	}
	if n := c.refunds.Load(); n != 0 {
		t.Errorf("refund_order ran %d times after answers were refused", n)
	}
}

func TestWaitingListsASessionWaitingForApproval(t *testing.T) {
	c := newCLI(t, "CLIWaiting")
	c.want(true, "start", "s-waiting", "refund 7")
	c.waitInterrupt("s-waiting", "r1")
	line := sessions.StepAwaitToolApproval + "\t" + c.flowType + "\ts-waiting\n"
	enginetest.Eventually(t, waitLong, "the session to be listed as waiting", func() (bool, error) {
		status, out := c.run("waiting")
		return status == 0 && strings.Contains(out, line), nil
	})
	if status, out := c.run("waiting", sessions.StepAwaitQuestionAnswer); status != 0 || strings.Contains(out, "s-waiting") {
		t.Errorf("waiting %s = status %d, %q; want status 0 without a session waiting for approval",
			sessions.StepAwaitQuestionAnswer, status, out)
	}
	status, out := c.run("waiting", sessions.StepAwaitToolApproval)
	if status != 0 || !strings.Contains(out, line) {
		t.Errorf("waiting %s = status %d, %q; want the session", sessions.StepAwaitToolApproval, status, out)
	}
	for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
		if !strings.HasPrefix(l, sessions.StepAwaitToolApproval+"\t") {
			t.Errorf("waiting %s listed %q from another Step", sessions.StepAwaitToolApproval, l)
		}
	}
}

func TestRunRefusesBadCommandLines(t *testing.T) {
	tests := []struct {
		name     string
		flowType string
		args     []string
		want     string
	}{
		{name: "no flow type", args: []string{"start", "s1"}, want: "--flow-type is required"},
		{name: "an unknown command", flowType: "F", args: []string{"frobnicate", "s1"}, want: `unknown command "frobnicate"`},
		{name: "start without a session", flowType: "F", args: []string{"start"}, want: "start needs <session>"},
		{name: "send without a message", flowType: "F", args: []string{"send", "s1"}, want: "send needs <session> <message>"},
		{name: "approve without an interrupt", flowType: "F", args: []string{"approve", "s1"}, want: "approve needs <session> <interrupt>"},
		{name: "reject without an interrupt", flowType: "F", args: []string{"reject", "s1"}, want: "reject needs <session> <interrupt>"},
		{name: "answer without an answer", flowType: "F", args: []string{"answer", "s1", "q1"}, want: "answer needs <session> <interrupt> <answer>"},
		{name: "snapshot without a session", flowType: "F", args: []string{"snapshot"}, want: "snapshot needs <session>"},
		{name: "plan without a message", flowType: "F", args: []string{"plan", "s1"}, want: "plan needs <session> <message>"},
		{name: "execute-plan with a bad revision", flowType: "F", args: []string{"execute-plan", "s1", "latest"}, want: `revision must be a plan revision number, not "latest"`},
		{name: "steer without a message", flowType: "F", args: []string{"steer", "s1"}, want: "steer needs <session> <message>"},
		{name: "steer-queued without an ID", flowType: "F", args: []string{"steer-queued", "s1"}, want: "steer-queued needs <session> <message-id>"},
		{name: "delete-queued without an ID", flowType: "F", args: []string{"delete-queued", "s1"}, want: "delete-queued needs <session> <message-id>"},
		{name: "cancel without a turn", flowType: "F", args: []string{"cancel", "s1"}, want: "cancel needs <session> <turn>"},
		{name: "settings without JSON", flowType: "F", args: []string{"settings", "s1"}, want: "settings needs <session> <json>"},
		{name: "settings that are not an object", flowType: "F", args: []string{"settings", "s1", `["large"]`}, want: "settings must be a JSON object"},
		{name: "settings that are null", flowType: "F", args: []string{"settings", "s1", "null"}, want: "settings must be a JSON object"},
		{name: "messages without a session", flowType: "F", args: []string{"messages"}, want: "messages needs <session>"},
		{name: "messages with a bad before", flowType: "F", args: []string{"messages", "s1", "latest"}, want: `before must be a message sequence, not "latest"`},
		{name: "messages with a bad limit", flowType: "F", args: []string{"messages", "s1", "0", "ten"}, want: `limit must be a number, not "ten"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var out bytes.Buffer
			// No command here reaches the engine, so there is no client.
			status, err := run(context.Background(), nil, config{agent: sessions.Agent{FlowType: tt.flowType}}, tt.args, &out)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("run(%v) = %d, %v; want an error containing %q", tt.args, status, err, tt.want)
			}
			if out.Len() != 0 {
				t.Errorf("run(%v) printed %q on an error", tt.args, out.String())
			}
		})
	}
}

// TestARequestNoWorkerRunsExitsWithStatus4AndARetryWithItsIDLearnsTheOutcome
// starts a session of a Flow type no worker polls: the CLI prints pending,
// names the task queue and the request ID, and exits with status 4. Once a
// worker runs, the same command with that request ID prints true: the
// first start started the session.
func TestARequestNoWorkerRunsExitsWithStatus4AndARetryWithItsIDLearnsTheOutcome(t *testing.T) {
	server := enginetest.StartDevServer(t)
	c := newCLIWithoutWorker(t, server.Client(), "CLINoWorker")
	status, out, err := c.runFor(15*time.Second, config{}, "start", "s-pending", "hello")
	if status != exitPending || out != "pending\n" || err == nil {
		t.Fatalf("start without a worker = status %d, %q, %v; want status %d, pending", status, out, err, exitPending)
	}
	msg := err.Error()
	requestID := msg[strings.LastIndex(msg, "--request-id ")+len("--request-id "):]
	requestID = strings.Fields(requestID)[0]
	for _, want := range []string{"start_session on session s-pending was sent and waits for a worker",
		"no worker polls task queue stepwise/team/CLINoWorker", "request ID " + requestID} {
		if !strings.Contains(msg, want) {
			t.Errorf("the pending start says %q; want it to say %q", msg, want)
		}
	}

	c.startWorker()
	status, out, err = c.runFor(waitLong, config{requestID: requestID}, "start", "s-pending", "hello")
	if status != 0 || out != "true\n" || err != nil {
		t.Errorf("start again with --request-id %s = status %d, %q, %v; want true", requestID, status, out, err)
	}
	c.want(false, "start", "s-pending", "hello")
	if last := c.waitTurns("s-pending", 1); last != "Echo: hello" {
		t.Errorf("the first turn answered %q", last)
	}
}
