package tracing

import (
	"context"
	"net/url"
	"strings"

	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/stepwise-run/stepwise/pkg/workerconfig"
)

// Endpoint is an OTLP receiver.
type Endpoint struct {
	// URL is http://host:port or https://host:port; for http/protobuf it
	// may carry the path, /v1/traces by default.
	URL string
	// Protocol is grpc (empty) or http/protobuf.
	Protocol string
	// Headers are sent with every export, such as a backend's API key.
	Headers map[string]string
}

// NewExporter returns an OTLP exporter for an endpoint. It connects lazily,
// so an unreachable receiver delays no worker start; spans it cannot send
// are dropped after the exporter's retries.
func NewExporter(ctx context.Context, e Endpoint) (sdktrace.SpanExporter, error) {
	if err := workerconfig.CheckOTLPEndpoint(e.URL, e.Protocol); err != nil {
		return nil, err
	}
	u, _ := url.Parse(e.URL)
	if e.Protocol == workerconfig.OTLPProtocolHTTPProtobuf {
		opts := []otlptracehttp.Option{otlptracehttp.WithEndpointURL(e.URL)}
		if strings.Trim(u.Path, "/") == "" {
			opts = append(opts, otlptracehttp.WithURLPath("/v1/traces"))
		}
		if len(e.Headers) > 0 {
			opts = append(opts, otlptracehttp.WithHeaders(e.Headers))
		}
		return otlptracehttp.New(ctx, opts...)
	}
	opts := []otlptracegrpc.Option{otlptracegrpc.WithEndpointURL(e.URL)}
	if len(e.Headers) > 0 {
		opts = append(opts, otlptracegrpc.WithHeaders(e.Headers))
	}
	return otlptracegrpc.New(ctx, opts...)
}
