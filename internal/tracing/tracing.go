// Package tracing emits a session's OpenTelemetry GenAI spans: one trace per
// activation, rooted at an invoke_agent span whose IDs the session derives
// from its own state, so every worker that replays the session stores the
// same trace context; chat spans per model call attempt and execute_tool
// spans per tool Step attempt, parented from that context.
//
// Tracing never fails or retries a Step: every OpenTelemetry call is
// guarded, and a failure is logged and skips its span.
package tracing

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"log/slog"
	"runtime/debug"
	"strconv"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
)

// ScopeName is the instrumentation scope of the session's spans.
const ScopeName = "github.com/stepwise-run/stepwise"

// Conventions names the GenAI semantic conventions the spans follow.
type Conventions string

// The supported conventions. The GenAI conventions are still marked
// Development, so the session pins a version and sets its schema URL.
const (
	// ConventionsGenAI142Dev follows the GenAI conventions repository at
	// 1.42.0-dev, the default.
	ConventionsGenAI142Dev Conventions = "1.42.0-dev"
	// Conventions136 follows semantic conventions 1.36.0 for backends that
	// read the older names: gen_ai.system instead of gen_ai.provider.name,
	// no cache or reasoning token counts, and never content.
	Conventions136 Conventions = "1.36.0"
)

// SchemaURL is the schema URL the tracer declares.
func (c Conventions) SchemaURL() string {
	if c == Conventions136 {
		return "https://opentelemetry.io/schemas/1.36.0"
	}
	return "https://opentelemetry.io/schemas/gen-ai-dev/1.42.0-dev"
}

// Options configure a Tracer.
type Options struct {
	// AgentName is gen_ai.agent.name and names the invoke_agent span.
	AgentName string
	// CaptureMessageContent puts message text, tool arguments and tool
	// results on spans; off, spans carry content by reference only.
	CaptureMessageContent bool
	// Conventions are the semantic conventions followed; empty is
	// ConventionsGenAI142Dev.
	Conventions Conventions
	// SampleRatio is the share of activations traced, from 0 to 1. The
	// decision is made from the trace ID, so every worker agrees on it.
	SampleRatio float64
	// Processors receive the spans: an exporter's batch processor, or a
	// test's own.
	Processors []sdktrace.SpanProcessor
	// Logger logs tracing failures; nil discards them.
	Logger *slog.Logger
}

// Tracer emits a session's spans. A nil Tracer emits nothing and derives
// no trace context.
type Tracer struct {
	provider  *sdktrace.TracerProvider
	tracer    trace.Tracer
	sampler   sdktrace.Sampler
	agentName string
	capture   bool
	conv      Conventions
	logger    *slog.Logger
	failures  atomic.Int64
}

// New returns a Tracer over a tracer provider of its own, whose ID
// generator gives activation roots their derived IDs.
func New(o Options) *Tracer {
	ratio := min(max(o.SampleRatio, 0), 1)
	sampler := sdktrace.TraceIDRatioBased(ratio)
	opts := []sdktrace.TracerProviderOption{
		sdktrace.WithIDGenerator(idGenerator{}),
		sdktrace.WithSampler(sdktrace.ParentBased(sampler)),
	}
	for _, p := range o.Processors {
		opts = append(opts, sdktrace.WithSpanProcessor(p))
	}
	provider := sdktrace.NewTracerProvider(opts...)
	conv := o.Conventions
	if conv == "" {
		conv = ConventionsGenAI142Dev
	}
	logger := o.Logger
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	return &Tracer{
		provider: provider, sampler: sampler, agentName: o.AgentName, conv: conv, logger: logger,
		capture: o.CaptureMessageContent && conv != Conventions136,
		tracer:  provider.Tracer(ScopeName, trace.WithSchemaURL(conv.SchemaURL())),
	}
}

// Shutdown exports what is buffered and stops the processors.
func (t *Tracer) Shutdown(ctx context.Context) error {
	if t == nil {
		return nil
	}
	return t.provider.Shutdown(ctx)
}

// guard runs one tracing call. A panic in it, such as one from a span
// processor, is logged and skips the span: the first in the process as a
// warning with its stack, later ones at debug level.
func (t *Tracer) guard(what string, f func()) {
	defer func() {
		if p := recover(); p != nil {
			if t.failures.Add(1) == 1 {
				t.logger.Warn("tracing failed; the span is skipped and the Step is unaffected",
					"span", what, "panic", fmt.Sprint(p), "stack", string(debug.Stack()))
				return
			}
			t.logger.Debug("tracing failed; the span is skipped", "span", what, "panic", fmt.Sprint(p))
		}
	}()
	f()
}

