package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	"sigs.k8s.io/controller-runtime/pkg/client"

	apischeme "github.com/stepwise-run/stepwise/api/scheme"
	agentsv1 "github.com/stepwise-run/stepwise/api/v1alpha1"
	"github.com/stepwise-run/stepwise/internal/demo"
	"github.com/stepwise-run/stepwise/internal/devserver"
	"github.com/stepwise-run/stepwise/internal/testcluster"
	sessions "github.com/stepwise-run/stepwise/pkg/client"
)

func runDemo(args []string) (err error) {
	fs := flag.NewFlagSet("demo", flag.ExitOnError)
	var opts testcluster.Options
	fs.StringVar(&opts.KubeBin, "kube-bin", "", "Directory with the Kubernetes binaries.")
	fs.StringVar(&opts.Etcd, "etcd", "", "The etcd binary.")
	helm := fs.String("helm", "", "The Helm binary.")
	temporal := fs.String("temporal", "", "The Temporal server binary.")
	registry := fs.String("registry", "", "Registry prefix the images were built under.")
	version := fs.String("version", "", "The images' tag.")
	chart := fs.String("chart", "charts/stepwise", "The operator's chart.")
	samples := fs.String("samples", "config/samples", "Directory of manifests to apply.")
	fs.StringVar(&opts.SandboxImage, "sandbox-image", "", "Reference of the pause image among the image archives (default: <registry>/pause:<version>).")
	keep := fs.Bool("wait", false, "Keep everything running until interrupted, to explore with kubectl.")
	_ = fs.Parse(args)
	opts.Images = fs.Args()
	if opts.KubeBin == "" || opts.Etcd == "" || *helm == "" || *temporal == "" || *registry == "" || *version == "" {
		return errors.New("--kube-bin, --etcd, --helm, --temporal, --registry and --version are required: run through make run-cluster")
	}
	if opts.SandboxImage == "" {
		opts.SandboxImage = *registry + "/pause:" + *version
	}
	step := func(format string, a ...any) { fmt.Fprintf(os.Stdout, "\n==> "+format+"\n", a...) }
	opts.Log = func(format string, a ...any) { fmt.Fprintf(os.Stdout, "--- "+format+"\n", a...) }

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	dir, err := os.MkdirTemp("", "stepwise-cluster-demo-")
	if err != nil {
		return err
	}
	opts.Dir = dir
	step("starting a single-node cluster in %s", dir)
	c, err := testcluster.Start(ctx, opts)
	if err != nil {
		return err
	}
	defer func() {
		step("stopping the cluster and restoring the host")
		if stopErr := c.Stop(); stopErr != nil {
			err = errors.Join(err, stopErr)
			return
		}
		_ = os.RemoveAll(dir)
	}()

	server, err := devserver.Start(ctx, *temporal)
	if err != nil {
		return err
	}
	defer func() { _ = server.Stop() }()
	forward, err := testcluster.Forward(server.FrontendHostPort())
	if err != nil {
		return err
	}
	defer func() { _ = forward.Close() }()
	hostPort := forward.Address()
	step("started a Temporal dev server at %s; pods reach it at %s", server.FrontendHostPort(), hostPort)

	run := func(name string, args ...string) error {
		cmd := exec.CommandContext(ctx, name, args...)
		cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
		cmd.Env = append(os.Environ(), "KUBECONFIG="+c.Kubeconfig(),
			"HELM_CACHE_HOME="+filepath.Join(dir, "helm"), "HELM_CONFIG_HOME="+filepath.Join(dir, "helm"), "HELM_DATA_HOME="+filepath.Join(dir, "helm"))
		return cmd.Run()
	}
	kubectl := filepath.Join(opts.KubeBin, "kubectl")
	step("helm install stepwise %s", *chart)
	if err := run(*helm, "install", "stepwise", *chart, "--namespace", "stepwise-system", "--create-namespace",
		"--set", "image.registry="+*registry, "--set", "image.tag="+*version, "--set", "engine.address="+hostPort,
		"--wait", "--timeout", "5m"); err != nil {
		return err
	}
	step("kubectl apply -f %s", *samples)
	if err := run(kubectl, "apply", "-f", *samples); err != nil {
		return err
	}

	cfg, err := c.RESTConfig()
	if err != nil {
		return err
	}
	scheme, err := apischeme.New()
	if err != nil {
		return err
	}
	kube, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		return err
	}
	step("waiting for the support Agent's worker pods")
	waitCtx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	var agent agentsv1.Agent
	if err := demo.Poll(waitCtx, func() (bool, error) {
		if err := kube.Get(waitCtx, client.ObjectKey{Namespace: "default", Name: "support"}, &agent); err != nil {
			return false, err
		}
		return meta.IsStatusConditionTrue(agent.Status.Conditions, agentsv1.ConditionWorkersAvailable), nil
	}); err != nil {
		return fmt.Errorf("the support Agent's workers did not become available: %w", err)
	}
	_ = run(kubectl, "get", "stepwise,pods", "-A")

	s := sessions.New(server.Client(), sessions.AgentOf(&agent))
	if _, err := demo.Refund(waitCtx, os.Stdout, s, demo.SessionID, "Please refund order 7", true); err != nil {
		return err
	}
	if *keep {
		step("running until interrupted; try: KUBECONFIG=%s %s get pods -A", c.Kubeconfig(), kubectl)
		<-ctx.Done()
	}
	return nil
}
