// Package telemetry is what a worker tells its operators: Prometheus
// metrics of the Temporal SDK and of the sessions it runs.
package telemetry

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"net/http"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.opentelemetry.io/otel/attribute"
	otelprometheus "go.opentelemetry.io/otel/exporters/prometheus"
	"go.opentelemetry.io/otel/metric"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/resource"
	"go.temporal.io/sdk/client"
	temporalotel "go.temporal.io/sdk/contrib/opentelemetry"

	"github.com/stepwise-run/stepwise/internal/session"
)

// meterName is the instrumentation scope of the session metrics.
const meterName = "github.com/stepwise-run/stepwise/worker"

// WorkerMetrics are one worker process's metrics. Session metrics are
// counted from the session events the worker writes, once per event: the
// engine writes no event again when it replays a session, so a replay
// counts nothing twice. A worker that dies between writing an event and
// committing its Step may write it again on the next worker, as it may
// publish it again; counters are per process and Prometheus sums them.
type WorkerMetrics struct {
	registry *prometheus.Registry
	provider *sdkmetric.MeterProvider
	temporal client.MetricsHandler

	turnsStarted     metric.Int64Counter
	turnsEnded       metric.Int64Counter
	modelCalls       metric.Int64Counter
	tokens           metric.Int64Counter
	toolCalls        metric.Int64Counter
	interruptsRaised metric.Int64Counter
	interruptsEnded  metric.Int64Counter
	dropped          metric.Int64Counter

	// flow labels every session metric with the Flow type.
	flow attribute.KeyValue
	base metric.AddOption
}

// NewWorkerMetrics builds the metrics of a worker of one Flow type.
func NewWorkerMetrics(flowType string) (*WorkerMetrics, error) {
	registry := prometheus.NewRegistry()
	registry.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	exporter, err := otelprometheus.New(otelprometheus.WithRegisterer(registry), otelprometheus.WithoutScopeInfo(), otelprometheus.WithoutTargetInfo())
	if err != nil {
		return nil, fmt.Errorf("creating the Prometheus exporter: %w", err)
	}
	provider := sdkmetric.NewMeterProvider(sdkmetric.WithReader(exporter), sdkmetric.WithResource(resource.Empty()))
	flow := attribute.String("flow_type", flowType)
	m := &WorkerMetrics{
		registry: registry,
		provider: provider,
		temporal: temporalotel.NewMetricsHandler(temporalotel.MetricsHandlerOptions{
			Meter:                provider.Meter("temporal-sdk-go"),
			UseMonotonicCounters: true,
			// A metric the SDK cannot record is not worth stopping a worker.
			OnError: func(error) {},
		}),
	}
	meter := provider.Meter(meterName)
	for _, c := range []struct {
		counter    *metric.Int64Counter
		name, help string
	}{
		{&m.turnsStarted, "stepwise_session_turns_started", "Turns the sessions started."},
		{&m.turnsEnded, "stepwise_session_turns_ended", "Turns that ended, by outcome: completed, failed, cancelled or steered."},
		{&m.modelCalls, "stepwise_session_model_calls", "Model calls whose usage the sessions recorded, by provider and model."},
		{&m.tokens, "stepwise_session_model_tokens", "Tokens of recorded model calls, by provider, model and type: input, output, cached_input or reasoning."},
		{&m.toolCalls, "stepwise_session_tool_calls", "Tool calls that reached an outcome, by effect and status; status outcome_unknown is a write that may or may not have happened."},
		{&m.interruptsRaised, "stepwise_session_interrupts_raised", "Approvals and questions raised for a person, by kind."},
		{&m.interruptsEnded, "stepwise_session_interrupts_resolved", "Approvals and questions resolved, by kind and resolution: approved, rejected, answered, declined or cancelled. Raised minus resolved, summed over workers, is what waits for a person."},
		{&m.dropped, "stepwise_session_events_unreadable", "Session events whose payload the metrics could not read."},
	} {
		counter, err := meter.Int64Counter(c.name, metric.WithDescription(c.help))
		if err != nil {
			return nil, fmt.Errorf("creating %s: %w", c.name, err)
		}
		*c.counter = counter
	}
	m.base = metric.WithAttributes(flow)
	m.flow = flow
	return m, nil
}

