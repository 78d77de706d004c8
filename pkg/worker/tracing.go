package worker

import (
	"context"
	"fmt"
	"log/slog"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/stepwise-run/stepwise/internal/tracing"
	"github.com/stepwise-run/stepwise/pkg/workerconfig"
)

// newTracer builds the sessions' tracer from the configuration's OTLP
// endpoint and the image's own span processors; with neither it is nil,
// which traces nothing and stores no trace context.
func newTracer(ctx context.Context, cfg workerconfig.Config, processors []sdktrace.SpanProcessor, logger *slog.Logger) (*tracing.Tracer, error) {
	t := cfg.Tracing
	if t == nil && len(processors) == 0 {
		return nil, nil
	}
	o := tracing.Options{
		AgentName: cfg.FlowType, SampleRatio: 1, Processors: processors,
		Logger: logger.With("logger", "tracing"),
	}
	if t != nil {
		headers := map[string]string{}
		for _, h := range t.Headers {
			v, err := h.ResolveChecked(workerconfig.HeaderValueProblem)
			if err != nil {
				return nil, fmt.Errorf("tracing.headers[%s]: %w", h.Name, err)
			}
			headers[h.Name] = v
		}
		exporter, err := tracing.NewExporter(ctx, tracing.Endpoint{URL: t.Endpoint, Protocol: t.Protocol, Headers: headers, CAFile: t.CAFile})
		if err != nil {
			return nil, fmt.Errorf("tracing: %w", err)
		}
		o.Processors = append(o.Processors, sdktrace.NewBatchSpanProcessor(tracing.LogFailures(exporter, o.Logger)))
		if t.AgentName != "" {
			o.AgentName = t.AgentName
		}
		if t.SamplePercent != nil {
			o.SampleRatio = float64(*t.SamplePercent) / 100
		}
		o.CaptureMessageContent = t.CaptureMessageContent
		o.Conventions = tracing.Conventions(t.SemanticConventions)
	}
	return tracing.New(o), nil
}
