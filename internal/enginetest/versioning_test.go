package enginetest

import (
	"context"
	"strconv"
	"testing"
	"time"

	"go.temporal.io/sdk/client"

	"github.com/stepwise-run/stepwise/internal/contract"
	sessions "github.com/stepwise-run/stepwise/pkg/client"
)

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

// pinnedTo returns the build ID of the version a session's current run is
// pinned to, and the run's ID.
func pinnedTo(t *testing.T, s *Stack, id string) (buildID, runID string) {
	t.Helper()
	d, err := s.Client.DescribeWorkflow(context.Background(), s.WorkflowID(id), "")
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
	s := NewStack(t, "Versioned", VersionedServerArgs...)
	const deployment = "test_Versioned"
	ctx := context.Background()
	api := sessions.New(s.Client, s.Agent())
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
	// The engine tells a session of the new current version with the first
	// workflow task after every task queue partition has learnt it, which
	// the change itself does not wait for; so the move signal is sent
	// again, as the operator does, until the session has moved.
	moveSignalled := map[string]time.Time{}
	movedTo := func(id, buildID string) bool {
		if build, _ := pinnedTo(t, s, id); build == buildID {
			return true
		}
		if time.Since(moveSignalled[id]) > time.Second {
			moveSignalled[id] = time.Now()
			if err := s.Client.SignalWorkflow(ctx, s.WorkflowID(id), "", contract.SignalMoveToCurrentVersion, nil); err != nil {
				t.Fatal(err)
			}
		}
		return false
	}
	Eventually(t, waitLong, "the idle session to move", func() (bool, error) {
		if !movedTo("idle", "0.5.0-new") {
			return false, nil
		}
		_, run := pinnedTo(t, s, "idle")
		return run != idleRun, nil
	})
	// The busy session was signalled too, but its turn is not over, so it
	// stays where it began.
	for range 3 {
		movedTo("busy", "0.5.0-new")
		time.Sleep(time.Second)
	}
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
		return movedTo("busy", "0.5.0-new"), nil
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
	Eventually(t, waitLong, "the old version's record to be deleted", func() (bool, error) {
		_, err := handle.DeleteVersion(ctx, client.WorkerDeploymentDeleteVersionOptions{BuildID: "0.5.0-old"})
		return err == nil, err
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
