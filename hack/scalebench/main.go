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
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8sruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/yaml"

	apischeme "github.com/stepwise-run/stepwise/api/scheme"
	agentsv1 "github.com/stepwise-run/stepwise/api/v1alpha1"
	"github.com/stepwise-run/stepwise/internal/controller"
	"github.com/stepwise-run/stepwise/internal/engineadmin"
	"github.com/stepwise-run/stepwise/internal/render"
	"github.com/stepwise-run/stepwise/internal/version"
)

// operatorUser is the identity the operator runs as; the audit log records
// this user's writes only.
const operatorUser = "stepwise-operator"

// benchNamespace holds every object the benchmark creates.
const benchNamespace = "bench"

// mediaRoot is the host directory the operator allows MediaStores to mount.
const mediaRoot = "/srv/stepwise"

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

// unlimited turns off client-side rate limiting, as cmd/manager's
// configuration does: the API server's priority and fairness limit.
func unlimited(cfg *rest.Config) *rest.Config {
	cfg = rest.CopyConfig(cfg)
	cfg.QPS, cfg.Burst = -1, 0
	return cfg
}

// operatorIdentity binds the generated ClusterRole to the operator's own
// user and returns that user's configuration.
func operatorIdentity(env *envtest.Environment, c client.Client, rolePath string) (*rest.Config, error) {
	data, err := os.ReadFile(rolePath)
	if err != nil {
		return nil, err
	}
	role := &rbacv1.ClusterRole{}
	if err := yaml.Unmarshal(data, role); err != nil {
		return nil, fmt.Errorf("reading %s: %w", rolePath, err)
	}
	ctx := context.Background()
	if err := c.Create(ctx, role); err != nil {
		return nil, err
	}
	if err := c.Create(ctx, &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: operatorUser},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role.Name},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: operatorUser}},
	}); err != nil {
		return nil, err
	}
	user, err := env.AddUser(envtest.User{Name: operatorUser}, nil)
	if err != nil {
		return nil, err
	}
	return unlimited(user.Config()), nil
}

// runningOperator is the operator's manager running in this process.
type runningOperator struct {
	cancel context.CancelFunc
	done   chan error
}

// startOperator runs the controllers as cmd/manager does, with a default
// engine so Agents without spec.engine resolve. A syncPeriod of zero keeps
// the manager's default.
func startOperator(ctx context.Context, cfg *rest.Config, scheme *k8sruntime.Scheme, syncPeriod time.Duration) (*runningOperator, error) {
	cacheOptions := controller.CacheOptions()
	if syncPeriod > 0 {
		cacheOptions.SyncPeriod = &syncPeriod
	}
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme:                 scheme,
		Cache:                  cacheOptions,
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
		// The benchmark runs a second manager after the first stops.
		Controller: config.Controller{SkipNameValidation: ptr.To(true)},
	})
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(ctx)
	defaults := render.Defaults{
		DefaultEngine:       benchEngine,
		WorkerImage:         "ghcr.io/stepwise-run/agent-worker:" + version.Operator,
		WorkerEngineVersion: version.EngineVersion,
		MediaHostPathRoots:  []string{mediaRoot},
	}
	if err := controller.Setup(ctx, mgr, controller.Options{Defaults: defaults, OperatorNamespace: benchNamespace, Probe: fixedEngine{}}); err != nil {
		cancel()
		return nil, err
	}
	op := &runningOperator{cancel: cancel, done: make(chan error, 1)}
	go func() { op.done <- mgr.Start(ctx) }()
	return op, nil
}

// benchEngine is the ClusterEngine every benchmark Agent uses.
const benchEngine = "bench"

// fixedEngine answers for an engine no Agent's workers reach: the
// benchmark measures the operator, which asks the engine who it is once
// per ClusterEngine.
type fixedEngine struct{}

func (fixedEngine) Identity(context.Context, engineadmin.Connection) (engineadmin.Identity, error) {
	return engineadmin.Identity{NamespaceID: "00000000-0000-0000-0000-00000000bench", ServerVersion: "1.32.0"}, nil
}

func (fixedEngine) EnsureSearchAttributes(context.Context, engineadmin.Connection) error { return nil }