// Handler serves the metrics in the Prometheus text format.
func (m *WorkerMetrics) Handler() http.Handler {
	return promhttp.HandlerFor(m.registry, promhttp.HandlerOpts{})
}

// Temporal is the Temporal SDK's metrics handler, for the client the
// worker polls with: its task slots, polls, and each Step's schedule-to-
// start and execution latency (activity_type is the Step).
func (m *WorkerMetrics) Temporal() client.MetricsHandler {
	return m.temporal
}

// Shutdown releases the meter provider.
func (m *WorkerMetrics) Shutdown(ctx context.Context) error {
	return m.provider.Shutdown(ctx)
}

// Write counts one session event; it is an event sink of the engine.
func (m *WorkerMetrics) Write(_ string, e session.Event) {
	ctx := context.Background()
	switch e.Type {
	case session.EventTurnStarted:
		m.turnsStarted.Add(ctx, 1, m.base)
	case session.EventTurnCompleted:
		m.turnEnded(ctx, "completed")
	case session.EventTurnFailed:
		m.turnEnded(ctx, "failed")
	case session.EventTurnCancelled:
		m.turnEnded(ctx, "cancelled")
	case session.EventTurnSteered:
		m.turnEnded(ctx, "steered")
	case session.EventUsageRecorded:
		var p struct {
			Recorded session.Usage `json:"recorded"`
			Provider string        `json:"provider"`
			Model    string        `json:"model"`
		}
		if !m.read(ctx, e, &p) {
			return
		}
		model := []attribute.KeyValue{m.flow, attribute.String("provider", cmp.Or(p.Provider, "unknown")), attribute.String("model", cmp.Or(p.Model, "unknown"))}
		m.modelCalls.Add(ctx, p.Recorded.ModelCalls, metric.WithAttributes(model...))
		for kind, n := range map[string]int64{
			"input": p.Recorded.InputTokens, "output": p.Recorded.OutputTokens,
			"cached_input": p.Recorded.CachedInputTokens, "reasoning": p.Recorded.ReasoningTokens,
		} {
			if n > 0 {
				m.tokens.Add(ctx, n, metric.WithAttributes(append(model, attribute.String("type", kind))...))
			}
		}
	case session.EventToolCallFinished:
		var p struct {
			Status string `json:"status"`
			Effect string `json:"effect"`
		}
		if !m.read(ctx, e, &p) {
			return
		}
		m.toolCalls.Add(ctx, 1, metric.WithAttributes(m.flow, attribute.String("effect", cmp.Or(p.Effect, "unknown")), attribute.String("status", p.Status)))
	case session.EventInterruptRaised:
		var p struct {
			Kind string `json:"kind"`
		}
		if !m.read(ctx, e, &p) {
			return
		}
		m.interruptsRaised.Add(ctx, 1, metric.WithAttributes(m.flow, attribute.String("kind", p.Kind)))
	case session.EventInterruptResolved:
		var p struct {
			Kind               string  `json:"kind"`
			Approved           bool    `json:"approved"`
			Answered           bool    `json:"answered"`
			CancellationReason *string `json:"cancellation_reason"`
		}
		if !m.read(ctx, e, &p) {
			return
		}
		m.interruptsEnded.Add(ctx, 1, metric.WithAttributes(m.flow, attribute.String("kind", p.Kind), attribute.String("resolution", resolution(p.Kind, p.Approved, p.Answered, p.CancellationReason != nil))))
	}
}

// resolution names how an interrupt ended: approved or rejected, answered
// or declined (a question's deadline passing declines it), or cancelled by
// steering or cancel_turn.
func resolution(kind string, approved, answered, cancelled bool) string {
	switch {
	case cancelled:
		return "cancelled"
	case kind == string(session.InterruptApproval) && approved:
		return "approved"
	case kind == string(session.InterruptApproval):
		return "rejected"
	case answered:
		return "answered"
	}
	return "declined"
}

func (m *WorkerMetrics) turnEnded(ctx context.Context, outcome string) {
	m.turnsEnded.Add(ctx, 1, metric.WithAttributes(m.flow, attribute.String("outcome", outcome)))
}

func (m *WorkerMetrics) read(ctx context.Context, e session.Event, v any) bool {
	if err := json.Unmarshal(e.Payload, v); err != nil {
		m.dropped.Add(ctx, 1, m.base)
		return false
	}
	return true
}
