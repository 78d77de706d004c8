package tracing

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/stepwise-run/stepwise/internal/session"
)

func recorded(o Options) (*Tracer, *tracetest.InMemoryExporter) {
	exp := tracetest.NewInMemoryExporter()
	o.Processors = append(o.Processors, sdktrace.NewSimpleSpanProcessor(exp))
	if o.SampleRatio == 0 {
		o.SampleRatio = 1
	}
	if o.AgentName == "" {
		o.AgentName = "Triage"
	}
	return New(o), exp
}

func attr(s tracetest.SpanStub, key string) (string, bool) {
	for _, kv := range s.Attributes {
		if string(kv.Key) == key {
			return kv.Value.String(), true
		}
	}
	return "", false
}

func activation(n int) Activation {
	return Activation{
		Step:   StepAttempt{SessionID: "s1", RunID: "r2", StepType: "AwaitUserMessage", StepExecutionID: "AwaitUserMessage/turn-1", Attempt: 1, TurnID: "turn-1"},
		Number: n, Trigger: TriggerUserMessage, UserMessageKey: 4, Start: time.Now(), Input: "Where is order 7?",
	}
}

func TestARootsContextIsDerivedFromTheSessionAlone(t *testing.T) {
	a, _ := recorded(Options{})
	b, _ := recorded(Options{AgentName: "Other"})
	first := a.RootContext(activation(1))
	if first == "" || first != b.RootContext(activation(1)) {
		t.Fatalf("two tracers derived %q and %q for one activation", first, b.RootContext(activation(1)))
	}
	if !ParseTraceparent(first).IsSampled() {
		t.Errorf("%s is not sampled at ratio 1", first)
	}
	seen := map[string]bool{first: true}
	for _, change := range []func(*Activation){
		func(x *Activation) { x.Number = 2 },
		func(x *Activation) { x.Step.SessionID = "s2" },
		func(x *Activation) { x.Step.RunID = "r9" },
		func(x *Activation) { x.Step.SessionID, x.Step.RunID = "s1r", "2" },
	} {
		x := activation(1)
		change(&x)
		tp := a.RootContext(x)
		if seen[tp] {
			t.Errorf("activation %+v repeats the trace context %s", x, tp)
		}
		seen[tp] = true
	}
	var none *Tracer
	if got := none.RootContext(activation(1)); got != "" {
		t.Errorf("a nil tracer derived %q", got)
	}
}

func TestSamplingIsDecidedFromTheTraceIDSoEveryWorkerAgrees(t *testing.T) {
	half, exp := recorded(Options{SampleRatio: 0.5})
	never, _ := recorded(Options{SampleRatio: 0})
	never.sampler = sdktrace.TraceIDRatioBased(0)
	sampled := 0
	for n := 1; n <= 200; n++ {
		tp := half.RootContext(activation(n))
		sc := ParseTraceparent(tp)
		want := sdktrace.TraceIDRatioBased(0.5).ShouldSample(sdktrace.SamplingParameters{TraceID: sc.TraceID()}).Decision == sdktrace.RecordAndSample
		if sc.IsSampled() != want {
			t.Fatalf("activation %d: sampled %v, the ratio sampler says %v", n, sc.IsSampled(), want)
		}
		if ParseTraceparent(never.RootContext(activation(n))).IsSampled() {
			t.Fatalf("activation %d is sampled at ratio 0", n)
		}
		a := activation(n)
		half.EmitRoot(a)
		if sc.IsSampled() {
			sampled++
		}
	}
	if sampled == 0 || sampled == 200 {
		t.Fatalf("%d of 200 activations sampled at ratio 0.5", sampled)
	}
	// A dropped root stores its unsampled context and exports nothing.
	if got := len(exp.GetSpans()); got != sampled {
		t.Errorf("%d roots exported, want the %d sampled", got, sampled)
	}
}

