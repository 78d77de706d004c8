package enginetest

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/stepwise-run/stepwise/internal/tracing"
	"github.com/stepwise-run/stepwise/pkg/agent"
	"github.com/stepwise-run/stepwise/pkg/client"
	"github.com/stepwise-run/stepwise/pkg/worker"
	"github.com/stepwise-run/stepwise/pkg/workerconfig"
)

// spanAttr is one attribute of a recorded span, as text.
func spanAttr(s tracetest.SpanStub, key string) string {
	for _, kv := range s.Attributes {
		if string(kv.Key) == key {
			return kv.Value.String()
		}
	}
	return ""
}

// sessionSpans are the recorded spans of one session, oldest first.
func sessionSpans(exp *tracetest.InMemoryExporter, sessionID string) []tracetest.SpanStub {
	var out []tracetest.SpanStub
	for _, s := range exp.GetSpans() {
		if spanAttr(s, "session.id") == sessionID {
			out = append(out, s)
		}
	}
	return out
}

func spansNamed(spans []tracetest.SpanStub, name string) []tracetest.SpanStub {
	var out []tracetest.SpanStub
	for _, s := range spans {
		if s.Name == name {
			out = append(out, s)
		}
	}
	return out
}

// brokenProcessor panics when a span of one session ends, as a faulty
// processor or exporter in the worker might.
type brokenProcessor struct {
	sessionID string
	panics    atomic.Int64
}

func (p *brokenProcessor) OnStart(context.Context, sdktrace.ReadWriteSpan) {}
func (p *brokenProcessor) OnEnd(s sdktrace.ReadOnlySpan) {
	for _, kv := range s.Attributes() {
		if kv.Key == "session.id" && kv.Value.AsString() == p.sessionID {
			p.panics.Add(1)
			panic("the span processor is broken")
		}
	}
}
func (p *brokenProcessor) Shutdown(context.Context) error   { return nil }
func (p *brokenProcessor) ForceFlush(context.Context) error { return nil }

// failingExporter refuses every export.
type failingExporter struct{ calls atomic.Int64 }

func (e *failingExporter) ExportSpans(context.Context, []sdktrace.ReadOnlySpan) error {
	e.calls.Add(1)
	return errors.New("the collector is down")
}
func (e *failingExporter) Shutdown(context.Context) error { return nil }

// syncBuffer is a log buffer that worker goroutines write concurrently.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// tracedWorker runs the stock worker in this process with the stack's
// configuration, a read tool that fails its first attempt, a write that
// waits for approval, and the given span processors. It returns the span
// each write saw as current, by idempotency key.
func tracedWorker(t *testing.T, s *Stack, logs *syncBuffer, processors ...sdktrace.SpanProcessor) *sync.Map {
	t.Helper()
	var flakyAttempts sync.Map
	flaky := agent.MustTool("flaky_read", "Fails its first attempt.", agent.EffectRead,
		func(_ context.Context, call agent.ToolContext, _ noteArgs) (string, error) {
			if _, seen := flakyAttempts.LoadOrStore(call.IdempotencyKey, true); !seen {
				return "", errors.New("the backend timed out")
			}
			return "flaky_read done", nil
		})
	var current sync.Map
	write := agent.MustTool("write_approved", "Writes after approval.", agent.EffectNonIdempotentWrite,
		func(ctx context.Context, call agent.ToolContext, _ noteArgs) (string, error) {
			current.Store(call.IdempotencyKey, trace.SpanContextFromContext(ctx))
			return "write_approved done", nil
		})
	script := func(req agent.ModelRequest) (agent.ScriptedReply, error) {
		texts := agent.UserTexts(req)
		last := texts[len(texts)-1]
		if results := agent.ToolResults(req); len(results) > 0 {
			parts := make([]string, 0, len(results))
			for _, r := range results {
				parts = append(parts, r.ToolName+"="+r.Output)
			}
			return agent.ScriptedReply{Text: "results: " + strings.Join(parts, "; ")}, nil
		}
		if _, rest, ok := strings.Cut(last, "tools: "); ok {
			var reply agent.ScriptedReply
			for i, name := range strings.Split(rest, ",") {
				reply.ToolCalls = append(reply.ToolCalls, agent.ScriptedToolCall{
					ID: "c" + itoa(i+1), Name: strings.TrimSpace(name), Arguments: `{"note":"n"}`,
				})
			}
			return reply, nil
		}
		return agent.ScriptedReply{Text: "echo: " + last}, nil
	}
	cfg := s.Config
	cfg.HealthAddress = freeAddress(t)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- worker.Run(ctx, cfg, worker.Options{
			Tools: []agent.Tool{flaky, write}, Scripts: map[string]agent.Script{"test": script},
			SpanProcessors: processors, StopTimeout: 5 * time.Second,
			Logger: slog.New(slog.NewJSONHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
		})
	}()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("the worker stopped with %v", err)
		}
	})
	Eventually(t, 30*time.Second, "the in-process worker to be ready", func() (bool, error) {
		select {
		case err := <-done:
			t.Fatalf("the worker stopped before it was ready: %v", err)
		default:
		}
		resp, err := http.Get("http://" + cfg.HealthAddress + "/readyz")
		if err != nil {
			return false, nil
		}
		_ = resp.Body.Close()
		return resp.StatusCode == http.StatusOK, nil
	})
	return &current
}

