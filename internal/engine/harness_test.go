package engine

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/mock"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/testsuite"
	"go.temporal.io/sdk/workflow"

	"github.com/stepwise-run/stepwise/internal/loop"
	"github.com/stepwise-run/stepwise/internal/session"
	"github.com/stepwise-run/stepwise/internal/sessionrpc"
	"github.com/stepwise-run/stepwise/internal/tracing"
	"github.com/stepwise-run/stepwise/pkg/agent"
)

const testFlowType = "TestAgent"

// harness runs the session workflow in Temporal's test environment with the
// real activities and the built-in loop, with time skipping.
type harness struct {
	t      *testing.T
	suite  testsuite.WorkflowTestSuite
	env    *testsuite.TestWorkflowEnvironment
	events *recordedEvents
	acts   *Activities
	flow   *Flow
	moves  *moveTracer
	steps  []func()
	gap    time.Duration
}

// recordedEvents keeps every event written.
type recordedEvents struct {
	mu     sync.Mutex
	events []session.Event
}

func (r *recordedEvents) Write(_ string, e session.Event) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.events = append(r.events, e)
}

func (r *recordedEvents) ofType(t session.EventType) []session.Event {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []session.Event
	for _, e := range r.events {
		if e.Type == t {
			out = append(out, e)
		}
	}
	return out
}

// envLoader answers RunModel's state load with a query of the test
// environment's workflow.
type envLoader struct {
	env *testsuite.TestWorkflowEnvironment
}

func (l envLoader) LoadTurn(_ context.Context, _, _, turnID string) (session.TurnContext, error) {
	v, err := l.env.QueryWorkflow(QueryTurnContext, turnID)
	if err != nil {
		return session.TurnContext{}, err
	}
	var tc session.TurnContext
	return tc, v.Get(&tc)
}

func (l envLoader) ToolCallControl(_ context.Context, _, _, turnID, toolCallID string) (string, error) {
	v, err := l.env.QueryWorkflow(QueryToolCallControl, ToolCallControlRequest{TurnID: turnID, ToolCallID: toolCallID})
	if err != nil {
		return "", err
	}
	var reason string
	return reason, v.Get(&reason)
}

func newHarness(t *testing.T, def agent.Definition) *harness {
	t.Helper()
	h := &harness{t: t, events: &recordedEvents{}, moves: &moveTracer{}, gap: time.Minute}
	h.env = h.suite.NewTestWorkflowEnvironment()
	h.env.SetTestTimeout(30 * time.Second)
	runner, err := loop.New(def)
	if err != nil {
		t.Fatal(err)
	}
	timings := DefaultTimings()
	flow := &Flow{Events: h.events, Timings: timings, Trace: h.moves.trace}
	h.flow = flow
	h.env.RegisterWorkflowWithOptions(flow.Run, workflow.RegisterOptions{Name: testFlowType})
	h.acts = &Activities{Runner: runner, State: envLoader{h.env}, Events: h.events}
	h.acts.Register(h.env)
	return h
}

// traced makes the session's Steps emit spans, with content, to the
// returned exporter.
func (h *harness) traced() *tracetest.InMemoryExporter {
	spans := tracetest.NewInMemoryExporter()
	tracer := tracing.New(tracing.Options{AgentName: "t", SampleRatio: 1, CaptureMessageContent: true,
		Processors: []sdktrace.SpanProcessor{sdktrace.NewSimpleSpanProcessor(spans)}})
	h.flow.Tracer, h.acts.Tracer = tracer, tracer
	return spans
}

// slowFirstCall makes the first attempt of a model Step (RunModel or
// CompactContext) take d of workflow time before it runs, so a step can
// steer or cancel the turn while that model call runs.
func (h *harness) slowFirstCall(step session.StepName, d time.Duration) {
	h.slowCall(step, 1, d)
}

// slowCall makes the nth attempt of a Step take d of workflow time before
// it runs, so an update sent beside the one that scheduled it always lands
// first.
func (h *harness) slowCall(step session.StepName, nth int, d time.Duration) {
	var mu sync.Mutex
	calls := 0
	delay := func() time.Duration {
		mu.Lock()
		defer mu.Unlock()
		if calls++; calls == nth {
			return d
		}
		return 0
	}
	real := map[session.StepName]any{
		session.StepRunModel: h.acts.RunModel, session.StepCompactContext: h.acts.CompactContext,
		session.StepCallSingleAttemptTool: h.acts.CallSingleAttemptTool,
	}[step]
	h.env.OnActivity(string(step), mock.Anything, mock.Anything).AfterFn(delay).Return(real)
}

