// Command manager runs the operator: the Agent, ToolSource and MediaStore
// controllers.
package main

import (
	"flag"
	"fmt"
	"os"

	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	agentsv1 "github.com/stepwise-run/stepwise/api/v1alpha1"
	"github.com/stepwise-run/stepwise/internal/controller"
	"github.com/stepwise-run/stepwise/internal/render"
	"github.com/stepwise-run/stepwise/internal/version"
)

func main() {
	if err := run(); err != nil {
		ctrl.Log.WithName("setup").Error(err, "the operator stopped")
		os.Exit(1)
	}
}

func run() error {
	var (
		metricsAddr, probeAddr         string
		leaderElect                    bool
		engineAddress, engineNamespace string
		workerImage                    string
	)
	flag.StringVar(&metricsAddr, "metrics-bind-address", ":8080", "Address of the metrics endpoint; 0 turns it off.")
	flag.StringVar(&probeAddr, "health-probe-bind-address", ":8081", "Address of the health and readiness probes.")
	flag.BoolVar(&leaderElect, "leader-elect", false, "Elect one active operator among replicas.")
	flag.StringVar(&engineAddress, "default-engine-address", "",
		"host:port of the Temporal frontend for Agents without spec.engine; empty means such Agents are not applied.")
	flag.StringVar(&engineNamespace, "default-engine-namespace", "default", "Temporal namespace for Agents without spec.engine.")
	flag.StringVar(&workerImage, "worker-image", "ghcr.io/stepwise-run/agent-worker:"+version.Operator,
		"The stock worker image, for Agents without spec.workers.image.")
	opts := zap.Options{}
	opts.BindFlags(flag.CommandLine)
	flag.Parse()
	ctrl.SetLogger(zap.New(zap.UseFlagOptions(&opts)))

	defaults := render.Defaults{WorkerImage: workerImage, WorkerEngineVersion: version.EngineVersion}
	if engineAddress != "" {
		defaults.Engine = &agentsv1.EngineSpec{Address: engineAddress, Namespace: engineNamespace}
	}

	scheme, err := controller.NewScheme()
	if err != nil {
		return fmt.Errorf("building the scheme: %w", err)
	}
	cfg, err := ctrl.GetConfig()
	if err != nil {
		return fmt.Errorf("loading the kubeconfig: %w", err)
	}
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme:                 scheme,
		Cache:                  controller.CacheOptions(),
		Metrics:                metricsserver.Options{BindAddress: metricsAddr},
		HealthProbeBindAddress: probeAddr,
		LeaderElection:         leaderElect,
		LeaderElectionID:       "operator.agents.stepwise.run",
	})
	if err != nil {
		return fmt.Errorf("creating the manager: %w", err)
	}
	ctx := ctrl.SetupSignalHandler()
	if err := controller.Setup(ctx, mgr, controller.Options{Defaults: defaults}); err != nil {
		return err
	}
	if err := mgr.AddHealthzCheck("healthz", healthz.Ping); err != nil {
		return err
	}
	if err := mgr.AddReadyzCheck("readyz", healthz.Ping); err != nil {
		return err
	}
	ctrl.Log.WithName("setup").Info("starting the operator", "version", version.Operator, "engineVersion", version.EngineVersion,
		"defaultEngine", engineAddress)
	return mgr.Start(ctx)
}
