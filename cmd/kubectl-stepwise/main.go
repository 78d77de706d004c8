// Command kubectl-stepwise is the kubectl stepwise plugin: session commands
// addressed by Agent, sent to the gateway as the kubeconfig's user. Put it
// on PATH and run kubectl stepwise -h.
package main

import (
	"context"
	"os"
	"os/signal"

	"github.com/stepwise-run/stepwise/internal/kubectlstepwise"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	status := kubectlstepwise.Run(ctx, os.Args[1:], os.Getenv, os.Stdout, os.Stderr)
	stop()
	os.Exit(status)
}