// then schedules a step a minute of workflow time after the previous one,
// when the session has settled.
func (h *harness) then(step func()) {
	h.steps = append(h.steps, step)
}

// run starts the session with an initial message, runs the steps, and
// stops the session after the last one.
func (h *harness) run(initialMessage string) {
	h.t.Helper()
	for i, step := range h.steps {
		h.env.RegisterDelayedCallback(step, time.Duration(i+1)*h.gap)
	}
	h.env.RegisterDelayedCallback(h.env.CancelWorkflow, time.Duration(len(h.steps)+1)*h.gap)
	h.env.ExecuteWorkflow(testFlowType, sessionrpc.SessionInput{Start: session.StartInput{RequestID: "start-1", InitialMessage: initialMessage}})
	h.moves.checkInGraph(h.t)
	err := h.env.GetWorkflowError()
	var canceled *temporal.CanceledError
	if err != nil && !errors.As(err, &canceled) {
		h.t.Fatalf("workflow ended with %v", err)
	}
}

// expect calls an update and checks, once the session has handled it,
// that it returned want: true, or false for a rejection.
func (h *harness) expect(name string, arg any, want bool) {
	h.t.Helper()
	t := h.t
	check := func(got bool, err error) {
		if got != want {
			t.Errorf("%s(%+v) = %v (%v), want %v", name, arg, got, err, want)
		}
	}
	h.env.UpdateWorkflow(name, "", &testsuite.TestUpdateCallback{
		OnReject: func(err error) { check(false, err) },
		OnAccept: func() {},
		OnComplete: func(v any, err error) {
			if err != nil {
				check(false, err)
				return
			}
			ok, _ := v.(bool)
			check(ok, nil)
		},
	}, arg)
}

func (h *harness) snapshot() session.Snapshot {
	h.t.Helper()
	v, err := h.env.QueryWorkflow(sessionrpc.QuerySnapshot)
	if err != nil {
		h.t.Fatalf("snapshot: %v", err)
	}
	var snap session.Snapshot
	if err := v.Get(&snap); err != nil {
		h.t.Fatal(err)
	}
	return snap
}

func (h *harness) messages(req session.ListMessagesRequest) session.MessagesPage {
	h.t.Helper()
	v, err := h.env.QueryWorkflow(sessionrpc.QueryListMessages, req)
	if err != nil {
		h.t.Fatalf("list messages: %v", err)
	}
	var page session.MessagesPage
	if err := v.Get(&page); err != nil {
		h.t.Fatal(err)
	}
	return page
}

// script returns a scripted model that answers with the replies in turn,
// and then with the last one.
func script(replies ...agent.ScriptedReply) *agent.ScriptedModel {
	var mu sync.Mutex
	n := 0
	return agent.NewScriptedModel(func(agent.ModelRequest) (agent.ScriptedReply, error) {
		mu.Lock()
		defer mu.Unlock()
		r := replies[min(n, len(replies)-1)]
		n++
		return r, nil
	})
}

func toolCall(id, name string, args any) agent.ScriptedToolCall {
	return agent.ScriptedToolCall{ID: id, Name: name, Arguments: args}
}

// callLog counts tool calls and keeps their contexts.
type callLog struct {
	mu    sync.Mutex
	calls []agent.ToolContext
}

func (l *callLog) add(c agent.ToolContext) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.calls = append(l.calls, c)
	return len(l.calls)
}

func (l *callLog) count() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.calls)
}

type orderArgs struct {
	OrderID string `json:"order_id"`
}

// numbered returns a scripted model whose script also gets the number of
// the call, counted from 1 over the whole session, retried calls included.
func numbered(fn func(n int, req agent.ModelRequest) (agent.ScriptedReply, error)) *agent.ScriptedModel {
	var mu sync.Mutex
	n := 0
	return agent.NewScriptedModel(func(req agent.ModelRequest) (agent.ScriptedReply, error) {
		mu.Lock()
		n++
		k := n
		mu.Unlock()
		return fn(k, req)
	})
}

// callsThenAnswer returns a model that makes the calls at the start of
// every turn and answers "done" once it has their results.
func callsThenAnswer(calls ...agent.ScriptedToolCall) *agent.ScriptedModel {
	return agent.NewScriptedModel(func(req agent.ModelRequest) (agent.ScriptedReply, error) {
		if len(agent.ToolResults(req)) > 0 {
			return agent.ScriptedReply{Text: "done"}, nil
		}
		return agent.ScriptedReply{ToolCalls: calls}, nil
	})
}

