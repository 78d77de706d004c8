package engine

import (
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	temporallog "go.temporal.io/sdk/log"
	"go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"

	"github.com/stepwise-run/stepwise/internal/sessionrpc"
	"github.com/stepwise-run/stepwise/internal/spend"
	"github.com/stepwise-run/stepwise/internal/tenancy"
	"github.com/stepwise-run/stepwise/internal/tracing"
)

// recordedFlowType is the Flow type of the recorded sessions.
const recordedFlowType = "Recorded"

// TestReplayRecordedHistories replays session histories that an earlier
// version of the workflow code wrote on a real Temporal server: chat turns,
// an approval and a rejection, a question and a durable wait, and a tool
// call retried after a worker was killed, plans and plan mode, and an
// Agent's spend counter admitting and refusing calls. A change to workflow code that
// would break a running session fails here. Re-record the fixtures with
// `make record-histories` only when a release is meant to replace them.
func TestReplayRecordedHistories(t *testing.T) {
	// Each release's histories live under its engine version.
	files, err := filepath.Glob(filepath.Join("testdata", "histories", "*", "*.json"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no recorded histories in testdata/histories (%v)", err)
	}
	logger := temporallog.NewStructuredLogger(slog.New(slog.NewTextHandler(io.Discard, nil)))
	for _, file := range files {
		t.Run(filepath.Base(filepath.Dir(file))+"/"+filepath.Base(file), func(t *testing.T) {
			replayer := worker.NewWorkflowReplayer()
			events := &recordedEvents{}
			moves := &moveTracer{}
			// Plan mode is off, as after an Agent turned it off: a
			// plan-mode message the session accepted still replays.
			spans := tracetest.NewInMemoryExporter()
			tracer := tracing.New(tracing.Options{SampleRatio: 1, Processors: []sdktrace.SpanProcessor{sdktrace.NewSimpleSpanProcessor(spans)}})
			roots := &countedRoots{Tracer: tracer}
			// Workers that move sessions off the shared names, as every
			// worker of 0.8.0 does while its Agent has some there: a history
			// written before decides nothing of it.
			moveTo := &OwnNames{TaskQueue: "stepwise/test/" + recordedFlowType, Owner: tenancy.Owner{Namespace: "test", Agent: "test"}}
			flow := &Flow{Timings: DefaultTimings(), Events: events, Trace: moves.trace, PlanMode: false, Tracer: roots, MoveTo: moveTo}
			replayer.RegisterWorkflowWithOptions(flow.Run, workflow.RegisterOptions{Name: recordedFlowType})
			// The spend counter's histories, among the sessions'.
			replayer.RegisterWorkflowWithOptions(SpendCounter, workflow.RegisterOptions{Name: spend.CounterWorkflow})
			if err := replayer.ReplayWorkflowHistoryFromJSONFile(logger, file); err != nil {
				t.Fatalf("replaying %s: %v", file, err)
			}
			moves.checkInGraph(t)
			// Events are written when a Step commits, never again when a
			// worker rebuilds the session from its history.
			if len(events.events) != 0 {
				t.Errorf("replay wrote %d events, first %s", len(events.events), events.events[0].Type)
			}
			// So are activation roots: their trace context is derived again,
			// and nothing is exported twice.
			if got := spans.GetSpans(); len(got) != 0 {
				t.Errorf("replay emitted %d spans, first %s", len(got), got[0].Name)
			}
			if roots.derived == 0 && !strings.HasPrefix(filepath.Base(file), "spend-counter") {
				t.Error("the replayed session began no activation")
			}
		})
	}
}

// countedRoots counts the activation roots a replay derives.
type countedRoots struct {
	*tracing.Tracer
	derived int
}

func (c *countedRoots) RootContext(a tracing.Activation) string {
	c.derived++
	return c.Tracer.RootContext(a)
}

// TestReplayCatchesANonDeterministicChange shows the replay test has teeth:
// a workflow that schedules a different Step than the history recorded
// fails to replay.
func TestReplayCatchesANonDeterministicChange(t *testing.T) {
	logger := temporallog.NewStructuredLogger(slog.New(slog.NewTextHandler(io.Discard, nil)))
	replayer := worker.NewWorkflowReplayer()
	changed := func(ctx workflow.Context, in sessionrpc.SessionInput) error {
		opts := workflow.ActivityOptions{StartToCloseTimeout: 1}
		return workflow.ExecuteActivity(workflow.WithActivityOptions(ctx, opts), "SomeOtherStep").Get(ctx, nil)
	}
	replayer.RegisterWorkflowWithOptions(changed, workflow.RegisterOptions{Name: recordedFlowType})
	if err := replayer.ReplayWorkflowHistoryFromJSONFile(logger, filepath.Join("testdata", "histories", "0.1.0", "chat.json")); err == nil {
		t.Fatal("a workflow that does something else replayed the recorded history without an error")
	}
	if _, err := os.Stat(filepath.Join("testdata", "histories", "0.1.0", "chat.json")); err != nil {
		t.Fatal(err)
	}
}
