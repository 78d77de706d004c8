package enginetest

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	temporalclient "go.temporal.io/sdk/client"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	agentsv1 "github.com/stepwise-run/stepwise/api/v1alpha1"
	"github.com/stepwise-run/stepwise/internal/devserver"
	"github.com/stepwise-run/stepwise/internal/tenancy"
	"github.com/stepwise-run/stepwise/internal/testtools"
	"github.com/stepwise-run/stepwise/internal/version"
	"github.com/stepwise-run/stepwise/pkg/client"
	"github.com/stepwise-run/stepwise/pkg/workerconfig"
)

// VersionedServerArgs let a test see a Worker Deployment version drained,
// and its stopped workers forgotten, within seconds, not the minutes
// Temporal waits by default.
var VersionedServerArgs = []string{
	"--dynamic-config-value", `matching.PollerHistoryTTL="5s"`,
	"--dynamic-config-value", `matching.wv.VersionDrainageStatusVisibilityGracePeriod="2s"`,
	"--dynamic-config-value", `matching.wv.VersionDrainageStatusRefreshInterval="2s"`,
}

// StartDevServer starts a Temporal dev server, with extra arguments such as
// dynamic configuration, and stops it when the test ends.
func StartDevServer(t testing.TB, extra ...string) *devserver.Server {
	t.Helper()
	server, err := devserver.Start(context.Background(), testtools.Temporal.Path(t), extra...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = server.Stop() })
	return server
}

// binaries builds each worker binary once per test process.
var binaries sync.Map

type built struct {
	once sync.Once
	path string
	err  error
}

// buildBinary builds a main package of this module, named relative to this
// package's directory, once per test process.
func buildBinary(t testing.TB, pkg string) string {
	t.Helper()
	v, _ := binaries.LoadOrStore(pkg, &built{})
	b := v.(*built)
	b.once.Do(func() {
		dir, err := os.MkdirTemp("", "stepwise-worker-")
		if err != nil {
			b.err = err
			return
		}
		_, file, _, _ := runtime.Caller(0)
		b.path = filepath.Join(dir, filepath.Base(pkg))
		cmd := exec.Command("go", "build", "-o", b.path, pkg)
		cmd.Dir = filepath.Dir(file)
		if out, err := cmd.CombinedOutput(); err != nil {
			b.err = fmt.Errorf("building %s: %w\n%s", pkg, err, out)
		}
	})
	if b.err != nil {
		t.Fatal(b.err)
	}
	return b.path
}

// workerBinary is the test worker.
func workerBinary(t testing.TB) string { return buildBinary(t, "./testworker") }

// StockWorkerBinary is the stock worker, cmd/agent-worker.
func StockWorkerBinary(t testing.TB) string { return buildBinary(t, "../../cmd/agent-worker") }

// Stack is a dev server and the worker processes of one Flow type.
type Stack struct {
	t        testing.TB
	Dir      string
	Server   *devserver.Server
	Client   temporalclient.Client
	FlowType string
	Config   workerconfig.Config
	// Binary is the worker the stack starts: the test worker, unless a
	// test names another, such as the stock worker.
	Binary string
	// Env is added to each worker's environment.
	Env     []string
	workers int
	started []*Worker
}

// NewStack starts a dev server for a Flow type whose workers run the test
// worker with the "test" script.
func NewStack(t testing.TB, flowType string, serverArgs ...string) *Stack {
	t.Helper()
	server := StartDevServer(t, serverArgs...)
	s := &Stack{
		t: t, Dir: t.TempDir(), Server: server, Client: server.Client(), FlowType: flowType,
		Binary: workerBinary(t),
		Config: workerconfig.Config{
			APIVersion: workerconfig.APIVersion, Kind: workerconfig.Kind,
			Agent:    workerconfig.AgentRef{Namespace: "test", Name: "test", UID: "uid-test"},
			FlowType: flowType, EngineVersion: version.EngineVersion, TaskSlots: 10,
			Engine: workerconfig.Engine{
				Address: server.FrontendHostPort(), Namespace: "default", TaskQueue: tenancy.Tenant("test", flowType).TaskQueue(),
				StepHeartbeatTimeout: metav1.Duration{Duration: 2 * time.Second},
			},
			Definition: workerconfig.Definition{
				Name: "test", Model: workerconfig.Model{Provider: "scripted", Name: "test"},
				DefaultToolEffect: "unclassified",
				BuiltInTools:      []string{"ask_user", "durable_wait"},
				Limits: workerconfig.Limits{
					MaxModelCallsPerTurn: 100, MaxDurableWait: metav1.Duration{Duration: time.Hour},
					EventStreamCapacityBytes: 1 << 20,
				},
			},
		},
	}
	return s
}