// editedModel changes each response of a scripted model before the runner
// sees it, for responses a script cannot produce.
type editedModel struct {
	*agent.ScriptedModel
	edit func(resp *agent.ModelResponse)
}

func (m editedModel) CallModel(ctx context.Context, req agent.ModelRequest, out agent.OutputWriter) (agent.ModelResponse, error) {
	resp, err := m.ScriptedModel.CallModel(ctx, req, out)
	if err == nil {
		m.edit(&resp)
	}
	return resp, err
}

// orderTool is a function tool on orderArgs that logs every call and then
// behaves as told; a nil behaviour succeeds with "<name> <order_id>".
func orderTool(name string, effect agent.Effect, log *callLog, behave func(agent.ToolContext) (string, error), opts ...agent.ToolOption) agent.Tool {
	return agent.MustTool(name, "A test tool.", effect,
		func(_ context.Context, call agent.ToolContext, a orderArgs) (string, error) {
			log.add(call)
			if behave == nil {
				return name + " " + a.OrderID, nil
			}
			return behave(call)
		}, opts...)
}

func order7(id, name string) agent.ScriptedToolCall {
	return toolCall(id, name, orderArgs{OrderID: "7"})
}

// toolMessage returns the stored result of a tool call.
func toolMessage(t *testing.T, snap session.Snapshot, id string) session.Message {
	t.Helper()
	for _, m := range snap.Messages {
		if m.Role == session.RoleTool && m.ToolCallID == id {
			return m
		}
	}
	t.Fatalf("no stored result for tool call %s in %+v", id, snap.Messages)
	return session.Message{}
}

// toolRecord returns the active turn's record of a tool call.
func toolRecord(t *testing.T, snap session.Snapshot, id string) session.ToolCallRecord {
	t.Helper()
	for _, r := range snap.ToolCalls {
		if r.ID == id {
			return r
		}
	}
	t.Fatalf("no record of tool call %s in %+v", id, snap.ToolCalls)
	return session.ToolCallRecord{}
}

// seenResults returns the tool results the model was last given, by tool
// call ID.
func seenResults(t *testing.T, m *agent.ScriptedModel) map[string]string {
	t.Helper()
	reqs := m.Requests()
	if len(reqs) == 0 {
		t.Fatal("the model was never called")
	}
	out := map[string]string{}
	for _, r := range agent.ToolResults(reqs[len(reqs)-1]) {
		out[r.ToolCallID] = r.Output
	}
	return out
}

func payload(t *testing.T, e session.Event) map[string]any {
	t.Helper()
	var p map[string]any
	if err := json.Unmarshal(e.Payload, &p); err != nil {
		t.Fatalf("payload of %s: %v", e.Type, err)
	}
	return p
}

// eventsFor lists the events of a type whose payload names the tool call.
func (h *harness) eventsFor(typ session.EventType, toolCallID string) []session.Event {
	var out []session.Event
	for _, e := range h.events.ofType(typ) {
		if payload(h.t, e)["tool_call_id"] == toolCallID {
			out = append(out, e)
		}
	}
	return out
}

// finishedStatus is the status of the one tool_call_finished event of a
// call.
func (h *harness) finishedStatus(toolCallID string) session.ToolCallStatus {
	h.t.Helper()
	evs := h.eventsFor(session.EventToolCallFinished, toolCallID)
	if len(evs) != 1 {
		h.t.Fatalf("tool_call_finished events of %s = %d, want 1", toolCallID, len(evs))
	}
	return session.ToolCallStatus(payload(h.t, evs[0])["status"].(string))
}

// refuse calls an update and checks that the session refuses it for the
// reason given.
func (h *harness) refuse(name string, arg any, reason string) {
	h.t.Helper()
	t := h.t
	check := func(err error) {
		if err == nil || !strings.Contains(err.Error(), reason) {
			t.Errorf("%s(%+v) refused with %v, want a refusal for %q", name, arg, err, reason)
		}
	}
	h.env.UpdateWorkflow(name, "", &testsuite.TestUpdateCallback{
		OnReject: check,
		OnAccept: func() {},
		OnComplete: func(v any, err error) {
			if err == nil {
				t.Errorf("%s(%+v) = %v, want a refusal for %q", name, arg, v, reason)
				return
			}
			check(err)
		},
	}, arg)
}

// at schedules a callback at a time after the start, besides the steps.
func (h *harness) at(d time.Duration, f func()) {
	h.env.RegisterDelayedCallback(f, d)
}

func approve(id string) session.ResolveRequest {
	return session.ResolveRequest{InterruptID: id, Approved: true}
}
