// Package e2e runs the operator for real: images imported into a
// single-node cluster (internal/testcluster), the Helm chart installing the
// operator, the samples applied, worker pods running sessions on a Temporal
// dev server the pods reach over the cluster's bridge. `make e2e` (part of
// `make test`) builds what it needs and sets its environment; without that
// environment the suite is skipped.
package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	apischeme "github.com/stepwise-run/stepwise/api/scheme"
	"github.com/stepwise-run/stepwise/internal/devserver"
	"github.com/stepwise-run/stepwise/internal/testcluster"
	"github.com/stepwise-run/stepwise/internal/testtools"
)

// env is the suite's environment, set by make e2e.
type env struct {
	kubeBin, etcd, images, helm, temporal string
	registry, version                     string
	// previousRelease is the directory of the release of the last commit
	// of the engine version before this build's: the image archives of its
	// operator, gateway and worker, tagged previousTag, and its chart
	// under chart/. previousEngineVersion is that engine version.
	previousRelease, previousTag, previousEngineVersion string
}

// The suite's shared parts, set up once by TestMain.
var (
	cfg     env
	cluster *testcluster.Cluster
	engine  *devserver.Server
	// engineForPods is the engine's address as pods reach it.
	engineForPods string
	kube          client.Client
	core          *kubernetes.Clientset
)

