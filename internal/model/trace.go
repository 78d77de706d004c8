package model

import (
	"net/http"

	"go.opentelemetry.io/otel/propagation"

	"github.com/stepwise-run/stepwise/internal/tracing"
)

// PropagateTraceContext is a model SDK middleware: each request carries the
// W3C trace context of the call's current span, the activation's root, so a
// provider gateway or proxy that traces joins the activation's trace.
func PropagateTraceContext(req *http.Request, next func(*http.Request) (*http.Response, error)) (*http.Response, error) {
	tracing.Inject(req.Context(), propagation.HeaderCarrier(req.Header))
	return next(req)
}
