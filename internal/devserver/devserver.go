// Package devserver starts a Temporal dev server from the CLI the Makefile
// builds, set up the way sessions need: the active-Step search attribute
// registered, and one partition per task queue. The tests and the local
// default both start it here.
package devserver

import (
	"context"
	"fmt"
	"io"
	"log/slog"

	"go.temporal.io/sdk/client"
	temporallog "go.temporal.io/sdk/log"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/testsuite"

	"github.com/stepwise-run/stepwise/internal/engine"
)

// Namespace is the namespace the dev server registers.
const Namespace = "default"

// args tune the dev server for one machine: one partition per task queue,
// so a task never waits to be forwarded to the partition a worker polls,
// and eager activity dispatch, so an activity that workflow code schedules
// on its own task queue goes straight back to the worker that completed
// the workflow task instead of waiting in matching to be dispatched.
var args = []string{
	"--dynamic-config-value", "matching.numTaskqueueReadPartitions=1",
	"--dynamic-config-value", "matching.numTaskqueueWritePartitions=1",
	"--dynamic-config-value", "system.enableActivityEagerExecution=true",
}

// Start starts a dev server from the CLI at path, with extra arguments such
// as dynamic configuration. Stop it with its Stop.
func Start(ctx context.Context, cli string, extra ...string) (*testsuite.DevServer, error) {
	quiet := temporallog.NewStructuredLogger(slog.New(slog.NewTextHandler(io.Discard, nil)))
	server, err := testsuite.StartDevServer(ctx, testsuite.DevServerOptions{
		ExistingPath:  cli,
		ClientOptions: &client.Options{Namespace: Namespace, Logger: quiet},
		LogLevel:      "error",
		SearchAttributes: temporal.NewSearchAttributes(
			temporal.NewSearchAttributeKeyKeywordList(engine.ActiveStepsAttribute).ValueSet(nil)),
		ExtraArgs: append(append([]string(nil), args...), extra...),
		Stdout:    io.Discard, Stderr: io.Discard,
	})
	if err != nil {
		return nil, fmt.Errorf("starting the Temporal dev server %s: %w", cli, err)
	}
	return server, nil
}
