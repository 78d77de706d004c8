package engine

import (
	"context"
	"errors"
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
	h.env.ExecuteWorkflow(testFlowType, SessionInput{Start: session.StartInput{RequestID: "start-1", InitialMessage: initialMessage}})
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
	v, err := h.env.QueryWorkflow(QuerySnapshot)
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
	v, err := h.env.QueryWorkflow(QueryListMessages, req)
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
