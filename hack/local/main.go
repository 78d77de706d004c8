// Command local runs the whole system on one machine with nothing
// installed: it starts a Kubernetes API server and etcd and a Temporal dev
// server from the binaries the Makefile builds, runs the operator against
// them, applies the samples with kubectl, runs the example worker with the
// configuration the operator rendered for the support Agent (no kubelet
// runs here, so the Deployment gets no pods), drives a demo session through
// the client (a turn, an approval, a reply), prints it all, and stops
// everything it started.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	apischeme "github.com/stepwise-run/stepwise/api/scheme"
	agentsv1 "github.com/stepwise-run/stepwise/api/v1alpha1"
	"github.com/stepwise-run/stepwise/internal/devserver"
)

func main() {
	var opts options
	flag.StringVar(&opts.assets, "assets", "", "Directory with kube-apiserver, etcd and kubectl.")
	flag.StringVar(&opts.manager, "manager", "bin/manager", "The operator binary.")
	flag.StringVar(&opts.samples, "samples", "config/samples", "Directory of manifests to apply.")
	flag.StringVar(&opts.crds, "crds", "config/crd/bases", "Directory of the CRDs.")
	flag.StringVar(&opts.temporal, "temporal", "", "The Temporal server binary the sessions run on.")
	flag.StringVar(&opts.worker, "worker", "bin/support-worker", "The worker binary to run for the demo Agent.")
	flag.StringVar(&opts.demoAgent, "demo-agent", "support", "The Agent whose worker runs the demo session.")
	flag.DurationVar(&opts.timeout, "timeout", 2*time.Minute, "How long to wait for the samples to become Ready.")
	flag.BoolVar(&opts.wait, "wait", false, "Keep everything running until interrupted, to explore with kubectl.")
	flag.Parse()
	if err := run(opts, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "local run failed:", err)
		os.Exit(1)
	}
}

type options struct {
	assets, manager, samples, crds, engine string
	temporal, worker, demoAgent            string
	timeout                                time.Duration
	wait                                   bool
}

func run(opts options, out io.Writer) (err error) {
	if opts.assets == "" || opts.temporal == "" {
		return errors.New("--assets and --temporal are required: run through make run, which builds the binaries")
	}
	workDir, err := os.MkdirTemp("", "stepwise-local-")
	if err != nil {
		return err
	}
	defer func() { _ = os.RemoveAll(workDir) }()

	step(out, "starting a Kubernetes API server and etcd")
	env := &envtest.Environment{
		BinaryAssetsDirectory: opts.assets,
		CRDDirectoryPaths:     []string{opts.crds},
		ErrorIfCRDPathMissing: true,
	}
	cfg, err := env.Start()
	if err != nil {
		return fmt.Errorf("starting the API server: %w", err)
	}
	defer func() {
		step(out, "stopping the API server and etcd")
		err = errors.Join(err, env.Stop())
	}()
	admin, err := env.AddUser(envtest.User{Name: "admin", Groups: []string{"system:masters"}}, nil)
	if err != nil {
		return err
	}
	kubeconfigData, err := admin.KubeConfig()
	if err != nil {
		return err
	}
	kubeconfig := filepath.Join(workDir, "kubeconfig")
	if err := os.WriteFile(kubeconfig, kubeconfigData, 0o600); err != nil {
		return err
	}

	step(out, "starting a Temporal dev server")
	server, err := devserver.Start(context.Background(), opts.temporal)
	if err != nil {
		return err
	}
	defer func() {
		step(out, "stopping the Temporal dev server")
		err = errors.Join(err, server.Stop())
	}()
	opts.engine = server.FrontendHostPort()
	fmt.Fprintf(out, "Temporal at %s, namespace default\n", opts.engine)

	step(out, "starting the operator (its log: %s)", filepath.Join(workDir, "manager.log"))
	stopManager, err := startManager(opts, kubeconfig, filepath.Join(workDir, "manager.log"))
	if err != nil {
		return err
	}
	defer func() {
		step(out, "stopping the operator")
		err = errors.Join(err, stopManager())
	}()

	kubectl := func(args ...string) error {
		cmd := exec.Command(filepath.Join(opts.assets, "kubectl"), append([]string{"--kubeconfig", kubeconfig}, args...)...)
		cmd.Stdout, cmd.Stderr = out, out
		return cmd.Run()
	}
	scheme, err := apischeme.New()
	if err != nil {
		return err
	}
	c, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		return err
	}
	step(out, "the administrator's ClusterEngine %q: the dev server, for every namespace", localEngine)
	if err := createLocalEngine(c, opts.engine); err != nil {
		return err
	}
	step(out, "kubectl apply -f %s", opts.samples)
	if err := kubectl("apply", "-f", opts.samples); err != nil {
		return err
	}
	step(out, "waiting for the Agents to become Ready")
	agents, err := waitForAgents(c, opts.timeout)
	if err != nil {
		return err
	}

	step(out, "kubectl get stepwise")
	if err := kubectl("get", "stepwise", "--all-namespaces"); err != nil {
		return err
	}
	step(out, "the objects the operator created")
	if err := kubectl("get", "deployments,configmaps,serviceaccounts", "--all-namespaces",
		"-l", "app.kubernetes.io/managed-by=stepwise-operator"); err != nil {
		return err
	}
	step(out, "the Agents' status")
	for _, a := range agents {
		printAgentStatus(out, &a)
	}

	demo := findAgent(agents, opts.demoAgent)
	if demo == nil {
		return fmt.Errorf("the samples have no Agent %q to run the demo session on", opts.demoAgent)
	}
	step(out, "starting %s for Agent %s with the configuration the operator rendered (its log: %s)",
		filepath.Base(opts.worker), demo.Name, filepath.Join(workDir, "worker.log"))
	stopWorker, err := startWorker(c, demo, opts.worker, workDir)
	if err != nil {
		return err
	}
	defer func() {
		step(out, "stopping the worker (SIGTERM: running Steps finish first)")
		err = errors.Join(err, stopWorker())
	}()
	if err := runDemoSession(out, server.Client(), demo); err != nil {
		return err
	}

	if opts.wait {
		step(out, "running until interrupted; try: %s --kubeconfig %s get stepwise -A", filepath.Join(opts.assets, "kubectl"), kubeconfig)
		ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
		defer stop()
		<-ctx.Done()
	}
	return nil
}

