package tracing

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/stepwise-run/stepwise/internal/session"
)

// Activation triggers: what input from outside the session started it.
const (
	TriggerUserMessage         = "user_message"
	TriggerInterruptResolution = "interrupt_resolution"
	TriggerInterruptDeadline   = "interrupt_deadline"
	TriggerPlanExecution       = "plan_execution"
)

// Activation is a burst of Steps between durable waits, started by a Step
// that consumed an input from outside the session. Each is one trace.
type Activation struct {
	Step StepAttempt
	// Number counts the activations of the session's run from 1; with the
	// session and run IDs it derives the root's IDs.
	Number  int
	Trigger string
	// UserMessageKey is the sequence of the user message that started it.
	UserMessageKey int64
	// InterruptID and Approved are the interrupt whose resolution started
	// it; Approved is nil for a question.
	InterruptID string
	Approved    *bool
	// Previous is the previous activation's root, linked from this one.
	Previous string
	// Start is when the Step ran.
	Start time.Time
	// Input is the user message, put on the span when content is captured.
	Input string
}

// RootContext is the traceparent an activation's root has: derived from
// the session, never random, so every worker that replays the session
// stores the same value. A root the sampler drops still has its unsampled
// context, so the activation's other spans are dropped with it. A nil
// Tracer gives "", and the session then stores no trace context.
func (t *Tracer) RootContext(a Activation) string {
	if t == nil {
		return ""
	}
	tid, sid := rootIDs(a.Step.SessionID, a.Step.RunID, a.Number)
	var flags trace.TraceFlags
	decision := t.sampler.ShouldSample(sdktrace.SamplingParameters{ParentContext: context.Background(), TraceID: tid})
	if decision.Decision == sdktrace.RecordAndSample {
		flags = trace.FlagsSampled
	}
	return Traceparent(trace.NewSpanContext(trace.SpanContextConfig{TraceID: tid, SpanID: sid, TraceFlags: flags}))
}

// EmitRoot emits an activation's invoke_agent root with its derived IDs. It
// ends at once: a span ends in the process that started it, so a root
// cannot stay open across the activation's later Steps, which start after
// it ended.
func (t *Tracer) EmitRoot(a Activation) {
	if t == nil {
		return
	}
	t.guard("invoke_agent", func() {
		tid, sid := rootIDs(a.Step.SessionID, a.Step.RunID, a.Number)
		ctx := context.WithValue(context.Background(), assignedIDsKey{}, assignedIDs{traceID: tid, spanID: sid})
		attrs := append(a.Step.attributes("invoke_agent"),
			attribute.String("gen_ai.agent.name", t.agentName),
			attribute.String("stepwise.agent.activation.trigger", a.Trigger))
		if a.UserMessageKey > 0 {
			attrs = append(attrs, attribute.Int64("stepwise.agent.user_message.key", a.UserMessageKey))
		}
		if a.InterruptID != "" {
			attrs = append(attrs, attribute.String("stepwise.agent.interrupt.id", a.InterruptID))
		}
		if a.Approved != nil {
			attrs = append(attrs, attribute.Bool("stepwise.agent.interrupt.approved", *a.Approved))
		}
		if t.capture && a.Input != "" {
			attrs = append(attrs, attribute.String("gen_ai.input.messages", messagesJSON([]genAIMessage{textMessage("user", a.Input)})))
		}
		opts := []trace.SpanStartOption{
			trace.WithNewRoot(), trace.WithSpanKind(trace.SpanKindInternal),
			trace.WithTimestamp(a.Start), trace.WithAttributes(attrs...),
		}
		if prev := ParseTraceparent(a.Previous); prev.IsValid() {
			opts = append(opts, trace.WithLinks(trace.Link{SpanContext: prev}))
		}
		_, span := t.tracer.Start(ctx, "invoke_agent "+t.agentName, opts...)
		span.End(trace.WithTimestamp(spanTime(a.Start, time.Now())))
	})
}

// ChatCall is one RunModel or CompactContext attempt, told when it ends.
type ChatCall struct {
	Step StepAttempt
	// Parent is the activation root's traceparent.
	Parent     string
	Start, End time.Time
	Metadata   session.CallMetadata
	Usage      session.Usage
	// LastInputKey is the newest stored message the call received, or the
	// last one a summary covers.
	LastInputKey int64
	// OutputKeys are the sequences the call's messages are stored under.
	OutputKeys []int64
	// RequestedToolCallIDs are the calls the model requested.
	RequestedToolCallIDs []string
	// Input and Output are the call's content, put on the span when
	// content is captured.
	Input  []session.Message
	Output []session.Message
	Err    error
}