// Failures counts the tracing calls that failed in this process.
func (t *Tracer) Failures() int64 {
	if t == nil {
		return 0
	}
	return t.failures.Load()
}

// Traceparent is a span context as a W3C traceparent header value.
func Traceparent(sc trace.SpanContext) string {
	if !sc.IsValid() {
		return ""
	}
	carrier := propagation.MapCarrier{}
	propagation.TraceContext{}.Inject(trace.ContextWithSpanContext(context.Background(), sc), carrier)
	return carrier.Get("traceparent")
}

// ParseTraceparent reads a stored traceparent; an empty or malformed one
// gives an invalid span context.
func ParseTraceparent(s string) trace.SpanContext {
	if s == "" {
		return trace.SpanContext{}
	}
	ctx := propagation.TraceContext{}.Extract(context.Background(), propagation.MapCarrier{"traceparent": s})
	return trace.SpanContextFromContext(ctx)
}

// ContextWithParent makes a stored traceparent the current span of ctx, so
// instrumentation of what runs under it, such as a model client's HTTP
// requests, joins the activation's trace.
func ContextWithParent(ctx context.Context, traceparent string) context.Context {
	sc := ParseTraceparent(traceparent)
	if !sc.IsValid() {
		return ctx
	}
	return trace.ContextWithRemoteSpanContext(ctx, sc)
}

// Inject writes the current span context of ctx into carrier as W3C trace
// context; with no valid span context it writes nothing.
func Inject(ctx context.Context, carrier propagation.TextMapCarrier) {
	if !trace.SpanContextFromContext(ctx).IsValid() {
		return
	}
	propagation.TraceContext{}.Inject(ctx, carrier)
}

// rootIDs derives an activation root's trace and span IDs from the
// session: the same session, run and activation number always give the
// same IDs, and different ones practically never collide. A run numbers
// its own activations, so a new run of the session, whichever worker
// version wrote the state it carries, never repeats an earlier root.
func rootIDs(sessionID, runID string, activation int) (trace.TraceID, trace.SpanID) {
	h := sha256.New()
	for _, part := range []string{"stepwise activation", sessionID, runID, strconv.Itoa(activation)} {
		var n [8]byte
		binary.BigEndian.PutUint64(n[:], uint64(len(part)))
		h.Write(n[:])
		h.Write([]byte(part))
	}
	sum := h.Sum(nil)
	var tid trace.TraceID
	var sid trace.SpanID
	copy(tid[:], sum[:16])
	copy(sid[:], sum[16:24])
	if !tid.IsValid() {
		tid[15] = 1
	}
	if !sid.IsValid() {
		sid[7] = 1
	}
	return tid, sid
}

// idGenerator gives a span the IDs its context pre-assigns, and random IDs
// otherwise.
type idGenerator struct{}

type assignedIDsKey struct{}

type assignedIDs struct {
	traceID trace.TraceID
	spanID  trace.SpanID
}

func (idGenerator) NewIDs(ctx context.Context) (trace.TraceID, trace.SpanID) {
	if ids, ok := ctx.Value(assignedIDsKey{}).(assignedIDs); ok {
		return ids.traceID, ids.spanID
	}
	var tid trace.TraceID
	for !tid.IsValid() {
		_, _ = rand.Read(tid[:])
	}
	return tid, randomSpanID()
}

func (idGenerator) NewSpanID(context.Context, trace.TraceID) trace.SpanID {
	return randomSpanID()
}

func randomSpanID() trace.SpanID {
	var sid trace.SpanID
	for !sid.IsValid() {
		_, _ = rand.Read(sid[:])
	}
	return sid
}

// StepAttempt is the Step attempt that emits a span.
type StepAttempt struct {
	SessionID, RunID string
	StepType         string
	StepExecutionID  string
	Attempt          int
	TurnID           string
}

func (a StepAttempt) attributes(operation string) []attribute.KeyValue {
	return []attribute.KeyValue{
		attribute.String("gen_ai.conversation.id", a.SessionID),
		attribute.String("session.id", a.SessionID),
		attribute.String("stepwise.flow.id", a.SessionID),
		attribute.String("stepwise.run.id", a.RunID),
		attribute.String("stepwise.step.type", a.StepType),
		attribute.String("stepwise.step.execution_id", a.StepExecutionID),
		attribute.Int("stepwise.step.attempt", a.Attempt),
		attribute.String("stepwise.agent.turn.id", a.TurnID),
		attribute.String("gen_ai.operation.name", operation),
	}
}

// spanTime keeps an end no earlier than its start.
func spanTime(start, end time.Time) time.Time {
	if end.Before(start) {
		return start
	}
	return end
}
