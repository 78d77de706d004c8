package worker

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"sync/atomic"

	"github.com/stepwise-run/stepwise/internal/events"
	"github.com/stepwise-run/stepwise/internal/serving"
	"github.com/stepwise-run/stepwise/pkg/workerconfig"
)

// healthServer serves /healthz and /readyz (ready while the worker polls)
// and nothing else: it listens where probes reach it, on the pod network.
func healthServer(address string, ready *atomic.Bool) (*serving.Server, error) {
	mux := http.NewServeMux()
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok\n")) })
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, _ *http.Request) {
		if !ready.Load() {
			http.Error(w, "not polling for tasks", http.StatusServiceUnavailable)
			return
		}
		_, _ = w.Write([]byte("ok\n"))
	})
	if address == "" {
		address = ":8080"
	}
	return listen("health probes", address, mux)
}

// debugServer serves /debug/events?session=<id>&after=<seq>, one session's
// recent events from this worker's buffer, on a loopback address only:
// events hold the session's text. A request without a session is refused,
// so no one lists every session's events.
func debugServer(address string, ring *events.Ring) (*serving.Server, error) {
	if err := workerconfig.CheckLoopback(address); err != nil {
		return nil, fmt.Errorf("debugAddress: %w", err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/events", func(w http.ResponseWriter, r *http.Request) {
		id := r.URL.Query().Get("session")
		if id == "" {
			http.Error(w, "the session query parameter is required: /debug/events?session=<id>", http.StatusBadRequest)
			return
		}
		after := int64(0)
		if v := r.URL.Query().Get("after"); v != "" {
			var err error
			if after, err = strconv.ParseInt(v, 10, 64); err != nil {
				http.Error(w, fmt.Sprintf("after=%q is not a sequence number", v), http.StatusBadRequest)
				return
			}
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(ring.Since(id, after))
	})
	return listen("debug events", address, mux)
}

// metricsMux serves /metrics alone.
func metricsMux(metrics http.Handler) http.Handler {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", metrics)
	return mux
}

// listen starts listening for one of the worker's servers, within the
// bounds of a port that only probes and scrapers call.
func listen(what, address string, handler http.Handler) (*serving.Server, error) {
	srv, err := serving.Listen(context.Background(), address, handler, serving.ProbeLimits)
	if err != nil {
		return nil, fmt.Errorf("serving %s on %s: %w", what, address, err)
	}
	return srv, nil
}
