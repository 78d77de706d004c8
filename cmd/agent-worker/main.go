// Command agent-worker runs the sessions of one Agent. It reads the worker
// configuration the operator renders, serves health probes, and stops on
// SIGTERM. The session engine joins it in a later release; until then it
// checks its configuration and reports itself not ready, so no rollout
// counts it as serving sessions.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/stepwise-run/stepwise/internal/version"
	"github.com/stepwise-run/stepwise/pkg/workerconfig"
)

func main() {
	configPath := flag.String("config", "/etc/stepwise/worker/"+workerconfig.FileName, "Path of the worker configuration document.")
	flag.Parse()
	logger := slog.New(slog.NewJSONHandler(os.Stderr, nil))
	if err := run(*configPath, logger); err != nil {
		logger.Error("the worker stopped", "error", err.Error())
		os.Exit(1)
	}
}

func run(configPath string, logger *slog.Logger) error {
	cfg, err := workerconfig.Load(configPath)
	if err != nil {
		return err
	}
	logger.Info("worker configuration loaded",
		"agent", cfg.Agent.Namespace+"/"+cfg.Agent.Name, "flowType", cfg.FlowType,
		"taskQueue", cfg.Engine.TaskQueue, "engineVersion", version.EngineVersion)

	mux := http.NewServeMux()
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, "ok") })
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, _ *http.Request) {
		http.Error(w, "this worker build carries no session engine", http.StatusServiceUnavailable)
	})
	server := &http.Server{Addr: cfg.HealthAddress, Handler: mux, ReadHeaderTimeout: 5 * time.Second}

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	serveErr := make(chan error, 1)
	go func() { serveErr <- server.ListenAndServe() }()
	select {
	case err := <-serveErr:
		return fmt.Errorf("serving health probes on %s: %w", cfg.HealthAddress, err)
	case <-ctx.Done():
	}
	logger.Info("stopping")
	shutdownCtx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := server.Shutdown(shutdownCtx); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}
