// Package worker runs the sessions of one Agent: it reads the configuration
// the operator renders, connects to Temporal, registers the Agent's Flow
// type with its task slots, serves health and readiness (and, on loopback
// only, one session's recent events for debugging), and on SIGTERM
// stops taking tasks and lets running Steps finish.
//
// The stock worker image runs Main with no tools of its own. A team that
// adds Go function tools builds its own worker on this package:
//
//	func main() {
//		worker.Main(worker.Options{Tools: []agent.Tool{lookupOrder, refundOrder}})
//	}
package worker

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.temporal.io/sdk/client"
	sdkworker "go.temporal.io/sdk/worker"

	"github.com/stepwise-run/stepwise/internal/engine"
	"github.com/stepwise-run/stepwise/internal/events"
	"github.com/stepwise-run/stepwise/internal/hubapi"
	"github.com/stepwise-run/stepwise/internal/loop"
	"github.com/stepwise-run/stepwise/internal/media"
	"github.com/stepwise-run/stepwise/internal/rollout"
	"github.com/stepwise-run/stepwise/internal/searchattr"
	"github.com/stepwise-run/stepwise/internal/session"
	"github.com/stepwise-run/stepwise/internal/telemetry"
	"github.com/stepwise-run/stepwise/internal/tenancy"
	"github.com/stepwise-run/stepwise/internal/version"
	"github.com/stepwise-run/stepwise/pkg/agent"
	"github.com/stepwise-run/stepwise/pkg/workerconfig"
)

// Options are what a worker image adds to the rendered configuration.
type Options struct {
	// Tools are the function tools compiled into the image.
	Tools []agent.Tool
	// Scripts are scripted models by name, chosen by an Agent whose model
	// provider is "scripted"; "demo" is always the stock demo script.
	Scripts map[string]agent.Script
	// Customize, when set, changes the agent definition built from the
	// configuration: computed instructions, a RunModel limit, and the like.
	Customize func(*agent.Definition)
	// Model, when set, builds the model client for the Agent's model
	// settings, for a worker that brings its own client; returning nil
	// leaves the choice to the worker's built-in clients.
	Model func(workerconfig.Model) (agent.ModelClient, error)
	// SpendLimit, when set, is the application's own spend limit: it is
	// asked before each model call, after the Agent's configured budget
	// when there is one, and told what the call used.
	SpendLimit agent.SpendLimit
	// SpanProcessors receive the sessions' spans besides the configured
	// OTLP endpoint, such as an image's own exporter; with none and no
	// endpoint, nothing is traced.
	SpanProcessors []sdktrace.SpanProcessor
	// StopTimeout bounds how long running Steps may finish after SIGTERM;
	// zero uses 290 seconds, inside the Deployment's grace period.
	StopTimeout time.Duration
	// DeploymentName and BuildID, when set, join the worker to that
	// Temporal Worker Deployment as that version: each session stays on
	// the version that started it and moves to the deployment's current
	// version between turns. The operator sets both under the versioned
	// rollout strategy.
	DeploymentName, BuildID string
	// Logger logs; nil logs JSON to stderr.
	Logger *slog.Logger
}

// DefaultStopTimeout leaves room inside the worker Deployment's 300-second
// termination grace period.
const DefaultStopTimeout = 290 * time.Second

// Main runs a worker from the command line until SIGTERM, and exits.
func Main(opts Options) {
	os.Exit(main(opts))
}

func main(opts Options) int {
	if len(os.Args) > 1 && os.Args[1] == checkMediaRootCommand {
		return checkMediaRoot(os.Args[2:])
	}
	configPath := flag.String("config", "/etc/stepwise/worker/"+workerconfig.FileName, "Path of the worker configuration document.")
	stopTimeout := flag.Duration("stop-timeout", DefaultStopTimeout, "How long running Steps may finish after SIGTERM.")
	deploymentName := flag.String("deployment-name", "", "Temporal Worker Deployment to join; needs --build-id.")
	buildID := flag.String("build-id", "", "This worker's version in the Worker Deployment.")
	flag.Parse()
	if opts.DeploymentName == "" && opts.BuildID == "" {
		opts.DeploymentName, opts.BuildID = *deploymentName, *buildID
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.NewJSONHandler(os.Stderr, nil))
	}
	if opts.StopTimeout == 0 {
		opts.StopTimeout = *stopTimeout
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	cfg, err := workerconfig.Load(*configPath)
	if err == nil {
		err = Run(ctx, cfg, opts)
	}
	if err != nil {
		opts.Logger.Error("the worker stopped", "error", err.Error())
		return 1
	}
	return 0
}

// checkMediaRootCommand is what the operator's init container runs before a
// worker with a hostPath MediaStore starts; it matches the operator's
// render.MediaRootCheckCommand.
const checkMediaRootCommand = "check-media-root"

