package main

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"
	"k8s.io/client-go/rest"
	certutil "k8s.io/client-go/util/cert"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
	"sigs.k8s.io/controller-runtime/pkg/metrics/filters"

	"github.com/stepwise-run/stepwise/internal/serving"
)

// The operator serves its probes and metrics itself, within the limits of
// every server of the project, rather than through the manager, whose
// servers bound neither a request's body nor one client's connections.

// probeServer answers /healthz and /readyz, and their named checks.
func probeServer(ctx context.Context, address string) (*serving.Server, error) {
	checks := &healthz.Handler{Checks: map[string]healthz.Checker{"ping": healthz.Ping}}
	mux := http.NewServeMux()
	for _, path := range []string{"/healthz", "/readyz"} {
		mux.Handle(path, http.StripPrefix(path, checks))
		mux.Handle(path+"/", http.StripPrefix(path, checks))
	}
	return serving.Listen(ctx, address, mux, serving.ProbeLimits)
}

// metricsServer serves /metrics: over TLS with a self-signed certificate,
// to callers whose Kubernetes token may GET /metrics, when secure; plain
// HTTP to anyone otherwise.
func metricsServer(ctx context.Context, address string, secure bool, cfg *rest.Config) (*serving.Server, error) {
	handler := promhttp.HandlerFor(metrics.Registry, promhttp.HandlerOpts{})
	if secure {
		client, err := rest.HTTPClientFor(cfg)
		if err != nil {
			return nil, err
		}
		filter, err := filters.WithAuthenticationAndAuthorization(cfg, client)
		if err != nil {
			return nil, fmt.Errorf("reviewing metrics callers: %w", err)
		}
		if handler, err = filter(ctrl.Log.WithName("metrics"), handler); err != nil {
			return nil, fmt.Errorf("reviewing metrics callers: %w", err)
		}
	}
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", handler)
	srv, err := serving.Listen(ctx, address, mux, serving.ProbeLimits)
	if err != nil {
		return nil, err
	}
	if secure {
		// Scrapers skip verifying it and authenticate with their own token.
		cert, key, err := certutil.GenerateSelfSignedCertKey("localhost", []net.IP{{127, 0, 0, 1}}, nil)
		if err != nil {
			return nil, fmt.Errorf("making the metrics certificate: %w", err)
		}
		pair, err := tls.X509KeyPair(cert, key)
		if err != nil {
			return nil, err
		}
		srv.TLSConfig = &tls.Config{Certificates: []tls.Certificate{pair}, MinVersion: tls.VersionTLS12}
	}
	return srv, nil
}

// runnable runs a server with the manager, on every replica: a replica
// that waits to lead still answers its probes.
type runnable struct {
	srv *serving.Server
	tls bool
}

// Start implements manager.Runnable.
func (r runnable) Start(ctx context.Context) error {
	go func() {
		<-ctx.Done()
		stop, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = r.srv.Shutdown(stop)
	}()
	serve := r.srv.Serve
	if r.tls {
		serve = r.srv.ServeTLS
	}
	if err := serve(); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// NeedLeaderElection implements manager.LeaderElectionRunnable.
func (runnable) NeedLeaderElection() bool { return false }
