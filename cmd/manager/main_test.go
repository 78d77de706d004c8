package main

import (
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stepwise-run/stepwise/internal/serving"
)

func TestEventHubFlags(t *testing.T) {
	dir := t.TempDir()
	key := filepath.Join(dir, "key")
	short := filepath.Join(dir, "short")
	if err := os.WriteFile(key, []byte("k1:an event hub key of 32 bytes or more\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(short, []byte("k1:too short"), 0o600); err != nil {
		t.Fatal(err)
	}
	const url = "http://stepwise-event-hub.stepwise-system.svc:8090"
	for _, tc := range []struct {
		name, url, keyFile, wantErr string
		lifetime                    time.Duration
	}{
		{name: "neither"},
		{name: "both", url: url, keyFile: key},
		{name: "a URL without a key", url: url, wantErr: "--event-hub-url needs --event-hub-publish-keys-file"},
		{name: "a key without a URL", keyFile: key, wantErr: "--event-hub-publish-keys-file needs --event-hub-url"},
		{name: "a URL with a path", url: url + "/events", keyFile: key, wantErr: "--event-hub-url"},
		{name: "a URL with credentials", url: "http://user:pw@hub:8090", keyFile: key, wantErr: "--event-hub-url"},
		{name: "a missing key file", url: url, keyFile: filepath.Join(dir, "none"), wantErr: "--event-hub-publish-keys-file"},
		{name: "a token lifetime under an hour", url: url, keyFile: key, lifetime: time.Minute, wantErr: "--event-hub-token-lifetime"},
		{name: "a short key", url: url, keyFile: short, wantErr: "needs at least 32"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.lifetime == 0 {
				tc.lifetime = time.Hour
			}
			hub, err := eventHub(tc.url, tc.keyFile, tc.lifetime)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("eventHub() = %v, want an error with %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("eventHub() = %v", err)
			}
			if (hub != nil) != (tc.url != "") {
				t.Fatalf("eventHub() = %+v", hub)
			}
			if hub != nil && hub.URL != tc.url {
				t.Errorf("URL = %q", hub.URL)
			}
		})
	}
}

// The operator's probes and metrics are served within the project's limits
// for ports only probes and scrapers call.
func TestTheOperatorServesProbesAndMetricsWithinLimits(t *testing.T) {
	ctx := t.Context()
	probes, err := probeServer(ctx, "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	metricsSrv, err := metricsServer(ctx, "127.0.0.1:0", false, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, srv := range []*serving.Server{probes, metricsSrv} {
		go func() { _ = srv.Serve() }()
		t.Cleanup(func() { _ = srv.Close() })
		if srv.ReadHeaderTimeout != serving.ProbeLimits.ReadHeaderTimeout || srv.ReadTimeout != serving.ProbeLimits.ReadTimeout ||
			srv.WriteTimeout != serving.ProbeLimits.WriteTimeout || srv.IdleTimeout != serving.ProbeLimits.IdleTimeout ||
			srv.MaxHeaderBytes != serving.ProbeLimits.MaxHeaderBytes {
			t.Errorf("a server of the operator runs without the probe limits: %+v", srv.Server)
		}
	}
	get := func(url string) (int, string) {
		resp, err := http.Get(url)
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = resp.Body.Close() }()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(body)
	}
	for _, path := range []string{"/healthz", "/readyz", "/readyz/ping"} {
		if status, _ := get("http://" + probes.Addr().String() + path); status != http.StatusOK {
			t.Errorf("GET %s = %d", path, status)
		}
	}
	if status, body := get("http://" + metricsSrv.Addr().String() + "/metrics"); status != http.StatusOK || !strings.Contains(body, "# HELP") {
		t.Errorf("GET /metrics = %d %.80q", status, body)
	}
}