// approvedTurn runs session s1's first turn on a traced worker: a read
// that fails its first attempt and a write that waits for approval, which
// it approves; it returns the approval it answered.
func approvedTurn(t *testing.T, s *Stack) (*client.Sessions, client.Interrupt) {
	t.Helper()
	sessions := client.New(s.Client, s.Agent())
	ctx := context.Background()
	if ok, err := sessions.Start(ctx, "s1", "tools: flaky_read, write_approved"); !ok || err != nil {
		t.Fatalf("Start = %v, %v", ok, err)
	}
	interrupt := firstInterrupt(t, sessions, "s1")
	if ok, err := sessions.Approve(ctx, "s1", interrupt.ID); !ok || err != nil {
		t.Fatalf("Approve = %v, %v", ok, err)
	}
	if answer := lastAnswer(t, sessions, "s1", 1); answer != "results: flaky_read=flaky_read done; write_approved=write_approved done" {
		t.Fatalf("answer = %q", answer)
	}
	return sessions, interrupt
}

func TestAnApprovalSplitsTheTurnIntoLinkedTracesAndRetriesAreSiblingAttempts(t *testing.T) {
	s := NewStack(t, "Traced")
	spans := tracetest.NewInMemoryExporter()
	current := tracedWorker(t, s, &syncBuffer{}, sdktrace.NewSimpleSpanProcessor(spans))
	sessions, interrupt := approvedTurn(t, s)
	ctx := context.Background()
	if ok, err := sessions.Send(ctx, "s1", "hello"); !ok || err != nil {
		t.Fatalf("Send = %v, %v", ok, err)
	}
	lastAnswer(t, sessions, "s1", 2)

	var got []tracetest.SpanStub
	Eventually(t, waitLong, "the spans of both turns", func() (bool, error) {
		got = sessionSpans(spans, "s1")
		return len(spansNamed(got, "invoke_agent Traced")) == 3 && len(spansNamed(got, "chat scripted")) == 3, nil
	})
	roots := spansNamed(got, "invoke_agent Traced")
	// The first message, the approval, and the second message.
	wantTriggers := []string{"user_message", "interrupt_resolution", "user_message"}
	for i, r := range roots {
		if r.Parent.IsValid() {
			t.Errorf("root %d has parent %v, want none", i, r.Parent)
		}
		if got := spanAttr(r, "stepwise.agent.activation.trigger"); got != wantTriggers[i] {
			t.Errorf("root %d trigger = %q, want %q", i, got, wantTriggers[i])
		}
		if i == 0 {
			if len(r.Links) != 0 {
				t.Errorf("the first root links %v, want nothing", r.Links)
			}
			continue
		}
		if len(r.Links) != 1 || r.Links[0].SpanContext.SpanID() != roots[i-1].SpanContext.SpanID() ||
			r.Links[0].SpanContext.TraceID() != roots[i-1].SpanContext.TraceID() {
			t.Errorf("root %d links %v, want the root before it", i, r.Links)
		}
		if r.SpanContext.TraceID() == roots[i-1].SpanContext.TraceID() {
			t.Errorf("roots %d and %d share a trace", i-1, i)
		}
	}
	if spanAttr(roots[1], "stepwise.agent.interrupt.id") != interrupt.ID || spanAttr(roots[1], "stepwise.agent.interrupt.approved") != "true" {
		t.Errorf("the approval's root = %v", roots[1].Attributes)
	}
	if spanAttr(roots[0], "stepwise.agent.user_message.key") != "1" {
		t.Errorf("the first root's user message key = %q", spanAttr(roots[0], "stepwise.agent.user_message.key"))
	}
	inTrace := func(span tracetest.SpanStub, root tracetest.SpanStub) bool {
		return span.SpanContext.TraceID() == root.SpanContext.TraceID() && span.Parent.SpanID() == root.SpanContext.SpanID()
	}
	// The first trace: the model call that deferred both calls, and both
	// attempts of the flaky read; the approval's trace: the approved write
	// and the model call that completed the turn.
	chats := spansNamed(got, "chat scripted")
	if !inTrace(chats[0], roots[0]) || !inTrace(chats[1], roots[1]) || !inTrace(chats[2], roots[2]) {
		t.Errorf("the chat spans are not under their activations' roots")
	}
	if ids := spanAttr(chats[0], "stepwise.agent.requested_tool_call.ids"); ids != `["c1","c2"]` {
		t.Errorf("the first chat requested %s, want [c1 c2]", ids)
	}
	for i, want := range []string{"[2]", "[5]", "[7]"} {
		// Turn 1: the message, the calls' request, two results, the
		// answer; turn 2: the message and the answer.
		if got := spanAttr(chats[i], "stepwise.agent.output_messages.keys"); got != want {
			t.Errorf("chat %d produced messages %s, want %s", i, got, want)
		}
	}
	if chats[0].SpanKind != trace.SpanKindClient || spanAttr(chats[0], "gen_ai.request.model") != "scripted" || spanAttr(chats[0], "gen_ai.provider.name") == "" {
		t.Errorf("the first chat span = %v %v", chats[0].SpanKind, chats[0].Attributes)
	}
	reads := spansNamed(got, "execute_tool flaky_read")
	if len(reads) != 2 {
		t.Fatalf("flaky_read has %d spans, want one per attempt", len(reads))
	}
	for i, r := range reads {
		if !inTrace(r, roots[0]) {
			t.Errorf("flaky_read attempt %d is not under the first root", i+1)
		}
		if spanAttr(r, "stepwise.step.attempt") != itoa(i+1) || spanAttr(r, "stepwise.step.execution_id") != spanAttr(reads[0], "stepwise.step.execution_id") {
			t.Errorf("flaky_read span %d = attempt %s of %s", i, spanAttr(r, "stepwise.step.attempt"), spanAttr(r, "stepwise.step.execution_id"))
		}
	}
	if reads[0].Status.Code != codes.Error || spanAttr(reads[0], "error.type") == "" || len(reads[0].Events) == 0 {
		t.Errorf("the failed attempt's span = %v %v", reads[0].Status, reads[0].Attributes)
	}
	if reads[1].Status.Code == codes.Error || spanAttr(reads[1], "stepwise.agent.tool_call.status") != "succeeded" {
		t.Errorf("the retried attempt's span = %v %v", reads[1].Status, reads[1].Attributes)
	}
	writes := spansNamed(got, "execute_tool write_approved")
	if len(writes) != 1 || !inTrace(writes[0], roots[1]) {
		t.Fatalf("write_approved spans = %d, want one under the approval's root", len(writes))
	}
	if spanAttr(writes[0], "stepwise.agent.tool.effect") != "non_idempotent_write" || spanAttr(writes[0], "gen_ai.tool.call.id") != "c2" {
		t.Errorf("the write's span = %v", writes[0].Attributes)
	}
	// The tool ran with its span current, which MCP calls and HTTP
	// clients propagate.
	if sc, _ := current.Load(s.WorkflowID("s1") + "/turn-1/c2"); sc == nil || !sc.(trace.SpanContext).Equal(writes[0].SpanContext) {
		t.Errorf("the write ran under span %v, want its execute_tool span %v", sc, writes[0].SpanContext)
	}
	for _, sp := range got {
		if spanAttr(sp, "gen_ai.tool.call.arguments") != "" || spanAttr(sp, "gen_ai.input.messages") != "" {
			t.Errorf("span %s carries content with capture off", sp.Name)
		}
		if sp.EndTime.Before(sp.StartTime) || sp.EndTime.IsZero() {
			t.Errorf("span %s did not end", sp.Name)
		}
	}
}