func TestMain(m *testing.M) {
	var missing []string
	tool := func(tool testtools.Tool) string {
		path, ok := tool.Lookup()
		if !ok {
			missing = append(missing, tool.Missing())
		}
		return path
	}
	setting := func(name string) string {
		value := os.Getenv(name)
		if value == "" {
			missing = append(missing, name+" is not set: `make e2e` sets it")
		}
		return value
	}
	cfg = env{
		kubeBin: tool(testtools.KubeBin), etcd: tool(testtools.Etcd), images: tool(testtools.Images),
		helm: tool(testtools.Helm), temporal: tool(testtools.Temporal), previousRelease: tool(testtools.PreviousRelease),
		// The release settings besides the tools: the images' registry and
		// tag, and the previous release's tag and engine version.
		registry: setting("STEPWISE_E2E_REGISTRY"), version: setting("STEPWISE_E2E_VERSION"),
		previousTag: setting("STEPWISE_E2E_PREVIOUS_TAG"), previousEngineVersion: setting("STEPWISE_E2E_PREVIOUS_ENGINE_VERSION"),
	}
	if len(missing) > 0 {
		fmt.Fprintln(os.Stdout, "the end-to-end suite runs with make e2e, which builds the cluster's binaries, the images and Helm:\n  "+strings.Join(missing, "\n  "))
		if testtools.Required() {
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(run(m))
}

func run(m *testing.M) int {
	ctrllog.SetLogger(logr.Discard()) // the suite's clients log nothing worth reading
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	dir, err := os.MkdirTemp("", "stepwise-e2e-")
	if err != nil {
		fmt.Fprintln(os.Stdout, err)
		return 1
	}
	archives, err := filepath.Glob(filepath.Join(cfg.images, "*.tar"))
	if err != nil || len(archives) == 0 {
		fmt.Fprintf(os.Stdout, "no image archives in %s: %v\n", cfg.images, err)
		return 1
	}
	previous, err := filepath.Glob(filepath.Join(cfg.previousRelease, "*.tar"))
	if err != nil || len(previous) == 0 {
		fmt.Fprintf(os.Stdout, "no image archives of the previous release in %s: %v\n", cfg.previousRelease, err)
		return 1
	}
	archives = append(archives, previous...)
	logf := func(format string, args ...any) { fmt.Fprintf(os.Stdout, "e2e: "+format+"\n", args...) }
	cluster, err = testcluster.Start(ctx, testcluster.Options{
		Dir: dir, KubeBin: cfg.kubeBin, Etcd: cfg.etcd, Images: archives,
		SandboxImage: image("pause"), Log: logf,
	})
	if err != nil {
		fmt.Fprintln(os.Stdout, "starting the test cluster:", err)
		return 1
	}
	code := 0
	defer func() {
		logf("stopping the cluster")
		if err := cluster.Stop(); err != nil {
			fmt.Fprintln(os.Stdout, "stopping the test cluster:", err)
			code = 1
		}
		diffs, err := cluster.Host.Differences()
		if err != nil || len(diffs) > 0 {
			fmt.Fprintf(os.Stdout, "the stopped cluster left the host changed: %v\n%s\n", err, strings.Join(diffs, "\n"))
			code = 1
		}
		if code == 0 {
			_ = os.RemoveAll(dir)
		} else {
			fmt.Fprintln(os.Stdout, "the cluster's logs are in", filepath.Join(dir, "logs"))
		}
	}()

	// A ten-second long poll lets a stopped worker's last poll age past the
	// operator's quiet period (set short at install) without a minute's
	// wait. The engine keeps a poller for longer than that quiet period, or
	// the operator could not see a worker that stopped polling a moment
	// ago; and it forgets one soon after, so that a drained version's
	// record may be deleted within seconds, not Temporal's five minutes.
	engine, err = devserver.Start(ctx, cfg.temporal,
		"--dynamic-config-value", `matching.longPollExpirationInterval="10s"`,
		"--dynamic-config-value", fmt.Sprintf(`matching.PollerHistoryTTL="%s"`, 2*pollerQuietPeriod),
		"--dynamic-config-value", `matching.wv.VersionDrainageStatusVisibilityGracePeriod="2s"`,
		"--dynamic-config-value", `matching.wv.VersionDrainageStatusRefreshInterval="2s"`)
	if err != nil {
		fmt.Fprintln(os.Stdout, err)
		return 1
	}
	defer func() { _ = engine.Stop() }()
	// Pods reach the engine on the bridge, where only this host listens.
	forward, err := testcluster.Forward(engine.FrontendHostPort())
	if err != nil {
		fmt.Fprintln(os.Stdout, err)
		return 1
	}
	defer func() { _ = forward.Close() }()
	engineForPods = forward.Address()

	rest, err := cluster.RESTConfig()
	if err != nil {
		fmt.Fprintln(os.Stdout, err)
		return 1
	}
	scheme, err := apischeme.New()
	if err != nil {
		fmt.Fprintln(os.Stdout, err)
		return 1
	}
	if kube, err = client.New(rest, client.Options{Scheme: scheme}); err != nil {
		fmt.Fprintln(os.Stdout, err)
		return 1
	}
	if core, err = kubernetes.NewForConfig(rest); err != nil {
		fmt.Fprintln(os.Stdout, err)
		return 1
	}
	code = m.Run()
	if code != 0 {
		dumpState()
	}
	return code
}

// image is the reference the images were built and imported under.
func image(name string) string { return cfg.registry + "/" + name + ":" + cfg.version }

// previousImage is the reference of an image of the previous release.
func previousImage(name string) string { return cfg.registry + "/" + name + ":" + cfg.previousTag }

// kubectl runs kubectl as the administrator and returns its output.
func kubectl(t testing.TB, args ...string) string {
	t.Helper()
	out, err := kubectlErr(args...)
	if err != nil {
		t.Fatalf("kubectl %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return out
}

func kubectlErr(args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	out, err := cluster.Kubectl(ctx, args...).CombinedOutput()
	return string(out), err
}

// helm runs the pinned Helm against the cluster.
func helm(t testing.TB, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, cfg.helm, append(args, "--kubeconfig", cluster.Kubeconfig())...)
	cmd.Env = append(os.Environ(), "HELM_CACHE_HOME="+filepath.Join(cluster.Dir(), "helm", "cache"),
		"HELM_CONFIG_HOME="+filepath.Join(cluster.Dir(), "helm", "config"), "HELM_DATA_HOME="+filepath.Join(cluster.Dir(), "helm", "data"))
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("helm %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// dumpState prints what a failed run needs to be understood.
func dumpState() {
	for _, args := range [][]string{
		{"get", "nodes,pods,deployments,replicasets", "-A", "-o", "wide"},
		{"get", "stepwise", "-A", "-o", "wide"},
		{"get", "events", "-A", "--sort-by", ".lastTimestamp"},
		{"logs", "-n", operatorNamespace, "-l", "app.kubernetes.io/component=operator", "--tail", "100"},
		{"logs", "-n", operatorNamespace, "-l", "app.kubernetes.io/component in (gateway,event-hub)", "--tail", "50"},
	} {
		out, err := kubectlErr(args...)
		fmt.Fprintf(os.Stdout, "--- kubectl %s (%v)\n%s\n", strings.Join(args, " "), err, out)
	}
}
