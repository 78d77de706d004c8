// Command cluster starts and stops the single-node test cluster (see
// internal/testcluster) that `make cluster` and `make cluster-down` run:
//
//	cluster up   --dir DIR --kube-bin DIR --etcd FILE --sandbox-image REF IMAGE.tar...
//	cluster down --dir DIR
//	cluster demo --kube-bin DIR --etcd FILE --helm FILE --temporal FILE --registry R --version V IMAGE.tar...
//
// up leaves the cluster running after it returns and prints how to reach
// it; down stops it and restores the host. demo is the local default's demo
// on real pods: a cluster, a Temporal dev server the pods reach, the chart,
// the samples, and the demo session, all stopped at the end.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/stepwise-run/stepwise/internal/testcluster"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: cluster up|down [flags]")
		os.Exit(2)
	}
	var err error
	switch os.Args[1] {
	case "up":
		err = up(os.Args[2:])
	case "down":
		err = down(os.Args[2:])
	case "demo":
		err = runDemo(os.Args[2:])
	default:
		err = fmt.Errorf("unknown command %q: want up, down or demo", os.Args[1])
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "cluster:", err)
		os.Exit(1)
	}
}

func up(args []string) error {
	fs := flag.NewFlagSet("up", flag.ExitOnError)
	var opts testcluster.Options
	fs.StringVar(&opts.Dir, "dir", "/tmp/stepwise-cluster", "Directory for the cluster's configuration, data, logs and state.")
	fs.StringVar(&opts.KubeBin, "kube-bin", "", "Directory with kube-apiserver, kube-controller-manager, kube-scheduler, kubelet and kubectl.")
	fs.StringVar(&opts.Etcd, "etcd", "", "The etcd binary.")
	fs.StringVar(&opts.SandboxImage, "sandbox-image", "", "Reference of the pause image among the image archives.")
	_ = fs.Parse(args)
	opts.Images = fs.Args()
	if opts.KubeBin == "" || opts.Etcd == "" || opts.SandboxImage == "" {
		return errors.New("--kube-bin, --etcd and --sandbox-image are required: run through make cluster")
	}
	opts.Log = func(format string, a ...any) { fmt.Fprintf(os.Stdout, "--- "+format+"\n", a...) }
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	c, err := testcluster.Start(ctx, opts)
	if err != nil {
		return err
	}
	fmt.Fprintf(os.Stdout, `The cluster runs: one node, %s, pods on %s, no kube-proxy or cluster DNS.
  export KUBECONFIG=%s
  Pods reach this host at %s. Logs: %s/logs. Stop it with: make cluster-down
`, testcluster.NodeName, testcluster.Bridge, c.Kubeconfig(), testcluster.GatewayIP, c.Dir())
	return nil
}

func down(args []string) error {
	fs := flag.NewFlagSet("down", flag.ExitOnError)
	dir := fs.String("dir", "/tmp/stepwise-cluster", "The cluster's directory.")
	_ = fs.Parse(args)
	c, err := testcluster.Open(*dir)
	if err != nil {
		return err
	}
	if err := c.Stop(); err != nil {
		return err
	}
	if err := os.RemoveAll(*dir); err != nil {
		return err
	}
	fmt.Fprintln(os.Stdout, "--- the cluster is stopped and the host restored")
	return nil
}
