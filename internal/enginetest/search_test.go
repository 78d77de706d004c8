package enginetest

import (
	"context"
	"slices"
	"testing"

	"go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/converter"

	"github.com/stepwise-run/stepwise/internal/tenancy"
	"github.com/stepwise-run/stepwise/pkg/client"
)

// TestTheActiveStepSearchIsWrittenOncePerWorkflowTask reads a session's
// history on a real server: each workflow task writes ActiveStepTypes at
// most once, only when it changes, and never a transient empty value while
// the session moves from one Step to the next.
func TestTheActiveStepSearchIsWrittenOncePerWorkflowTask(t *testing.T) {
	s := NewStack(t, "SearchUpserts")
	s.StartWorker()
	sessions := client.New(s.Client, s.Agent())
	ctx := context.Background()
	if ok, err := sessions.Start(ctx, "s1", "tools: write_approved, read_a, read_b"); !ok || err != nil {
		t.Fatalf("Start = %v, %v", ok, err)
	}
	if ok, err := sessions.Approve(ctx, "s1", firstInterrupt(t, sessions, "s1").ID); !ok || err != nil {
		t.Fatalf("Approve = %v, %v", ok, err)
	}
	lastAnswer(t, sessions, "s1", 1)
	if ok, err := sessions.Send(ctx, "s1", "again"); !ok || err != nil {
		t.Fatalf("Send = %v, %v", ok, err)
	}
	lastAnswer(t, sessions, "s1", 2)

	var tasks, upserts int
	perTask := 0
	var written [][]string
	it := s.Client.GetWorkflowHistory(ctx, s.WorkflowID("s1"), "", false, enums.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
	for it.HasNext() {
		event, err := it.Next()
		if err != nil {
			t.Fatal(err)
		}
		switch event.GetEventType() {
		case enums.EVENT_TYPE_WORKFLOW_TASK_COMPLETED:
			tasks++
			perTask = 0
		case enums.EVENT_TYPE_UPSERT_WORKFLOW_SEARCH_ATTRIBUTES:
			payload, ok := event.GetUpsertWorkflowSearchAttributesEventAttributes().GetSearchAttributes().GetIndexedFields()[tenancy.AttributeActiveSteps]
			if !ok {
				continue
			}
			var steps []string
			if err := converter.GetDefaultDataConverter().FromPayload(payload, &steps); err != nil {
				t.Fatal(err)
			}
			upserts++
			if perTask++; perTask > 1 {
				t.Errorf("workflow task %d wrote %s %d times; the last was %q", tasks, tenancy.AttributeActiveSteps, perTask, steps)
			}
			if len(steps) == 0 {
				t.Errorf("workflow task %d wrote an empty %s: a session is always in some Step", tasks, tenancy.AttributeActiveSteps)
			}
			if len(written) > 0 && slices.Equal(written[len(written)-1], steps) {
				t.Errorf("workflow task %d wrote %q again", tasks, steps)
			}
			written = append(written, steps)
		}
	}
	if upserts == 0 || upserts > tasks {
		t.Errorf("%d upserts of %s in %d workflow tasks", upserts, tenancy.AttributeActiveSteps, tasks)
	}
	if !slices.ContainsFunc(written, func(steps []string) bool { return slices.Contains(steps, "AwaitToolApproval") }) {
		t.Errorf("the search never showed the approval wait: %q", written)
	}
	t.Logf("%d workflow tasks, %d upserts: %q", tasks, upserts, written)
}