func TestTheRootHasItsDerivedIDsAndLinksThePreviousActivation(t *testing.T) {
	tr, exp := recorded(Options{CaptureMessageContent: true})
	prev := tr.RootContext(activation(1))
	a := activation(2)
	a.Previous = prev
	approved := true
	a.Trigger, a.InterruptID, a.Approved = TriggerInterruptResolution, "int-1", &approved
	tr.EmitRoot(a)
	spans := exp.GetSpans()
	if len(spans) != 1 {
		t.Fatalf("%d spans, want the root", len(spans))
	}
	root := spans[0]
	want := ParseTraceparent(tr.RootContext(a))
	if root.Name != "invoke_agent Triage" || !root.SpanContext.WithRemote(true).Equal(want) || root.Parent.IsValid() || root.SpanKind != trace.SpanKindInternal {
		t.Errorf("root = %s %v under %v, want %v", root.Name, root.SpanContext, root.Parent, want)
	}
	if len(root.Links) != 1 || !root.Links[0].SpanContext.Equal(ParseTraceparent(prev)) {
		t.Errorf("links = %v, want the previous root", root.Links)
	}
	for key, value := range map[string]string{
		"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "Triage", "gen_ai.conversation.id": "s1",
		"stepwise.run.id": "r2", "stepwise.step.type": "AwaitUserMessage", "stepwise.agent.turn.id": "turn-1",
		"stepwise.agent.activation.trigger": "interrupt_resolution", "stepwise.agent.interrupt.id": "int-1",
		"stepwise.agent.interrupt.approved": "true", "stepwise.agent.user_message.key": "4",
		"gen_ai.input.messages": `[{"role":"user","parts":[{"content":"Where is order 7?","type":"text"}]}]`,
	} {
		if got, _ := attr(root, key); got != value {
			t.Errorf("%s = %q, want %q", key, got, value)
		}
	}
	if root.InstrumentationScope.Name != ScopeName || root.InstrumentationScope.SchemaURL != ConventionsGenAI142Dev.SchemaURL() {
		t.Errorf("scope = %+v", root.InstrumentationScope)
	}
}

func TestChatSpansFollowTheChosenConventions(t *testing.T) {
	call := ChatCall{
		Step:  StepAttempt{SessionID: "s1", StepType: "RunModel", StepExecutionID: "RunModel/turn-1/1", Attempt: 2, TurnID: "turn-1"},
		Start: time.Now(), End: time.Now(),
		Metadata:     session.CallMetadata{RequestModel: "gpt-5", ResponseModel: "gpt-5-2026", Provider: "openai", ResponseID: "resp-1", FinishReasons: []string{"stop"}},
		Usage:        session.Usage{InputTokens: 100, OutputTokens: 20, CachedInputTokens: 40, ReasoningTokens: 5},
		Input:        []session.Message{{Sequence: 3, Role: session.RoleUser, Text: "hi"}},
		Output:       []session.Message{{Role: session.RoleAssistant, Text: "hello", ToolCalls: []session.ToolCall{{ID: "c1", Name: "lookup", Arguments: "{}"}}}},
		LastInputKey: 3, RequestedToolCallIDs: []string{"c1"},
	}
	cases := []struct {
		conv        Conventions
		has, hasNot []string
	}{
		{ConventionsGenAI142Dev, []string{"gen_ai.provider.name", "gen_ai.usage.cache_read.input_tokens", "gen_ai.usage.reasoning.output_tokens", "gen_ai.input.messages", "gen_ai.output.messages"},
			[]string{"gen_ai.system"}},
		{Conventions136, []string{"gen_ai.system", "gen_ai.usage.input_tokens"},
			[]string{"gen_ai.provider.name", "gen_ai.usage.cache_read.input_tokens", "gen_ai.usage.reasoning.output_tokens", "gen_ai.input.messages", "gen_ai.output.messages"}},
	}
	for _, c := range cases {
		t.Run(string(c.conv), func(t *testing.T) {
			tr, exp := recorded(Options{Conventions: c.conv, CaptureMessageContent: true})
			c2 := call
			c2.Parent = tr.RootContext(activation(1))
			tr.Chat(c2)
			spans := exp.GetSpans()
			if len(spans) != 1 || spans[0].Name != "chat gpt-5" || spans[0].SpanKind != trace.SpanKindClient {
				t.Fatalf("spans = %v", spans)
			}
			if !spans[0].Parent.Equal(ParseTraceparent(c2.Parent)) {
				t.Errorf("parent = %v, want the root", spans[0].Parent)
			}
			for _, k := range c.has {
				if _, ok := attr(spans[0], k); !ok {
					t.Errorf("%s is missing", k)
				}
			}
			for _, k := range c.hasNot {
				if v, ok := attr(spans[0], k); ok {
					t.Errorf("%s = %q, want none", k, v)
				}
			}
			if spans[0].InstrumentationScope.SchemaURL != c.conv.SchemaURL() {
				t.Errorf("schema URL = %s", spans[0].InstrumentationScope.SchemaURL)
			}
			if got, _ := attr(spans[0], "stepwise.step.attempt"); got != "2" {
				t.Errorf("attempt = %s", got)
			}
		})
	}
}