// checkMediaRoot refuses, by its exit status, a hostPath store mounted
// through a symbolic link.
func checkMediaRoot(args []string) int {
	flags := flag.NewFlagSet(checkMediaRootCommand, flag.ContinueOnError)
	base := flags.String("base", "", "The allowed directory, as mounted.")
	store := flags.String("store", "", "The store, as mounted.")
	rel := flags.String("path", "", "The store's root below the allowed directory.")
	if err := flags.Parse(args); err != nil {
		return 2
	}
	if err := media.CheckRoot(*base, *rel, *store); err != nil {
		fmt.Fprintf(os.Stderr, "the MediaStore's directory cannot be used: %v\n", err)
		return 1
	}
	return 0
}

// Run runs the worker until ctx ends, then stops taking tasks and lets
// running Steps finish within the stop timeout.
func Run(ctx context.Context, cfg workerconfig.Config, opts Options) error {
	logger := opts.Logger
	if logger == nil {
		logger = slog.New(slog.NewJSONHandler(os.Stderr, nil))
	}
	if err := checkNames(cfg); err != nil {
		return err
	}
	store, err := mediaStore(ctx, cfg.MediaStore)
	if err != nil {
		return err
	}
	def, err := definition(cfg, opts, store)
	if err != nil {
		return err
	}
	var loopOpts []loop.Option
	imageStoreURI := ""
	if store != nil {
		loopOpts = append(loopOpts, loop.WithMediaStore(store))
		imageStoreURI = store.StoreURI()
	}
	runner, err := loop.New(def, loopOpts...)
	if err != nil {
		return err
	}
	var metrics *telemetry.WorkerMetrics
	var dialOpts []func(*client.Options)
	if cfg.MetricsAddress != "" {
		if metrics, err = telemetry.NewWorkerMetrics(cfg.FlowType); err != nil {
			return err
		}
		defer func() { _ = metrics.Shutdown(context.WithoutCancel(ctx)) }()
		dialOpts = append(dialOpts, func(o *client.Options) { o.MetricsHandler = metrics.Temporal() })
	}
	c, err := Dial(ctx, cfg.Engine, logger, dialOpts...)
	if err != nil {
		return err
	}
	defer c.Close()
	// A session whose search attributes the namespace does not know cannot
	// make progress, so a worker that cannot make sure of them does not
	// start.
	if err := searchattr.Ensure(ctx, c, cfg.Engine.Namespace); err != nil {
		return fmt.Errorf("%w; register them once with: %s", err, searchattr.Command(cfg.Engine.Namespace))
	}

	capacity := cfg.Definition.Limits.EventStreamCapacityBytes
	if capacity <= 0 {
		capacity = 10 << 20
	}
	ring := events.NewRing(capacity)
	// Every worker logs the sessions' lifecycle events, without content.
	sinks := teeEvents{ring, telemetry.EventLog{Logger: logger}}
	if hubCfg := cfg.EventHub; hubCfg != nil {
		token, err := hubCfg.Token.Lookup()
		if err != nil {
			return fmt.Errorf("eventHub.token: %w", err)
		}
		publisher := hubapi.NewPublisher(hubCfg.URL, token, hubapi.PublisherOptions{Logger: logger})
		// The publisher outlives the worker's stop, so the events of the
		// Steps that finish while it stops still go out.
		publishing, stopPublishing := context.WithCancel(context.WithoutCancel(ctx))
		published := make(chan struct{})
		go func() { publisher.Run(publishing); close(published) }()
		defer func() { stopPublishing(); <-published }()
		sinks = append(sinks, publisher)
	}
	if metrics != nil {
		sinks = append(sinks, metrics)
	}
	stepTimings := timings(cfg, def)
	spendLimit := spendLimits(cfg, c, stepTimings, opts.SpendLimit)
	tracer, err := newTracer(ctx, cfg, opts.SpanProcessors, logger)
	if err != nil {
		return err
	}
	defer func() {
		// Spans of the Steps that finished while the worker stopped go out.
		flushing, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		_ = tracer.Shutdown(flushing)
	}()
	stopTimeout := opts.StopTimeout
	if stopTimeout == 0 {
		stopTimeout = DefaultStopTimeout
	}
	// The identity names the engine version, so clients can tell which
	// session features every worker of the task queue serves.
	host, _ := os.Hostname()
	workerVersion, err := deploymentVersion(opts.DeploymentName, opts.BuildID)
	if err != nil {
		return err
	}
	workerOpts := engine.WorkerOptions{
		Version:  workerVersion,
		FlowType: cfg.FlowType, TaskQueue: cfg.Engine.TaskQueue, TaskSlots: int(cfg.TaskSlots),
		Runner: runner, Events: sinks, Timings: stepTimings, Spend: spendLimit, PlanMode: def.PlanModeEnabled, ImageStoreURI: imageStoreURI,
		Tracer: tracer,
		Options: sdkworker.Options{WorkerStopTimeout: stopTimeout,
			Identity: rollout.WorkerIdentity(os.Getpid(), host, version.EngineVersion)},
	}
	workers := []sdkworker.Worker{engine.NewWorker(c, workerOpts)}
	if shared := cfg.Engine.SharedTaskQueue; shared != "" {
		// The Agent's sessions from before engine 0.8.0 run here until
		// they move to its own names, between turns. The worker takes
		// them unversioned, so their Worker Deployment hands them over
		// once its current version is unversioned, and no version of the
		// Agent's own Worker Deployment ever polls the shared task queue.
		moving := workerOpts
		moving.TaskQueue, moving.Version = shared, nil
		moving.MoveTo = &engine.OwnNames{TaskQueue: cfg.Engine.TaskQueue, Owner: tenancy.Owner{
			Namespace: cfg.Agent.Namespace, Agent: cfg.Agent.Name, AgentUID: cfg.Agent.UID}}
		workers = append(workers, engine.NewWorker(c, moving))
	}
	w := workerGroup(workers)

	var ready atomic.Bool
	server, err := healthServer(cfg.HealthAddress, &ready)
	if err != nil {
		return err
	}
	serveErr := make(chan error, 2)
	go func() {
		serveErr <- fmt.Errorf("serving health probes on %s: %w", cfg.HealthAddress, server.Serve())
	}()
	defer func() { _ = server.Close() }()
	if metrics != nil {
		metricsServer, err := listen("metrics", cfg.MetricsAddress, metricsMux(metrics.Handler()))
		if err != nil {
			return err
		}
		go func() {
			serveErr <- fmt.Errorf("serving metrics on %s: %w", cfg.MetricsAddress, metricsServer.Serve())
		}()
		defer func() { _ = metricsServer.Close() }()
	}
	if cfg.DebugAddress != "" {
		debug, err := debugServer(cfg.DebugAddress, ring)
		if err != nil {
			return err
		}
		go func() {
			serveErr <- fmt.Errorf("serving debug events on %s: %w", cfg.DebugAddress, debug.Serve())
		}()
		defer func() { _ = debug.Close() }()
	}

	if err := w.Start(); err != nil {
		return fmt.Errorf("starting the worker for Flow type %s on task queue %s: %w", cfg.FlowType, cfg.Engine.TaskQueue, err)
	}
	ready.Store(true)
	logger.Info("worker started", "flowType", cfg.FlowType, "taskQueue", cfg.Engine.TaskQueue,
		"taskSlots", cfg.TaskSlots, "engineVersion", version.EngineVersion, "health", server.Addr().String())
	select {
	case <-ctx.Done():
	case err := <-serveErr:
		ready.Store(false)
		w.Stop()
		return err
	}
	ready.Store(false)
	logger.Info("stopping: no new tasks; running Steps may finish", "timeout", stopTimeout.String())
	w.Stop()
	logger.Info("stopped")
	return nil
}