// Agent is the stack's Agent as a client addresses it, under the names its
// workers' configuration gives them.
func (s *Stack) Agent() client.Agent {
	a := client.Agent{Namespace: s.Config.Agent.Namespace, Name: s.Config.Agent.Name, UID: s.Config.Agent.UID, FlowType: s.FlowType,
		TaskQueue: s.Config.Engine.TaskQueue, SharedTaskQueue: s.Config.Engine.SharedTaskQueue}
	if shared := tenancy.Shared(s.FlowType); s.Config.Engine.TaskQueue == shared.TaskQueue() {
		a.SharedTaskQueue = shared.TaskQueue()
	}
	return a
}

// SetAgent makes the stack's workers those of Agent namespace/name, under
// the Agent's own names.
func (s *Stack) SetAgent(namespace, name string) {
	s.Config.Agent = workerconfig.AgentRef{Namespace: namespace, Name: name, UID: "uid-" + namespace + "-" + name}
	s.Config.Engine.TaskQueue = tenancy.Tenant(namespace, s.FlowType).TaskQueue()
}

// Names are the names the stack's workers keep its sessions under.
func (s *Stack) Names() tenancy.Names {
	if shared := tenancy.Shared(s.FlowType); s.Config.Engine.TaskQueue == shared.TaskQueue() {
		return shared
	}
	return tenancy.Tenant(s.Config.Agent.Namespace, s.FlowType)
}

// WorkflowID is the engine's ID of one of the stack's sessions.
func (s *Stack) WorkflowID(sessionID string) string { return s.Names().WorkflowID(sessionID) }

// ReadyClusterEngine is a ClusterEngine of every namespace, as the operator
// reports it once it reached the engine at address, for tests that render
// what the operator would.
func ReadyClusterEngine(name, address string) *agentsv1.ClusterEngine {
	return &agentsv1.ClusterEngine{
		ObjectMeta: metav1.ObjectMeta{Name: name, Generation: 1},
		Spec:       agentsv1.ClusterEngineSpec{Address: address, Namespace: "default", NamespaceSelector: &metav1.LabelSelector{}},
		Status: agentsv1.ClusterEngineStatus{ObservedGeneration: 1, NamespaceID: "namespace-id-of-" + name,
			Conditions: []metav1.Condition{{Type: agentsv1.ConditionReady, Status: metav1.ConditionTrue, Reason: agentsv1.ReasonReconciled}}},
	}
}

// Worker is one worker child process in its own process group.
type Worker struct {
	cmd    *exec.Cmd
	Health string
	// Debug is the loopback address that serves the worker's recent
	// session events.
	Debug string
	// Metrics is the address that serves the worker's /metrics.
	Metrics string
	done    chan struct{}
}

// StartWorker starts a worker process and waits until it polls for tasks.
func (s *Stack) StartWorker() *Worker {
	s.t.Helper()
	return s.StartWorkerWith()
}

// StartWorkerWith starts a worker process with more command-line arguments,
// such as a Worker Deployment version, and waits until it polls for tasks.
// Its health, debug and metrics ports are chosen free but released before
// the worker binds them, so another process may take one first; the worker
// then exits saying so and is started again on fresh ports.
func (s *Stack) StartWorkerWith(args ...string) *Worker {
	s.t.Helper()
	const attempts = 5
	for attempt := 1; ; attempt++ {
		w, log, ready := s.startWorker(args)
		if ready {
			return w
		}
		if log == "" {
			s.t.Fatal("the worker was not ready within 30s")
		}
		if attempt == attempts || !strings.Contains(log, "address already in use") {
			s.t.Fatalf("the worker exited before it was ready:\n%s", log)
		}
	}
}