func TestABrokenSpanProcessorOrExporterChangesNoStepOutcome(t *testing.T) {
	s := NewStack(t, "BrokenTracing")
	broken := &brokenProcessor{sessionID: "s1"}
	failing := &failingExporter{}
	logs := &syncBuffer{}
	tracedWorker(t, s, logs, sdktrace.NewSimpleSpanProcessor(failing), broken)
	sessions, _ := approvedTurn(t, s)
	ctx := context.Background()
	snap, err := sessions.Snapshot(ctx, "s1")
	if err != nil {
		t.Fatal(err)
	}
	if snap.State.LastTurnError != "" {
		t.Errorf("last turn error = %q", snap.State.LastTurnError)
	}
	if broken.panics.Load() == 0 {
		t.Error("the broken processor never ran")
	}
	if failing.calls.Load() == 0 {
		t.Error("the failing exporter was never called")
	}
	if !strings.Contains(logs.String(), "tracing failed") {
		t.Errorf("the worker logged no tracing failure:\n%s", logs.String())
	}
}

func TestAWorkerKilledMidCallExportsNoSpanForThatAttemptAndTheNextJoinsItsTrace(t *testing.T) {
	s := NewStack(t, "TracedCrash")
	receiver := StartOTLPReceiver(t)
	s.Config.Tracing = &workerconfig.Tracing{Endpoint: "http://" + receiver.Address}
	sessions, first, gate := stopAtGate(t, s, "read_a")
	second := replaceAtGate(t, s, first, gate)
	if answer := lastAnswer(t, sessions, "s1", 1); answer != "results: read_a=read_a done: n1" {
		t.Fatalf("answer = %q", answer)
	}
	// SIGTERM lets the replacement worker export what it buffered.
	second.Terminate()
	Eventually(t, waitLong, "the replacement worker to stop", func() (bool, error) { return second.Exited(), nil })
	var reads []ReceivedSpan
	for _, sp := range receiver.Spans() {
		if sp.Name == "execute_tool read_a" {
			reads = append(reads, sp)
		}
	}
	if len(reads) != 1 || reads[0].Attributes["stepwise.step.attempt"] != "2" {
		t.Fatalf("read_a spans = %+v, want only the replacement's attempt 2", reads)
	}
	// The killed worker began the activation; the replacement parents the
	// retried attempt from the root context the session stored then.
	desc, err := s.Client.DescribeWorkflow(context.Background(), s.WorkflowID("s1"), "")
	if err != nil {
		t.Fatal(err)
	}
	root := tracing.ParseTraceparent(tracing.New(tracing.Options{SampleRatio: 1}).RootContext(tracing.Activation{
		Step: tracing.StepAttempt{SessionID: "s1", RunID: desc.RawResponse.GetWorkflowExecutionInfo().GetExecution().GetRunId()}, Number: 1,
	}))
	if reads[0].TraceID != root.TraceID().String() || reads[0].ParentSpanID != root.SpanID().String() {
		t.Errorf("attempt 2 is in trace %s under %s, want the activation root %s/%s", reads[0].TraceID, reads[0].ParentSpanID, root.TraceID(), root.SpanID())
	}
	if reads[0].Scope != tracing.ScopeName || reads[0].SchemaURL != tracing.ConventionsGenAI142Dev.SchemaURL() {
		t.Errorf("attempt 2 has scope %q and schema %q", reads[0].Scope, reads[0].SchemaURL)
	}
	if reads[0].Attributes["gen_ai.tool.call.id"] != "c1" || reads[0].Attributes["session.id"] != "s1" ||
		reads[0].Attributes["stepwise.agent.tool_call.status"] != "succeeded" {
		t.Errorf("attempt 2 attributes = %v", reads[0].Attributes)
	}
}

