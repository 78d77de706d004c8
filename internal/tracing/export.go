package tracing

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"strings"
	"sync"
	"time"

	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"google.golang.org/grpc/credentials"

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
	// CAFile, when set, holds the PEM certificates of the authorities
	// that sign an https endpoint's certificate, instead of the system's.
	CAFile string
}

// NewExporter returns an OTLP exporter for an endpoint. It connects lazily,
// so an unreachable receiver delays no worker start; spans it cannot send
// are dropped after the exporter's retries.
func NewExporter(ctx context.Context, e Endpoint) (sdktrace.SpanExporter, error) {
	if err := workerconfig.CheckOTLPEndpoint(e.URL, e.Protocol); err != nil {
		return nil, err
	}
	u, _ := url.Parse(e.URL)
	var tlsConfig *tls.Config
	if e.CAFile != "" {
		pem, err := os.ReadFile(e.CAFile)
		if err != nil {
			return nil, fmt.Errorf("reading the endpoint's CA certificates: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("%s holds no PEM certificate", e.CAFile)
		}
		tlsConfig = &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
	}
	if e.Protocol == workerconfig.OTLPProtocolHTTPProtobuf {
		opts := []otlptracehttp.Option{otlptracehttp.WithEndpointURL(e.URL)}
		if tlsConfig != nil {
			opts = append(opts, otlptracehttp.WithTLSClientConfig(tlsConfig))
		}
		if strings.Trim(u.Path, "/") == "" {
			opts = append(opts, otlptracehttp.WithURLPath("/v1/traces"))
		}
		if len(e.Headers) > 0 {
			opts = append(opts, otlptracehttp.WithHeaders(e.Headers))
		}
		return otlptracehttp.New(ctx, opts...)
	}
	opts := []otlptracegrpc.Option{otlptracegrpc.WithEndpointURL(e.URL)}
	if tlsConfig != nil {
		opts = append(opts, otlptracegrpc.WithTLSCredentials(credentials.NewTLS(tlsConfig)))
	}
	if len(e.Headers) > 0 {
		opts = append(opts, otlptracegrpc.WithHeaders(e.Headers))
	}
	return otlptracegrpc.New(ctx, opts...)
}

// LogFailures wraps an exporter so that a failed export is logged, as a
// warning at most once a minute and at debug level between, instead of on
// OpenTelemetry's global error handler: a receiver that is down is seen
// in the worker's own log without flooding it. The spans of a failed
// export are dropped; no Step waits for them.
func LogFailures(exp sdktrace.SpanExporter, logger *slog.Logger) sdktrace.SpanExporter {
	return &loggedExporter{SpanExporter: exp, logger: logger, now: time.Now}
}

type loggedExporter struct {
	sdktrace.SpanExporter
	logger *slog.Logger
	now    func() time.Time
	mu     sync.Mutex
	warned time.Time
}

func (e *loggedExporter) ExportSpans(ctx context.Context, spans []sdktrace.ReadOnlySpan) error {
	err := e.SpanExporter.ExportSpans(ctx, spans)
	if err == nil {
		return nil
	}
	e.mu.Lock()
	now := e.now()
	warn := e.warned.IsZero() || now.Sub(e.warned) >= time.Minute
	if warn {
		e.warned = now
	}
	e.mu.Unlock()
	level := slog.LevelDebug
	if warn {
		level = slog.LevelWarn
	}
	e.logger.Log(ctx, level, "exporting spans failed; they are dropped and no Step is affected", "spans", len(spans), "error", err.Error())
	return nil
}