// workerGroup starts and stops several SDK workers of one process as one.
type workerGroup []sdkworker.Worker

func (g workerGroup) Start() error {
	for i, w := range g {
		if err := w.Start(); err != nil {
			for _, started := range g[:i] {
				started.Stop()
			}
			return err
		}
	}
	return nil
}

// Stop stops them together, so each lets its running Steps finish within
// the same stop timeout.
func (g workerGroup) Stop() {
	var wg sync.WaitGroup
	for _, w := range g {
		wg.Go(w.Stop)
	}
	wg.Wait()
}

// teeEvents writes each event to several sinks.
type teeEvents []engine.EventSink

func (t teeEvents) Write(sessionID string, e session.Event) {
	for _, s := range t {
		s.Write(sessionID, e)
	}
}

// deploymentVersion checks a worker's Worker Deployment and build ID, which
// come together or not at all.
func deploymentVersion(deploymentName, buildID string) (*engine.WorkerVersion, error) {
	switch {
	case deploymentName == "" && buildID == "":
		return nil, nil
	case deploymentName == "" || buildID == "":
		return nil, fmt.Errorf("--deployment-name %q and --build-id %q: set both to join a Worker Deployment, or neither", deploymentName, buildID)
	case strings.Contains(deploymentName, "."):
		return nil, fmt.Errorf("--deployment-name %q: a Worker Deployment name may not contain \".\"", deploymentName)
	}
	return &engine.WorkerVersion{DeploymentName: deploymentName, BuildID: buildID}, nil
}
