package enginetest

import (
	"context"
	"fmt"
	"strconv"
	"testing"
	"time"

	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"

	"github.com/stepwise-run/stepwise/internal/engine"
	sessions "github.com/stepwise-run/stepwise/pkg/client"
)

// versionedServerArgs let a test see a version drained within seconds, not
// the minutes Temporal waits by default.
var versionedServerArgs = []string{
	"--dynamic-config-value", `matching.wv.VersionDrainageStatusVisibilityGracePeriod="2s"`,
	"--dynamic-config-value", `matching.wv.VersionDrainageStatusRefreshInterval="2s"`,
}

// startVersion starts a worker as one version of a Worker Deployment and
// makes that version the one new sessions start on.
func startVersion(t *testing.T, s *Stack, deployment, buildID string) *Worker {
	t.Helper()
	w := s.StartWorkerWith("--deployment-name="+deployment, "--build-id="+buildID)
	handle := s.Client.WorkerDeploymentClient().GetHandle(deployment)
	// The version exists once its first worker has polled.
	Eventually(t, waitLong, buildID+" to become current", func() (bool, error) {
		_, err := handle.SetCurrentVersion(context.Background(), client.WorkerDeploymentSetCurrentVersionOptions{BuildID: buildID})
		return err == nil, nil
	})
	return w
}

// requireTargetVersionReports skips a test on a Temporal server that never
// tells a pinned session that its deployment's current version changed:
// there sessions stay on their version, as documented.
func requireTargetVersionReports(t *testing.T, s *Stack) {
	t.Helper()
	info, err := s.Client.WorkflowService().GetSystemInfo(context.Background(), &workflowservice.GetSystemInfoRequest{})
	if err != nil {
		t.Fatal(err)
	}
	v := info.GetServerVersion()
	var major, minor int
	if _, err := fmt.Sscanf(v, "%d.%d", &major, &minor); err != nil {
		t.Fatalf("server version %q: %v", v, err)
	}
	if major == 1 && minor < 31 {
		t.Skipf("Temporal %s does not report a changed current version to pinned sessions; 1.31 and later do", v)
	}
}

// pinnedTo returns the build ID of the version a session's current run is
// pinned to, and the run's ID.
func pinnedTo(t *testing.T, s *Stack, id string) (buildID, runID string) {
	t.Helper()
	d, err := s.Client.DescribeWorkflow(context.Background(), id, "")
	if err != nil {
		t.Fatal(err)
	}
	info := d.RawResponse.GetWorkflowExecutionInfo()
	return info.GetVersioningInfo().GetDeploymentVersion().GetBuildId(), info.GetExecution().GetRunId()
}