// startWorker starts one worker process and waits until it is ready. A
// worker that exits first is reported with its log; one still starting at
// the deadline with none.
func (s *Stack) startWorker(args []string) (w *Worker, exitLog string, ready bool) {
	s.t.Helper()
	s.workers++
	cfg := s.Config
	cfg.HealthAddress = freeAddress(s.t)
	cfg.DebugAddress = freeAddress(s.t)
	cfg.MetricsAddress = freeAddress(s.t)
	doc, err := cfg.Encode()
	if err != nil {
		s.t.Fatal(err)
	}
	path := filepath.Join(s.Dir, fmt.Sprintf("worker-%d.json", s.workers))
	if err := os.WriteFile(path, doc, 0o600); err != nil {
		s.t.Fatal(err)
	}
	logFile, err := os.Create(filepath.Join(s.Dir, fmt.Sprintf("worker-%d.log", s.workers)))
	if err != nil {
		s.t.Fatal(err)
	}
	cmd := exec.Command(s.Binary, append([]string{"--config=" + path, "--stop-timeout=5s"}, args...)...)
	cmd.Env = append(append(os.Environ(), "STEPWISE_TEST_DIR="+s.Dir), s.Env...)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		s.t.Fatalf("starting a worker: %v", err)
	}
	w = &Worker{cmd: cmd, Health: cfg.HealthAddress, Debug: cfg.DebugAddress, Metrics: cfg.MetricsAddress, done: make(chan struct{})}
	go func() { _ = cmd.Wait(); _ = logFile.Close(); close(w.done) }()
	s.t.Cleanup(w.Kill)
	deadline := time.Now().Add(30 * time.Second)
	for {
		resp, err := http.Get("http://" + w.Health + "/readyz")
		if err == nil {
			_ = resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				s.started = append(s.started, w)
				return w, "", true
			}
		}
		select {
		case <-w.done:
			log, _ := os.ReadFile(logFile.Name())
			return nil, string(log) + "\n(exited)", false
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return nil, "", false
		}
	}
}

// Kill kills the worker's process group with SIGKILL and waits for it.
func (w *Worker) Kill() {
	if w.cmd.Process == nil {
		return
	}
	_ = syscall.Kill(-w.cmd.Process.Pid, syscall.SIGKILL)
	<-w.done
}

// Terminate sends SIGTERM, as Kubernetes does when it stops a pod.
func (w *Worker) Terminate() {
	_ = syscall.Kill(w.cmd.Process.Pid, syscall.SIGTERM)
}

// Exited reports whether the worker process has exited.
func (w *Worker) Exited() bool {
	select {
	case <-w.done:
		return true
	default:
		return false
	}
}

// Pid is the worker's process ID.
func (w *Worker) Pid() int { return w.cmd.Process.Pid }

// Gate returns a gate of the stack's workers.
func (s *Stack) Gate(name string) Gate { return Gate{Dir: s.Dir, Name: name} }

// Calls are the tool calls that ran: tool, idempotency key, attempt, pid.
func (s *Stack) Calls() [][]string { return (&Log{Path: filepath.Join(s.Dir, "calls.log")}).Lines() }

// ModelCalls are the model calls that ran: last user text, input length,
// pid.
func (s *Stack) ModelCalls() [][]string {
	return (&Log{Path: filepath.Join(s.Dir, "models.log")}).Lines()
}

func freeAddress(t testing.TB) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// Eventually polls a condition until it holds or the timeout passes.
func Eventually(t testing.TB, timeout time.Duration, what string, cond func() (bool, error)) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	var lastErr error
	for time.Now().Before(deadline) {
		ok, err := cond()
		if ok {
			return
		}
		lastErr = err
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("%s did not happen within %s (last error: %v)", what, timeout, lastErr)
}