// stop stops the manager and waits until it has.
func (o *runningOperator) stop() error {
	if o.cancel == nil {
		return nil
	}
	o.cancel()
	o.cancel = nil
	return <-o.done
}

// createReferences creates the namespace, and the ToolSources and
// MediaStores the Agents share.
func createReferences(ctx context.Context, c client.Client, opts options) error {
	if err := c.Create(ctx, &agentsv1.ClusterEngine{ObjectMeta: metav1.ObjectMeta{Name: benchEngine}, Spec: agentsv1.ClusterEngineSpec{
		Address: "temporal-frontend.temporal.svc:7233", Namespace: "default", NamespaceSelector: &metav1.LabelSelector{},
	}}); err != nil {
		return err
	}
	if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: benchNamespace}}); err != nil {
		return err
	}
	for i := range referenceGroups(opts) {
		ts := &agentsv1.ToolSource{
			ObjectMeta: metav1.ObjectMeta{Namespace: benchNamespace, Name: fmt.Sprintf("tools-%d", i)},
			Spec:       agentsv1.ToolSourceSpec{MCP: agentsv1.MCPServer{Stdio: &agentsv1.MCPStdio{Command: "mcp-server-files"}}},
		}
		ms := &agentsv1.MediaStore{
			ObjectMeta: metav1.ObjectMeta{Namespace: benchNamespace, Name: fmt.Sprintf("media-%d", i)},
			Spec:       agentsv1.MediaStoreSpec{LocalDirectory: &agentsv1.LocalDirectoryMediaStore{Root: fmt.Sprintf("%s/%s/media-%d", mediaRoot, benchNamespace, i)}},
		}
		if err := errors.Join(c.Create(ctx, ts), c.Create(ctx, ms)); err != nil {
			return err
		}
	}
	return nil
}

// referenceGroups is how many ToolSource and MediaStore pairs there are.
func referenceGroups(opts options) int {
	if opts.sharedBy == 0 {
		return 0
	}
	return (opts.agents + opts.sharedBy - 1) / opts.sharedBy
}

func referencesText(opts options) string {
	if opts.sharedBy == 0 {
		return "no ToolSources or MediaStores"
	}
	return fmt.Sprintf("each group of %d shares one ToolSource and one MediaStore: %d of each", opts.sharedBy, referenceGroups(opts))
}

// createAgents creates the Agents from opts.concurrency clients at once.
func createAgents(ctx context.Context, c client.Client, opts options, watch *readiness) error {
	names := make(chan int)
	errs := make(chan error, opts.concurrency)
	var wg sync.WaitGroup
	for range opts.concurrency {
		wg.Go(func() {
			for i := range names {
				agent := benchAgent(i, opts)
				watch.created(agent.Name)
				if err := c.Create(ctx, agent); err != nil {
					errs <- fmt.Errorf("creating Agent %s: %w", agent.Name, err)
					return
				}
			}
		})
	}
	var err error
feed:
	for i := range opts.agents {
		select {
		case names <- i:
		case err = <-errs:
			break feed
		}
	}
	close(names)
	wg.Wait()
	close(errs)
	for e := range errs {
		err = errors.Join(err, e)
	}
	return err
}

// benchAgent is Agent i: a scripted model, its own Flow type, and, unless
// the Agents share none, its group's ToolSource and MediaStore.
func benchAgent(i int, opts options) *agentsv1.Agent {
	agent := &agentsv1.Agent{
		ObjectMeta: metav1.ObjectMeta{Namespace: benchNamespace, Name: fmt.Sprintf("agent-%04d", i)},
		Spec: agentsv1.AgentSpec{
			FlowType:     fmt.Sprintf("BenchAgent%d", i),
			Instructions: "Answer questions about the benchmark.",
			Model:        agentsv1.ModelSpec{Provider: agentsv1.ModelProviderScripted, Name: "demo"},
		},
	}
	if opts.sharedBy > 0 {
		group := i / opts.sharedBy
		agent.Spec.ToolSources = []agentsv1.LocalObjectReference{{Name: fmt.Sprintf("tools-%d", group)}}
		agent.Spec.MediaStore = &agentsv1.LocalObjectReference{Name: fmt.Sprintf("media-%d", group)}
	}
	return agent
}

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