func TestAnExporterTrustsTheConfiguredCAAndOnlyIt(t *testing.T) {
	receiver, caPEM := StartTLSOTLPReceiver(t)
	caFile := filepath.Join(t.TempDir(), "ca.crt")
	if err := os.WriteFile(caFile, caPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	export := func(caFile string) error {
		exp, err := tracing.NewExporter(context.Background(), tracing.Endpoint{URL: "https://" + receiver.Address, CAFile: caFile})
		if err != nil {
			return err
		}
		tracer := tracing.New(tracing.Options{AgentName: "Tls", SampleRatio: 1, Processors: []sdktrace.SpanProcessor{sdktrace.NewSimpleSpanProcessor(exp)}})
		tracer.EmitRoot(tracing.Activation{Step: tracing.StepAttempt{SessionID: "tls-" + filepath.Base(caFile)}, Number: 1, Start: time.Now()})
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		return exp.Shutdown(ctx)
	}
	if err := export(caFile); err != nil {
		t.Fatal(err)
	}
	Eventually(t, 30*time.Second, "the span over TLS", func() (bool, error) {
		for _, sp := range receiver.Spans() {
			if sp.Attributes["session.id"] == "tls-ca.crt" {
				return true, nil
			}
		}
		return false, nil
	})
	// The system's authorities do not know the receiver's certificate.
	_ = export("")
	for _, sp := range receiver.Spans() {
		if sp.Attributes["session.id"] == "tls-." {
			t.Error("a span reached the receiver without its CA")
		}
	}
	if _, err := tracing.NewExporter(context.Background(), tracing.Endpoint{URL: "https://" + receiver.Address, CAFile: os.DevNull}); err == nil ||
		!strings.Contains(err.Error(), "holds no PEM certificate") {
		t.Errorf("an empty CA file gave %v", err)
	}
}