// The local default's ClusterEngine and the operator's namespace, where
// its Secrets would be.
const (
	localEngine       = "local"
	operatorNamespace = "stepwise-system"
)

// createLocalEngine makes the operator's namespace and the ClusterEngine
// of the dev server, which every namespace may use.
func createLocalEngine(c client.Client, address string) error {
	ctx := context.Background()
	if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: operatorNamespace}}); client.IgnoreAlreadyExists(err) != nil {
		return err
	}
	err := c.Create(ctx, &agentsv1.ClusterEngine{
		ObjectMeta: metav1.ObjectMeta{Name: localEngine},
		Spec:       agentsv1.ClusterEngineSpec{Address: address, Namespace: "default", NamespaceSelector: &metav1.LabelSelector{}},
	})
	return client.IgnoreAlreadyExists(err)
}

// startManager runs the operator binary against the local API server and
// returns a function that stops it.
func startManager(opts options, kubeconfig, logPath string) (func() error, error) {
	logFile, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(opts.manager,
		"--kubeconfig", kubeconfig,
		"--default-engine", localEngine,
		"--operator-namespace", operatorNamespace,
		"--metrics-bind-address", "0",
		"--health-probe-bind-address", "0",
	)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	if err := cmd.Start(); err != nil {
		_ = logFile.Close()
		return nil, fmt.Errorf("starting %s: %w", opts.manager, err)
	}
	return func() error {
		defer func() { _ = logFile.Close() }()
		_ = cmd.Process.Signal(syscall.SIGTERM)
		done := make(chan error, 1)
		go func() { done <- cmd.Wait() }()
		select {
		case err := <-done:
			return err
		case <-time.After(15 * time.Second):
			_ = cmd.Process.Kill()
			return errors.New("the operator did not stop within 15s of SIGTERM")
		}
	}, nil
}

// waitForAgents waits until every Agent has Ready=True for its generation.
func waitForAgents(c client.Client, timeout time.Duration) ([]agentsv1.Agent, error) {
	deadline := time.Now().Add(timeout)
	for {
		var list agentsv1.AgentList
		if err := c.List(context.Background(), &list); err != nil {
			return nil, err
		}
		var waiting []string
		for _, a := range list.Items {
			ready := meta.FindStatusCondition(a.Status.Conditions, agentsv1.ConditionReady)
			if ready == nil || ready.Status != "True" || ready.ObservedGeneration != a.Generation {
				why := "not reconciled yet"
				if ready != nil {
					why = ready.Reason + ": " + ready.Message
				}
				waiting = append(waiting, a.Name+" ("+why+")")
			}
		}
		if len(list.Items) > 0 && len(waiting) == 0 {
			return list.Items, nil
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("agents not Ready after %s: %s", timeout, strings.Join(waiting, "; "))
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func printAgentStatus(out io.Writer, a *agentsv1.Agent) {
	fmt.Fprintf(out, "Agent %s/%s (Flow type %s)\n", a.Namespace, a.Name, a.Spec.FlowType)
	for _, c := range a.Status.Conditions {
		fmt.Fprintf(out, "  %-17s %-5s %s: %s\n", c.Type, c.Status, c.Reason, c.Message)
	}
	fmt.Fprintf(out, "  task queue        %s\n", a.Status.TaskQueue)
	fmt.Fprintf(out, "  config digest     %s\n", a.Status.ConfigDigest)
	if g := a.Status.SessionFlowGraph; g != nil {
		fmt.Fprintf(out, "  Flow graph        ConfigMap %s, %s\n", g.ConfigMapName, g.Digest)
	}
	fmt.Fprintf(out, "  workers           %d ready of %d; selector %s\n", a.Status.ReadyReplicas, *a.Spec.Workers.Replicas, a.Status.Selector)
}

func step(out io.Writer, format string, args ...any) {
	fmt.Fprintf(out, "\n==> "+format+"\n", args...)
}
