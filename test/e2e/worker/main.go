// Command worker is the end-to-end suite's worker: the stock worker plus
// slow_export, a non-idempotent write that takes as long as it is asked to
// and reports which pod ran it. The suite deletes that pod while the call
// runs, to show that SIGTERM lets a running Step finish. With the scripted
// model "demo", "call slow_export {"seconds":8}" runs it.
//
// With E2E_OLD_ENGINE_VERSION set, it is instead a worker of that older
// engine version as the task queue sees it: it polls E2E_TASK_QUEUE for
// activities only, under an identity naming that version, so that the
// suite can show the client's feature gate on the cluster without
// handing it a session.
package main

import (
	"context"
	"fmt"
	"log"
	"os"
	"time"

	"go.temporal.io/sdk/activity"
	sdkclient "go.temporal.io/sdk/client"
	sdkworker "go.temporal.io/sdk/worker"

	"github.com/stepwise-run/stepwise/internal/rollout"
	"github.com/stepwise-run/stepwise/pkg/agent"
	"github.com/stepwise-run/stepwise/pkg/worker"
)

type exportArgs struct {
	Seconds int `json:"seconds" jsonschema:"How long the export takes."`
}

func main() {
	host, _ := os.Hostname()
	if old := os.Getenv("E2E_OLD_ENGINE_VERSION"); old != "" {
		pollAsOldEngine(host, old)
		return
	}
	export := agent.MustTool("slow_export", "Export the records; takes the given number of seconds.", agent.EffectNonIdempotentWrite,
		// The context is not honoured on purpose: an export that has begun
		// runs to its end, as a payment would, and the worker's stop timeout
		// is what lets it.
		func(_ context.Context, _ agent.ToolContext, a exportArgs) (string, error) {
			started := time.Now()
			time.Sleep(time.Duration(a.Seconds) * time.Second)
			return fmt.Sprintf("exported by %s in %s", host, time.Since(started).Round(time.Second)), nil
		}, agent.WithApproval(false))
	worker.Main(worker.Options{Tools: []agent.Tool{export}})
}

func pollAsOldEngine(host, engineVersion string) {
	c, err := sdkclient.Dial(sdkclient.Options{HostPort: os.Getenv("E2E_TEMPORAL_ADDRESS"), Namespace: os.Getenv("E2E_TEMPORAL_NAMESPACE")})
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	w := sdkworker.New(c, os.Getenv("E2E_TASK_QUEUE"), sdkworker.Options{Identity: rollout.WorkerIdentity(os.Getpid(), host, engineVersion)})
	w.RegisterActivityWithOptions(func(context.Context) error { return nil }, activity.RegisterOptions{Name: "E2EUnused"})
	if err := w.Run(sdkworker.InterruptCh()); err != nil {
		log.Print(err)
	}
}
