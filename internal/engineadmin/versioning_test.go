package engineadmin

import (
	"context"
	"slices"
	"testing"

	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"

	"github.com/stepwise-run/stepwise/internal/contract"
	"github.com/stepwise-run/stepwise/internal/devserver"
	"github.com/stepwise-run/stepwise/internal/enginetest"
	"github.com/stepwise-run/stepwise/internal/tenancy"
)

func TestServerSupportsVersioning(t *testing.T) {
	for _, c := range []struct {
		version string
		want    bool
	}{
		{"1.32.0", true}, {"1.31.0", true}, {"v1.31.2", true}, {"2.0.0", true},
		{"1.30.9", false}, {"1.29.1", false}, {"0.40.0", false}, {"", false}, {"next", false},
	} {
		if got, why := serverSupportsVersioning(c.version); got != c.want || (!got && why == "") {
			t.Errorf("serverSupportsVersioning(%q) = %v, %q; want %v with a reason when false", c.version, got, why, c.want)
		}
	}
}

// waitForFinish is a session stand-in: it runs until signalled "finish",
// pinned to the version of the worker that started it, and counts the move
// signals it got.
func waitForFinish(ctx workflow.Context) (int, error) {
	moves := 0
	finish := workflow.GetSignalChannel(ctx, "finish")
	move := workflow.GetSignalChannel(ctx, contract.SignalMoveToCurrentVersion)
	for done := false; !done; {
		s := workflow.NewSelector(ctx)
		s.AddReceive(finish, func(c workflow.ReceiveChannel, _ bool) { c.Receive(ctx, nil); done = true })
		s.AddReceive(move, func(c workflow.ReceiveChannel, _ bool) { c.Receive(ctx, nil); moves++ })
		s.Select(ctx)
	}
	return moves, nil
}

func startVersionedWorker(t *testing.T, server *devserver.Server, deployment, buildID string) worker.Worker {
	t.Helper()
	w := worker.New(server.Client(), "versioned", worker.Options{
		Identity: "1@" + buildID + "@",
		DeploymentOptions: worker.DeploymentOptions{
			UseVersioning:             true,
			Version:                   worker.WorkerDeploymentVersion{DeploymentName: deployment, BuildID: buildID},
			DefaultVersioningBehavior: workflow.VersioningBehaviorPinned,
		},
	})
	w.RegisterWorkflow(waitForFinish)
	if err := w.Start(); err != nil {
		t.Fatal(err)
	}
	return w
}

func TestVersioningOnTheTestServer(t *testing.T) {
	_, conn := startServer(t)
	got, err := newTestClient(t).Versioning(context.Background(), conn)
	if err != nil || !got.Supported {
		t.Fatalf("Versioning = %+v, %v; want supported on the test server", got, err)
	}
}

// The operator's part of a versioned rollout, on a real server, under the
// Worker Deployment name the operator gives an Agent: make a
// version current, find the sessions pinned to the old one and signal
// them, let a session whose version has no worker left be taken by the
// current one, and delete the drained version's record.
func TestAVersionedRolloutOnTheEngine(t *testing.T) {
	server := enginetest.StartDevServer(t, enginetest.VersionedServerArgs...)
	conn := Connection{Address: server.FrontendHostPort(), Namespace: devserver.Namespace}
	engines := newTestClient(t)
	ctx := context.Background()
	name := tenancy.Tenant("test", "Exporter").WorkerDeployment()

	if d, err := engines.WorkerDeployment(ctx, conn, name); err != nil || d.Exists {
		t.Fatalf("WorkerDeployment before any worker = %+v, %v; want none", d, err)
	}
	oldWorker := startVersionedWorker(t, server, name, "0.5.0-old")
	enginetest.Eventually(t, waitLong, "the old version to become current", func() (bool, error) {
		return engines.SetCurrentVersion(ctx, conn, name, "0.5.0-old") == nil, nil
	})
	run, err := server.Client().ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: "pinned", TaskQueue: "versioned"}, waitForFinish)
	if err != nil {
		t.Fatal(err)
	}
	enginetest.Eventually(t, waitLong, "the session to be listed as pinned to the old version", func() (bool, error) {
		ids, err := engines.PinnedSessions(ctx, conn, name, "0.5.0-old")
		return slices.Equal(ids, []string{"pinned"}), err
	})

	newWorker := startVersionedWorker(t, server, name, "0.5.0-new")
	defer newWorker.Stop()
	enginetest.Eventually(t, waitLong, "the new version to become current", func() (bool, error) {
		return engines.SetCurrentVersion(ctx, conn, name, "0.5.0-new") == nil, nil
	})
	d, err := engines.WorkerDeployment(ctx, conn, name)
	if err != nil || !d.Exists || d.CurrentBuildID != "0.5.0-new" {
		t.Fatalf("WorkerDeployment = %+v, %v; want 0.5.0-new current", d, err)
	}
	enginetest.Eventually(t, waitLong, "the old version to be draining", func() (bool, error) {
		d, err := engines.WorkerDeployment(ctx, conn, name)
		v, _ := d.Version("0.5.0-old")
		return v.Drainage == DrainageDraining, err
	})
	if err := engines.DeleteVersion(ctx, conn, name, "0.5.0-old"); err == nil {
		t.Fatal("DeleteVersion of a version a session is pinned to succeeded")
	}
	if sent, err := engines.MoveSessions(ctx, conn, []string{"pinned", "never-started"}); sent != 1 || err != nil {
		t.Fatalf("MoveSessions = %d, %v; want the running session signalled and the unknown one skipped", sent, err)
	}

	// The old workers stop before the session moved; unpinned, it is taken
	// by the current version.
	oldWorker.Stop()
	if err := engines.Unpin(ctx, conn, []string{"pinned", "never-started"}); err != nil {
		t.Fatal(err)
	}
	if err := server.Client().SignalWorkflow(ctx, "pinned", "", "finish", nil); err != nil {
		t.Fatal(err)
	}
	waitCtx, cancel := context.WithTimeout(ctx, waitLong)
	defer cancel()
	var moves int
	if err := run.Get(waitCtx, &moves); err != nil {
		t.Fatalf("the unpinned session did not end on the current version's worker: %v", err)
	}
	if moves != 1 {
		t.Fatalf("the session counted %d move signals, want 1", moves)
	}

	enginetest.Eventually(t, waitLong, "the old version to be drained", func() (bool, error) {
		d, err := engines.WorkerDeployment(ctx, conn, name)
		v, _ := d.Version("0.5.0-old")
		return v.Drainage == DrainageDrained, err
	})
	enginetest.Eventually(t, waitLong, "the old version's record to be deleted", func() (bool, error) {
		return engines.DeleteVersion(ctx, conn, name, "0.5.0-old") == nil, nil
	})
	d, err = engines.WorkerDeployment(ctx, conn, name)
	if _, kept := d.Version("0.5.0-old"); err != nil || kept {
		t.Fatalf("WorkerDeployment after the delete = %+v, %v; want the old version gone", d, err)
	}
	if err := engines.DeleteVersion(ctx, conn, name, "0.5.0-old"); err != nil {
		t.Fatalf("deleting a deleted version = %v; want nothing to do", err)
	}
}