// Under worker versioning a session stays on the version that started it
// for as long as a turn runs, and moves to the current version between
// turns: an idle session when the move signal wakes it, a busy one as its
// turn ends. The old version then drains and its record can be deleted.
func TestSessionsMoveToTheCurrentWorkerVersionBetweenTurns(t *testing.T) {
	s := NewStack(t, "Versioned", versionedServerArgs...)
	requireTargetVersionReports(t, s)
	const deployment = "test_Versioned"
	ctx := context.Background()
	api := sessions.New(s.Client, s.FlowType, "")
	oldWorker := startVersion(t, s, deployment, "0.5.0-old")

	// "idle" finished a turn and waits; "busy" is held in a tool call.
	if ok, err := api.Start(ctx, "idle", "hello"); !ok || err != nil {
		t.Fatalf("Start idle = %v, %v", ok, err)
	}
	lastAnswer(t, api, "idle", 1)
	gate := s.Gate("read_a")
	if err := gate.Arm(); err != nil {
		t.Fatal(err)
	}
	if ok, err := api.Start(ctx, "busy", "tools: read_a"); !ok || err != nil {
		t.Fatalf("Start busy = %v, %v", ok, err)
	}
	if err := gate.WaitReached(waitLong); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"idle", "busy"} {
		if build, _ := pinnedTo(t, s, id); build != "0.5.0-old" {
			t.Fatalf("%s is pinned to %q, want 0.5.0-old", id, build)
		}
	}
	_, idleRun := pinnedTo(t, s, "idle")

	newWorker := startVersion(t, s, deployment, "0.5.0-new")
	for _, id := range []string{"idle", "busy"} {
		if err := s.Client.SignalWorkflow(ctx, id, "", engine.SignalMoveToCurrentVersion, nil); err != nil {
			t.Fatal(err)
		}
	}
	Eventually(t, waitLong, "the idle session to move", func() (bool, error) {
		build, run := pinnedTo(t, s, "idle")
		return build == "0.5.0-new" && run != idleRun, nil
	})
	// The busy session's turn is not over, so it stays where it began.
	if build, _ := pinnedTo(t, s, "busy"); build != "0.5.0-old" {
		t.Fatalf("busy moved to %q mid-turn", build)
	}
	if err := gate.Release(); err != nil {
		t.Fatal(err)
	}
	if answer := lastAnswer(t, api, "busy", 1); answer != "results: read_a=read_a done: n1" {
		t.Errorf("busy answered %q", answer)
	}
	calls := callsOf(s, "read_a")
	if len(calls) != 1 || calls[0][3] != strconv.Itoa(oldWorker.Pid()) {
		t.Errorf("read_a ran %v, want once, on the old version's worker %d", calls, oldWorker.Pid())
	}
	Eventually(t, waitLong, "the busy session to move after its turn", func() (bool, error) {
		build, _ := pinnedTo(t, s, "busy")
		return build == "0.5.0-new", nil
	})

	// Both sessions carried their state: the next turns run on the new
	// version and see the earlier messages.
	for _, id := range []string{"idle", "busy"} {
		if ok, err := api.Send(ctx, id, "again"); !ok || err != nil {
			t.Fatalf("Send %s = %v, %v", id, ok, err)
		}
		if answer := lastAnswer(t, api, id, 2); answer != "echo: again" {
			t.Errorf("%s answered %q", id, answer)
		}
		snap, err := api.Snapshot(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		if snap.State.TurnCount != 2 {
			t.Errorf("%s has %d turns after moving, want 2", id, snap.State.TurnCount)
		}
	}
	ranOn := map[string]string{}
	for _, line := range (&Log{Path: s.Dir + "/models.log"}).Lines() {
		ranOn[line[0]] = line[2]
	}
	if ranOn["again"] != strconv.Itoa(newWorker.Pid()) {
		t.Errorf("the second turns' model calls ran in pid %s, want the new version's worker %d", ranOn["again"], newWorker.Pid())
	}

	// Nothing is pinned to the old version any more: it drains, and once
	// its worker has stopped its record is deleted.
	handle := s.Client.WorkerDeploymentClient().GetHandle(deployment)
	Eventually(t, 2*time.Minute, "the old version to drain", func() (bool, error) {
		d, err := handle.DescribeVersion(ctx, client.WorkerDeploymentDescribeVersionOptions{BuildID: "0.5.0-old"})
		if err != nil {
			return false, err
		}
		drainage := d.Info.DrainageInfo
		return drainage != nil && drainage.DrainageStatus == client.WorkerDeploymentVersionDrainageStatusDrained, nil
	})
	oldWorker.Terminate()
	Eventually(t, 3*time.Minute, "the old version's record to be deleted", func() (bool, error) {
		_, err := handle.DeleteVersion(ctx, client.WorkerDeploymentDeleteVersionOptions{BuildID: "0.5.0-old"})
		return err == nil, nil
	})
	d, err := handle.Describe(ctx, client.WorkerDeploymentDescribeOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range d.Info.VersionSummaries {
		if v.Version.BuildID == "0.5.0-old" {
			t.Errorf("the deleted version is still listed: %+v", v)
		}
	}
}