// Chat emits a model call attempt's chat span, named for the requested
// model when the client reported it, and parented from the activation's
// root.
func (t *Tracer) Chat(c ChatCall) {
	if t == nil {
		return
	}
	t.guard("chat", func() {
		name := "chat"
		if c.Metadata.RequestModel != "" {
			name += " " + c.Metadata.RequestModel
		}
		attrs := append(c.Step.attributes("chat"), t.metadataAttributes(c.Metadata, c.Usage)...)
		if c.LastInputKey > 0 {
			attrs = append(attrs, attribute.Int64("stepwise.agent.input_messages.last_key", c.LastInputKey))
		}
		if len(c.OutputKeys) > 0 {
			attrs = append(attrs, attribute.Int64Slice("stepwise.agent.output_messages.keys", c.OutputKeys))
		}
		if len(c.RequestedToolCallIDs) > 0 {
			attrs = append(attrs, attribute.StringSlice("stepwise.agent.requested_tool_call.ids", c.RequestedToolCallIDs))
		}
		if t.capture {
			if len(c.Input) > 0 {
				attrs = append(attrs, attribute.String("gen_ai.input.messages", messagesJSON(projectMessages(c.Input))))
			}
			if len(c.Output) > 0 {
				attrs = append(attrs, attribute.String("gen_ai.output.messages", messagesJSON(projectMessages(c.Output))))
			}
		}
		kind := trace.SpanKindClient
		if c.Usage.ModelCalls > 1 {
			// A runner that made several calls in one attempt: each has its
			// own span from the provider client's instrumentation, which
			// counts their tokens.
			kind = trace.SpanKindInternal
		}
		ctx := ContextWithParent(context.Background(), c.Parent)
		_, span := t.tracer.Start(ctx, name, trace.WithSpanKind(kind),
			trace.WithTimestamp(c.Start), trace.WithAttributes(attrs...))
		failed(span, c.Err)
		span.End(trace.WithTimestamp(spanTime(c.Start, c.End)))
	})
}

func (t *Tracer) metadataAttributes(m session.CallMetadata, u session.Usage) []attribute.KeyValue {
	var attrs []attribute.KeyValue
	add := func(key, value string) {
		if value != "" {
			attrs = append(attrs, attribute.String(key, value))
		}
	}
	add("gen_ai.request.model", m.RequestModel)
	add("gen_ai.response.model", m.ResponseModel)
	add("gen_ai.response.id", m.ResponseID)
	if t.conv == Conventions136 {
		add("gen_ai.system", m.Provider)
	} else {
		add("gen_ai.provider.name", m.Provider)
	}
	if len(m.FinishReasons) > 0 {
		attrs = append(attrs, attribute.StringSlice("gen_ai.response.finish_reasons", m.FinishReasons))
	}
	if u.ModelCalls > 1 || (u.InputTokens == 0 && u.OutputTokens == 0) {
		return attrs
	}
	attrs = append(attrs, attribute.Int64("gen_ai.usage.input_tokens", u.InputTokens),
		attribute.Int64("gen_ai.usage.output_tokens", u.OutputTokens))
	if t.conv == Conventions136 {
		return attrs
	}
	if u.CachedInputTokens > 0 {
		attrs = append(attrs, attribute.Int64("gen_ai.usage.cache_read.input_tokens", u.CachedInputTokens))
	}
	if u.ReasoningTokens > 0 {
		attrs = append(attrs, attribute.Int64("gen_ai.usage.reasoning.output_tokens", u.ReasoningTokens))
	}
	return attrs
}

// ToolCall is the call a tool Step attempt runs.
type ToolCall struct {
	Step StepAttempt
	// Parent is the traceparent the call's record carries: the root of the
	// activation that deferred or approved it.
	Parent    string
	ID, Name  string
	Effect    string
	Arguments string
}

// ToolSpan is a running execute_tool span.
type ToolSpan struct {
	t    *Tracer
	span trace.Span
}

