// Command manager runs the operator: the Agent, ToolSource, MediaStore and
// ClusterEngine controllers, and the publisher of the gateway's application
// token grants.
package main

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/util/validation"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	apischeme "github.com/stepwise-run/stepwise/api/scheme"
	"github.com/stepwise-run/stepwise/internal/controller"
	"github.com/stepwise-run/stepwise/internal/engineadmin"
	"github.com/stepwise-run/stepwise/internal/engineflags"
	"github.com/stepwise-run/stepwise/internal/hub"
	"github.com/stepwise-run/stepwise/internal/render"
	"github.com/stepwise-run/stepwise/internal/version"
	"github.com/stepwise-run/stepwise/pkg/workerconfig"
)

func main() {
	if err := run(); err != nil {
		ctrl.Log.WithName("setup").Error(err, "the operator stopped")
		os.Exit(1)
	}
}

func run() error {
	var (
		metricsAddr, probeAddr  string
		metricsSecure           bool
		leaderElect             bool
		workerImage             string
		mediaHostPathRoots      string
		pollerQuietPeriod       time.Duration
		versionedRollouts       bool
		eventHubURL, hubKeys    string
		tokenLifetime           time.Duration
		networkPolicies         bool
		metricsNamespace        string
		gatewayGrants           string
		otlpEndpoint, otlpProto string
	)
	flag.StringVar(&metricsAddr, "metrics-bind-address", ":8080", "Address of the metrics endpoint; 0 turns it off.")
	flag.BoolVar(&metricsSecure, "metrics-secure", true,
		"Serve metrics over HTTPS only to callers that Kubernetes authenticates (TokenReview) and authorizes for GET /metrics "+
			"(SubjectAccessReview); false serves plain HTTP to anyone who reaches the port.")
	flag.StringVar(&probeAddr, "health-probe-bind-address", ":8081", "Address of the health and readiness probes; 0 turns them off.")
	flag.BoolVar(&leaderElect, "leader-elect", false, "Elect one active operator among replicas.")
	engineFlags := engineflags.Bind(flag.CommandLine)
	flag.StringVar(&workerImage, "worker-image", "ghcr.io/stepwise-run/agent-worker:"+version.Operator,
		"The stock worker image, for Agents without spec.workers.image.")
	flag.StringVar(&mediaHostPathRoots, "media-host-path-roots", "",
		"Comma-separated host directories that localDirectory MediaStores without a PersistentVolumeClaim may mount into worker pods "+
			"(hostPath), each with everything under it: ROOT gives each namespace ROOT/<namespace>, NAMESPACE:ROOT gives that namespace ROOT. "+
			"Empty means none, so such MediaStores are not Ready. System directories are refused.")
	flag.DurationVar(&pollerQuietPeriod, "poller-quiet-period", controller.DefaultPollerQuietPeriod,
		"How long a worker must not have polled its task queue to count as stopped, before a rollout starts workers of an engine "+
			"version the old ones may not run beside. Keep it above the engine's long poll (one minute by default), with a margin for clock skew.")
	flag.BoolVar(&versionedRollouts, "versioned-rollouts", true,
		"Roll the workers of an engine version that moves sessions between turns as versions of a Temporal Worker Deployment, "+
			"where the engine offers it: each session stays on its version's workers until a turn ends. Off, workers roll "+
			"unversioned: beside each other where the worker version rules allow, old ones stopped first otherwise.")
	flag.StringVar(&eventHubURL, "event-hub-url", "",
		"http://host:port of the event hub every Agent's workers publish session events to, for the gateway; empty keeps events in the workers.")
	flag.StringVar(&hubKeys, "event-hub-publish-keys-file", "",
		"File of the event hub's publish keys, one per line as ID:KEY, the signing key first; the operator signs each Agent's publish token with it. Required with --event-hub-url; read again while running.")
	flag.DurationVar(&tokenLifetime, "event-hub-token-lifetime", hub.DefaultTokenLifetime,
		"How long an Agent's event hub publish token is valid; the operator renews it, rolling the Agent's workers, when a third is left.")
	flag.StringVar(&gatewayGrants, "gateway-grants-configmap", "",
		"A ConfigMap of --operator-namespace to publish the gateways' application tokens in, each by its SHA-256, so gateways read no Secret; empty publishes none.")
	flag.BoolVar(&networkPolicies, "worker-network-policies", false,
		"Give each Agent's workers a NetworkPolicy that lets in only the kubelet's probes and, from --metrics-namespace, metric scrapes.")
	flag.StringVar(&metricsNamespace, "metrics-namespace", "",
		"The namespace whose pods may scrape the workers' metrics under --worker-network-policies; empty lets any pod.")
	flag.StringVar(&otlpEndpoint, "otlp-endpoint", "",
		"http://host:port (https:// for TLS) of the OTLP receiver that workers of Agents without spec.tracing.endpoint export spans to; empty traces only Agents that name one.")
	flag.StringVar(&otlpProto, "otlp-protocol", workerconfig.OTLPProtocolGRPC, "The OTLP protocol of --otlp-endpoint: grpc or http/protobuf.")
	opts := zap.Options{}
	opts.BindFlags(flag.CommandLine)
	flag.Parse()
	ctrl.SetLogger(zap.New(zap.UseFlagOptions(&opts)))

	roots, err := render.ParseHostPathRoots(mediaHostPathRoots)
	if err != nil {
		return fmt.Errorf("--media-host-path-roots: %w", err)
	}
	defaults := render.Defaults{WorkerImage: workerImage, WorkerEngineVersion: version.EngineVersion, MediaHostPathRoots: roots}
	if err := engineFlags.Apply(&defaults); err != nil {
		return err
	}
	if defaults.EventHub, err = eventHub(eventHubURL, hubKeys, tokenLifetime); err != nil {
		return err
	}
	if networkPolicies {
		if errs := validation.IsDNS1123Label(metricsNamespace); metricsNamespace != "" && len(errs) > 0 {
			return fmt.Errorf("--metrics-namespace %q: %s", metricsNamespace, strings.Join(errs, "; "))
		}
		defaults.WorkerNetworkPolicy = &render.WorkerNetworkPolicy{MetricsNamespace: metricsNamespace}
	}
	if otlpEndpoint != "" {
		if err := workerconfig.CheckOTLPEndpoint(otlpEndpoint, otlpProto); err != nil {
			return fmt.Errorf("--otlp-endpoint: %w", err)
		}
		defaults.Tracing = &render.TracingEndpoint{Endpoint: otlpEndpoint, Protocol: otlpProto}
	}

	scheme, err := apischeme.New()
	if err != nil {
		return fmt.Errorf("building the scheme: %w", err)
	}
	cfg, err := ctrl.GetConfig()
	if err != nil {
		return fmt.Errorf("loading the kubeconfig: %w", err)
	}
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme: scheme,
		Cache:  controller.CacheOptions(),
		// The probes and metrics are served below, within the project's
		// server limits.
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
		LeaderElection:         leaderElect,
		LeaderElectionID:       "operator.agents.stepwise.run",
	})
	if err != nil {
		return fmt.Errorf("creating the manager: %w", err)
	}
	ctx := ctrl.SetupSignalHandler()
	if probeAddr != "0" {
		probes, err := probeServer(ctx, probeAddr)
		if err != nil {
			return fmt.Errorf("--health-probe-bind-address: %w", err)
		}
		if err := mgr.Add(runnable{srv: probes}); err != nil {
			return err
		}
	}
	if metricsAddr != "0" {
		srv, err := metricsServer(ctx, metricsAddr, metricsSecure, cfg)
		if err != nil {
			return fmt.Errorf("--metrics-bind-address: %w", err)
		}
		if err := mgr.Add(runnable{srv: srv, tls: metricsSecure}); err != nil {
			return err
		}
	}
	if pollerQuietPeriod <= 0 {
		return fmt.Errorf("--poller-quiet-period must be positive, not %s", pollerQuietPeriod)
	}
	engines := engineadmin.New(ctrl.Log.WithName("engine"))
	defer engines.Close()
	probe := &controller.Engines{Client: engines}
	if err := controller.Setup(ctx, mgr, controller.Options{Defaults: defaults, OperatorNamespace: engineFlags.OperatorNamespace,
		Engines: probe, Probe: probe, PollerQuietPeriod: pollerQuietPeriod, VersionedRollouts: versionedRollouts,
		GatewayGrants: gatewayGrants}); err != nil {
		return err
	}
	// The Agents' rollout metrics, beside controller-runtime's own.
	if err := metrics.Registry.Register(&controller.AgentCollector{Reader: mgr.GetCache()}); err != nil {
		return fmt.Errorf("registering the Agent metrics: %w", err)
	}
	ctrl.Log.WithName("setup").Info("starting the operator", "version", version.Operator, "engineVersion", version.EngineVersion,
		"defaultEngine", engineFlags.DefaultEngine, "allowNamespaceEngines", engineFlags.AllowNamespaceEngines,
		"mediaHostPathRoots", roots)
	return mgr.Start(ctx)
}

// eventHub checks the event hub flags: both or neither.
func eventHub(url, keysFile string, lifetime time.Duration) (*render.EventHub, error) {
	switch {
	case url == "" && keysFile == "":
		return nil, nil
	case url == "":
		return nil, errors.New("--event-hub-publish-keys-file needs --event-hub-url")
	case keysFile == "":
		return nil, errors.New("--event-hub-url needs --event-hub-publish-keys-file")
	case lifetime < time.Hour:
		return nil, fmt.Errorf("--event-hub-token-lifetime %s: at least 1h", lifetime)
	}
	if err := workerconfig.CheckHubURL(url); err != nil {
		return nil, fmt.Errorf("--event-hub-url: %w", err)
	}
	keys, err := hub.LoadFile(keysFile, hub.ParsePublishKeys)
	if err != nil {
		return nil, fmt.Errorf("--event-hub-publish-keys-file: %w", err)
	}
	keys.OnError = func(err error) {
		ctrl.Log.WithName("setup").Error(err, "rereading the event hub publish keys; keeping the last good ones")
	}
	return &render.EventHub{URL: url, Keys: keys.Get, TokenLifetime: lifetime}, nil
}