func TestContentIsCapturedOnlyWhenAsked(t *testing.T) {
	for _, capture := range []bool{false, true} {
		tr, exp := recorded(Options{CaptureMessageContent: capture})
		ctx, span := tr.StartTool(context.Background(), ToolCall{Parent: tr.RootContext(activation(1)), ID: "c1", Name: "lookup", Effect: "read", Arguments: `{"order":7}`})
		if !trace.SpanContextFromContext(ctx).IsValid() {
			t.Fatal("the tool's span is not current")
		}
		span.End(session.ToolOutcome{Kind: session.ToolResultSucceeded, Output: "shipped"}, nil)
		tr.EmitRoot(activation(1))
		tr.Chat(ChatCall{Input: []session.Message{{Text: "secret question"}}, Output: []session.Message{{Text: "secret answer"}}})
		for _, s := range exp.GetSpans() {
			for _, kv := range s.Attributes {
				text := kv.Value.String()
				leaked := strings.Contains(text, "order") || strings.Contains(text, "shipped") || strings.Contains(text, "secret")
				if leaked && !capture {
					t.Errorf("capture %v: %s carries %s=%s", capture, s.Name, kv.Key, text)
				}
			}
		}
		if capture {
			tool := exp.GetSpans()[0]
			args, _ := attr(tool, "gen_ai.tool.call.arguments")
			result, _ := attr(tool, "gen_ai.tool.call.result")
			if args != `{"order":7}` || result != "shipped" {
				t.Errorf("captured arguments %q and result %q", args, result)
			}
		}
	}
}

func TestAToolAttemptsSpanRecordsItsOutcome(t *testing.T) {
	tr, exp := recorded(Options{})
	parent := tr.RootContext(activation(1))
	_, span := tr.StartTool(context.Background(), ToolCall{Parent: parent, ID: "c1", Name: "refund", Effect: "idempotent_write"})
	span.End(session.ToolOutcome{Kind: session.ToolResultFailed, Error: "account closed"}, nil)
	_, span = tr.StartTool(context.Background(), ToolCall{Parent: parent, ID: "c2", Name: "refund"})
	span.End(session.ToolOutcome{}, errors.New("connection reset"))
	_, span = tr.StartTool(context.Background(), ToolCall{ID: "c3", Name: "refund"})
	span.End(session.ToolOutcome{Kind: session.ToolResultOutcomeUnknown}, nil)
	spans := exp.GetSpans()
	if len(spans) != 3 {
		t.Fatalf("%d spans", len(spans))
	}
	if typ, _ := attr(spans[0], "error.type"); spans[0].Status.Code != codes.Error || typ != "ToolExecutionError" {
		t.Errorf("a failed call: %v %s", spans[0].Status, typ)
	}
	if typ, _ := attr(spans[1], "error.type"); spans[1].Status.Code != codes.Error || typ != "errors.errorString" || len(spans[1].Events) != 1 {
		t.Errorf("a failed attempt: %v %s %v", spans[1].Status, typ, spans[1].Events)
	}
	if status, _ := attr(spans[2], "stepwise.agent.tool_call.status"); status != "outcome_unknown" || spans[2].Parent.IsValid() {
		t.Errorf("a record without trace context: status %s under %v, want a trace of its own", status, spans[2].Parent)
	}
	if spans[0].Parent.SpanID() != ParseTraceparent(parent).SpanID() {
		t.Errorf("the call is not under its record's root")
	}
}

// panicking fails every span it is shown, as a broken processor would.
type panicking struct{}

func (panicking) OnStart(context.Context, sdktrace.ReadWriteSpan) { panic("broken processor") }
func (panicking) OnEnd(sdktrace.ReadOnlySpan)                     { panic("broken processor") }
func (panicking) Shutdown(context.Context) error                  { return nil }
func (panicking) ForceFlush(context.Context) error                { return nil }