// StartTool starts a tool Step attempt's execute_tool span and makes it the
// current span of the returned context while the tool runs, so what the
// tool calls, such as an MCP server, joins the trace.
func (t *Tracer) StartTool(ctx context.Context, c ToolCall) (context.Context, *ToolSpan) {
	if t == nil {
		return ctx, nil
	}
	out, ts := ctx, (*ToolSpan)(nil)
	t.guard("execute_tool", func() {
		attrs := append(c.Step.attributes("execute_tool"),
			attribute.String("gen_ai.agent.name", t.agentName),
			attribute.String("gen_ai.tool.name", c.Name),
			attribute.String("gen_ai.tool.call.id", c.ID),
			attribute.String("stepwise.agent.tool.effect", c.Effect))
		if t.capture && c.Arguments != "" {
			attrs = append(attrs, attribute.String("gen_ai.tool.call.arguments", c.Arguments))
		}
		opts := []trace.SpanStartOption{trace.WithSpanKind(trace.SpanKindInternal), trace.WithAttributes(attrs...)}
		if !ParseTraceparent(c.Parent).IsValid() {
			// A record without trace context starts a trace of its own.
			opts = append(opts, trace.WithNewRoot())
		}
		next, span := t.tracer.Start(ContextWithParent(ctx, c.Parent), "execute_tool "+c.Name, opts...)
		out, ts = next, &ToolSpan{t: t, span: span}
	})
	return out, ts
}

// End ends the span with the attempt's outcome.
func (s *ToolSpan) End(out session.ToolOutcome, err error) {
	if s == nil {
		return
	}
	s.t.guard("execute_tool", func() {
		status := string(out.Kind)
		if err != nil {
			status = "error"
		}
		s.span.SetAttributes(attribute.String("stepwise.agent.tool_call.status", status))
		if s.t.capture && out.Kind == session.ToolResultSucceeded {
			s.span.SetAttributes(attribute.String("gen_ai.tool.call.result", out.Output))
		}
		if err == nil && out.Kind == session.ToolResultFailed {
			err = errors.New(out.Error)
			s.span.SetAttributes(attribute.String("error.type", "ToolExecutionError"))
			s.span.SetStatus(codes.Error, out.Error)
		} else {
			failed(s.span, err)
		}
		s.span.End()
	})
}

// failed marks a failed attempt's span: status ERROR, error.type, and the
// error as an event.
func failed(span trace.Span, err error) {
	if err == nil {
		return
	}
	span.SetAttributes(attribute.String("error.type", errorType(err)))
	span.RecordError(err)
	span.SetStatus(codes.Error, err.Error())
}

// errorType names an error's kind: its application error type when it has
// one, else its Go type.
func errorType(err error) string {
	var typed interface{ Type() string }
	if errors.As(err, &typed) && typed.Type() != "" {
		return typed.Type()
	}
	return strings.TrimPrefix(fmt.Sprintf("%T", err), "*")
}

// genAIMessage is one message in the GenAI conventions' JSON form.
type genAIMessage struct {
	Role  string           `json:"role"`
	Parts []map[string]any `json:"parts"`
}

func textMessage(role, text string) genAIMessage {
	return genAIMessage{Role: role, Parts: []map[string]any{{"type": "text", "content": text}}}
}

// projectMessages are stored messages as content: their text and tool
// projections, never the provider's own items.
func projectMessages(msgs []session.Message) []genAIMessage {
	out := make([]genAIMessage, 0, len(msgs))
	for _, m := range msgs {
		g := genAIMessage{Role: string(m.Role)}
		switch {
		case m.ToolCallID != "":
			g.Role = "tool"
			g.Parts = append(g.Parts, map[string]any{"type": "tool_call_response", "id": m.ToolCallID, "response": m.Text})
		case m.Text != "":
			g.Parts = append(g.Parts, map[string]any{"type": "text", "content": m.Text})
		}
		for _, c := range m.ToolCalls {
			g.Parts = append(g.Parts, map[string]any{"type": "tool_call", "id": c.ID, "name": c.Name, "arguments": c.Arguments})
		}
		if len(g.Parts) > 0 {
			out = append(out, g)
		}
	}
	return out
}

func messagesJSON(msgs []genAIMessage) string {
	b, err := json.Marshal(msgs)
	if err != nil {
		return ""
	}
	return string(b)
}
