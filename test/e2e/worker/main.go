// Command worker is the end-to-end suite's worker: the stock worker plus
// slow_export, a non-idempotent write that takes as long as it is asked to
// and reports which pod ran it. The suite deletes that pod while the call
// runs, to show that SIGTERM lets a running Step finish. With the scripted
// model "demo", "call slow_export {"seconds":8}" runs it.
package main

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/stepwise-run/stepwise/pkg/agent"
	"github.com/stepwise-run/stepwise/pkg/worker"
)

type exportArgs struct {
	Seconds int `json:"seconds" jsonschema:"How long the export takes."`
}

func main() {
	host, _ := os.Hostname()
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