func TestAFailingProcessorIsLoggedOnceAsAWarningAndSkipsTheSpan(t *testing.T) {
	var logs bytes.Buffer
	tr := New(Options{SampleRatio: 1, Processors: []sdktrace.SpanProcessor{panicking{}},
		Logger: slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))})
	ctx := context.Background()
	tr.EmitRoot(activation(1))
	got, span := tr.StartTool(ctx, ToolCall{Name: "lookup"})
	span.End(session.ToolOutcome{}, nil)
	tr.Chat(ChatCall{})
	if got != ctx || span != nil {
		t.Errorf("a failed start returned %v and %v, want the caller's context and no span", got, span)
	}
	if tr.Failures() != 3 {
		t.Errorf("failures = %d, want 3", tr.Failures())
	}
	if n := strings.Count(logs.String(), "level=WARN"); n != 1 || !strings.Contains(logs.String(), "stack=") {
		t.Errorf("want one warning with its stack, then debug lines:\n%s", logs.String())
	}
	if n := strings.Count(logs.String(), "level=DEBUG"); n != 2 {
		t.Errorf("%d debug lines, want 2", n)
	}
}

func TestTraceparentsRoundTripAndBadOnesAreInvalid(t *testing.T) {
	tr, _ := recorded(Options{})
	tp := tr.RootContext(activation(1))
	if Traceparent(ParseTraceparent(tp)) != tp {
		t.Errorf("%s does not round-trip", tp)
	}
	for _, bad := range []string{"", "00-zz-yy-01", "00-00000000000000000000000000000000-0000000000000000-01", "not a header"} {
		if ParseTraceparent(bad).IsValid() {
			t.Errorf("%q parsed as valid", bad)
		}
	}
	if ContextWithParent(context.Background(), "junk") != context.Background() {
		t.Error("a bad traceparent changed the context")
	}
}

// refusing fails every export.
type refusing struct{ tracetest.InMemoryExporter }

func (*refusing) ExportSpans(context.Context, []sdktrace.ReadOnlySpan) error {
	return errors.New("connection refused")
}

func TestAFailedExportIsLoggedAsAWarningAtMostOnceAMinute(t *testing.T) {
	var logs bytes.Buffer
	exp := LogFailures(&refusing{}, slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))).(*loggedExporter)
	clock := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	exp.now = func() time.Time { return clock }
	for _, step := range []time.Duration{0, 10 * time.Second, 30 * time.Second, time.Minute} {
		clock = clock.Add(step)
		if err := exp.ExportSpans(context.Background(), nil); err != nil {
			t.Fatalf("the failure reached the span processor: %v", err)
		}
	}
	if warns, debugs := strings.Count(logs.String(), "level=WARN"), strings.Count(logs.String(), "level=DEBUG"); warns != 2 || debugs != 2 {
		t.Errorf("%d warnings and %d debug lines, want 2 and 2:\n%s", warns, debugs, logs.String())
	}
	if !strings.Contains(logs.String(), "connection refused") {
		t.Errorf("the log does not say why:\n%s", logs.String())
	}
}

func TestAnAttemptOfSeveralModelCallsIsAnInternalSpanWithoutUsage(t *testing.T) {
	tr, exp := recorded(Options{})
	tr.Chat(ChatCall{Usage: session.Usage{ModelCalls: 3, InputTokens: 300, OutputTokens: 30}})
	tr.Chat(ChatCall{Usage: session.Usage{ModelCalls: 1, InputTokens: 100, OutputTokens: 10}})
	spans := exp.GetSpans()
	if spans[0].SpanKind != trace.SpanKindInternal || spans[1].SpanKind != trace.SpanKindClient {
		t.Errorf("kinds = %v and %v, want internal and client", spans[0].SpanKind, spans[1].SpanKind)
	}
	if _, ok := attr(spans[0], "gen_ai.usage.input_tokens"); ok {
		t.Error("a summed usage is on the span of several calls")
	}
	if got, _ := attr(spans[1], "gen_ai.usage.input_tokens"); got != "100" {
		t.Errorf("input tokens = %q", got)
	}
}

func TestADroppedActivationDropsItsModelAndToolSpansToo(t *testing.T) {
	tr, exp := recorded(Options{SampleRatio: 1})
	tr.sampler = sdktrace.TraceIDRatioBased(0)
	dropped := tr.RootContext(activation(1))
	if sc := ParseTraceparent(dropped); !sc.IsValid() || sc.IsSampled() {
		t.Fatalf("a dropped root stores %q, want a valid unsampled context", dropped)
	}
	tr.Chat(ChatCall{Parent: dropped})
	_, span := tr.StartTool(context.Background(), ToolCall{Parent: dropped, Name: "lookup"})
	span.End(session.ToolOutcome{Kind: session.ToolResultSucceeded}, nil)
	if got := exp.GetSpans(); len(got) != 0 {
		t.Errorf("%d spans of a dropped activation were exported, first %s", len(got), got[0].Name)
	}
}
