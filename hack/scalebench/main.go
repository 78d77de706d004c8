// Command scalebench measures the operator at scale on a real API server.
// It starts kube-apiserver and etcd (envtest) with an audit log of the
// operator's writes, runs the operator's controllers in this process as
// cmd/manager sets them up (its own user, the generated role, no client-side
// rate limit, a default engine), applies N Agents at once, and reports:
//
//   - the time until every Agent is Ready for its current generation;
//   - the writes the operator made to get there;
//   - the writes it makes on a resync where nothing changed: after a
//     restart of the operator, whose new informers hand it every object,
//     and on a periodic resync of its cache;
//   - its heap in use, after a garbage collection, holding every Agent.
//
// Writes are counted by the API server: from its audit log, which names
// the user (only the operator's writes are logged), and from its own
// apiserver_request_total counter, which tells server-side apply from
// other patches.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"time"

	"k8s.io/client-go/kubernetes"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	apischeme "github.com/stepwise-run/stepwise/api/scheme"
)

type options struct {
	assets, crds, role string
	agents             int
	sharedBy           int
	concurrency        int
	syncPeriod         time.Duration
	quiet              time.Duration
	timeout            time.Duration
	workDir            string
}

func main() {
	var opts options
	flag.StringVar(&opts.assets, "assets", os.Getenv("KUBEBUILDER_ASSETS"), "Directory with kube-apiserver and etcd.")
	flag.StringVar(&opts.crds, "crds", "config/crd/bases", "Directory of the CRDs.")
	flag.StringVar(&opts.role, "role", "config/rbac/role.yaml", "The operator's generated ClusterRole.")
	flag.IntVar(&opts.agents, "agents", 1000, "How many Agents to apply at once.")
	flag.IntVar(&opts.sharedBy, "shared-by", 100,
		"How many Agents share one ToolSource and one MediaStore; 0 means the Agents reference none.")
	flag.IntVar(&opts.concurrency, "concurrency", 32, "How many Agents are being created at any moment.")
	flag.DurationVar(&opts.syncPeriod, "sync-period", 2*time.Minute,
		"The restarted operator's cache resync period, whose resync is measured too; 0 skips that phase.")
	flag.DurationVar(&opts.quiet, "quiet", 5*time.Second, "How long the operator must have reconciled nothing to count as settled.")
	flag.DurationVar(&opts.timeout, "timeout", 30*time.Minute, "How long each phase may take.")
	flag.StringVar(&opts.workDir, "work-dir", "", "Where the audit and operator logs go; a new temporary directory when empty.")
	flag.Parse()
	if err := run(opts, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "scalebench:", err)
		os.Exit(1)
	}
}

func run(opts options, out io.Writer) (err error) {
	if opts.assets == "" {
		return errors.New("--assets (or KUBEBUILDER_ASSETS) must name the directory with kube-apiserver and etcd; run make bench-scale")
	}
	if opts.agents < 1 || opts.concurrency < 1 || opts.sharedBy < 0 {
		return fmt.Errorf("--agents %d, --concurrency %d, --shared-by %d: want at least 1, 1 and 0", opts.agents, opts.concurrency, opts.sharedBy)
	}
	if opts.workDir == "" {
		if opts.workDir, err = os.MkdirTemp("", "stepwise-scalebench-"); err != nil {
			return err
		}
	} else if err := os.MkdirAll(opts.workDir, 0o750); err != nil {
		return err
	}
	auditLog := filepath.Join(opts.workDir, "audit.log")
	policy := filepath.Join(opts.workDir, "audit-policy.yaml")
	if err := os.WriteFile(policy, []byte(auditPolicy), 0o600); err != nil {
		return err
	}
	operatorLog, err := os.Create(filepath.Join(opts.workDir, "operator.log"))
	if err != nil {
		return err
	}
	defer func() { _ = operatorLog.Close() }()
	ctrl.SetLogger(zap.New(zap.WriteTo(operatorLog)))

	fmt.Fprintf(out, "scalebench: %d Agents (%s), on %d CPUs, GOMAXPROCS %d, %s; logs in %s\n",
		opts.agents, referencesText(opts), runtime.NumCPU(), runtime.GOMAXPROCS(0), runtime.Version(), opts.workDir)
	if load, err := os.ReadFile("/proc/loadavg"); err == nil {
		fmt.Fprintf(out, "load average at start: %s", load)
	}

	env := &envtest.Environment{
		BinaryAssetsDirectory: opts.assets,
		CRDDirectoryPaths:     []string{opts.crds},
		ErrorIfCRDPathMissing: true,
	}
	env.ControlPlane.GetAPIServer().Configure().
		Set("audit-policy-file", policy).
		Set("audit-log-path", auditLog).
		Set("audit-log-format", "json").
		Set("audit-log-mode", "blocking")
	if _, err := env.Start(); err != nil {
		return fmt.Errorf("starting the API server: %w", err)
	}
	defer func() { err = errors.Join(err, env.Stop()) }()

	scheme, err := apischeme.New()
	if err != nil {
		return err
	}
	admin, err := env.AddUser(envtest.User{Name: "admin", Groups: []string{"system:masters"}}, nil)
	if err != nil {
		return err
	}
	adminConfig := unlimited(admin.Config())
	c, err := client.New(adminConfig, client.Options{Scheme: scheme})
	if err != nil {
		return err
	}
	clientset, err := kubernetes.NewForConfig(adminConfig)
	if err != nil {
		return err
	}
	operatorConfig, err := operatorIdentity(env, c, opts.role)
	if err != nil {
		return err
	}
	ctx := context.Background()
	writes := &writeCounter{auditLog: auditLog, metrics: clientset.Discovery().RESTClient()}

	baseline := heapInUse()
	if err := createReferences(ctx, c, opts); err != nil {
		return err
	}

	// Phase 1: apply every Agent at once to a running operator.
	op, err := startOperator(ctx, operatorConfig, scheme, 0)
	if err != nil {
		return err
	}
	watch, err := watchReadiness(ctx, adminConfig, scheme, opts.agents)
	if err != nil {
		return errors.Join(err, op.stop())
	}
	mark, err := writes.mark(ctx)
	if err != nil {
		return errors.Join(err, op.stop())
	}
	start := time.Now()
	if err := createAgents(ctx, c, opts, watch); err != nil {
		return errors.Join(err, op.stop())
	}
	created := time.Since(start)
	allReady, err := watch.wait(opts.timeout)
	if err != nil {
		return errors.Join(err, op.stop())
	}
	readyIn := allReady.Sub(start)
	latencies := watch.latencies()
	watch.stop()
	if err := settle(ctx, opts, nil); err != nil {
		return errors.Join(err, op.stop())
	}
	toReady, err := writes.since(ctx, mark)
	if err != nil {
		return errors.Join(err, op.stop())
	}
	fmt.Fprintf(out, "\n## Apply %d Agents at once\n\n", opts.agents)
	fmt.Fprintf(out, "created in %s; all Ready in %s (%.1f Agents/s); per Agent, create to Ready: p50 %s, p90 %s, max %s\n",
		created.Round(time.Millisecond), readyIn.Round(time.Millisecond), float64(opts.agents)/readyIn.Seconds(),
		percentile(latencies, 50), percentile(latencies, 90), percentile(latencies, 100))
	fmt.Fprintf(out, "the operator's writes until settled (%.2f per Agent):\n", float64(toReady.total())/float64(opts.agents))
	toReady.print(out)
	firstHeap := heapInUse()

	// Phase 2: a restarted operator sees every object anew and reconciles
	// each; nothing changed, so nothing should be written.
	if err := op.stop(); err != nil {
		return err
	}
	before := reconcileCounts()
	if mark, err = writes.mark(ctx); err != nil {
		return err
	}
	restarted := time.Now()
	if op, err = startOperator(ctx, operatorConfig, scheme, opts.syncPeriod); err != nil {
		return err
	}
	defer func() { err = errors.Join(err, op.stop()) }()
	everyObject := func(now map[string]float64) bool { return reconciledEveryObject(before, now, opts) }
	if err := settle(ctx, opts, everyObject); err != nil {
		return err
	}
	resynced := time.Since(restarted)
	afterRestart, err := writes.since(ctx, mark)
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "\n## Restart the operator: every object reconciled again, nothing changed\n\n")
	fmt.Fprintf(out, "reconciled %s in %s; writes: %d\n", reconcileDelta(before, reconcileCounts()), resynced.Round(time.Millisecond), afterRestart.total())
	afterRestart.print(out)
	secondHeap := heapInUse()

	// Phase 3: the restarted operator's cache resyncs and hands it every
	// object once more.
	if opts.syncPeriod > 0 {
		before = reconcileCounts()
		if mark, err = writes.mark(ctx); err != nil {
			return err
		}
		periodic := opts
		periodic.timeout = 3*opts.syncPeriod + opts.timeout
		if err := settle(ctx, periodic, func(now map[string]float64) bool { return reconciledEveryObject(before, now, opts) }); err != nil {
			return err
		}
		onResync, err := writes.since(ctx, mark)
		if err != nil {
			return err
		}
		fmt.Fprintf(out, "\n## Periodic resync (every %s): every object reconciled again, nothing changed\n\n", opts.syncPeriod)
		fmt.Fprintf(out, "reconciled %s; writes: %d\n", reconcileDelta(before, reconcileCounts()), onResync.total())
		onResync.print(out)
	}

	fmt.Fprintf(out, "\n## Operator heap in use after GC\n\n")
	fmt.Fprintf(out, "before the operator started: %s; %d Agents applied: %s; after the restart: %s\n",
		mib(baseline), opts.agents, mib(firstHeap), mib(secondHeap))
	if load, err := os.ReadFile("/proc/loadavg"); err == nil {
		fmt.Fprintf(out, "load average at the end: %s", load)
	}
	return nil
}

// auditPolicy logs every write the operator's user makes, and nothing else.
const auditPolicy = `apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: ["RequestReceived"]
rules:
- level: Metadata
  users: ["` + operatorUser + `"]
  verbs: ["create", "update", "patch", "delete", "deletecollection"]
- level: None
`

// heapInUse is this process's heap in use after a garbage collection: the
// operator's, as the benchmark itself holds little.
func heapInUse() uint64 {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapInuse
}

func mib(n uint64) string { return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20)) }

// percentile is the p-th percentile of sorted durations, rounded.
func percentile(sorted []time.Duration, p int) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := min(len(sorted)-1, (len(sorted)*p+99)/100-1)
	return sorted[max(i, 0)].Round(time.Millisecond)
}
