package e2e

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"slices"
	"testing"

	"go.temporal.io/api/serviceerror"
	"go.temporal.io/api/workflowservice/v1"
	appsv1 "k8s.io/api/apps/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"sigs.k8s.io/controller-runtime/pkg/client"

	agentsv1 "github.com/stepwise-run/stepwise/api/v1alpha1"
	"github.com/stepwise-run/stepwise/internal/devserver"
	"github.com/stepwise-run/stepwise/internal/render"
	"github.com/stepwise-run/stepwise/internal/rollout"
	"github.com/stepwise-run/stepwise/internal/tenancy"
	sessions "github.com/stepwise-run/stepwise/pkg/client"
)

// versionedUpgradeUnderLoad rolls the exporter Agent to a new image of its
// engine version, and back (a revert of the image), while sessions keep
// sending turns that each run a non-idempotent tool call. Each image is a
// version of the Agent's Worker Deployment: the new one starts beside the
// old, new sessions start on it once it is current, and every session
// pinned to the old one moves at its next turn boundary, idle or not. The
// old version's workers stop once the engine reports it drained, and its
// Deployment and engine record go. Sessions never wait for the rollout:
// the test reports the longest a turn took beyond its tool call.
func versionedUpgradeUnderLoad(t *testing.T) {
	const agentName = "exporter"
	settled := func(a *agentsv1.Agent) bool {
		v := a.Status.WorkerVersions
		return len(v) == 1 && v[0].State == agentsv1.WorkerVersionCurrent && v[0].ReadyReplicas == 2 &&
			meta.IsStatusConditionFalse(a.Status.Conditions, agentsv1.ConditionProgressing)
	}
	agent := waitAgent(t, agentName, settled)
	first := agent.Status.WorkerVersions[0]
	s := sessions.New(engine.Client(), sessions.AgentOf(agent))
	deploymentName := tenancy.Tenant(agent.Namespace, agent.Spec.FlowType).WorkerDeployment()
	// The same worker under a second tag is a new image to the operator: a
	// new build ID, so a new version.
	fixed := image("e2e-worker") + "-fix"
	ctx, cancel := context.WithTimeout(context.Background(), 2*wait)
	defer cancel()
	if out, err := exec.CommandContext(ctx, "ctr", "--address", cluster.ContainerdAddress(), "--namespace", "k8s.io",
		"images", "tag", "--force", image("e2e-worker"), fixed).CombinedOutput(); err != nil {
		t.Fatalf("tagging the worker image as %s: %v\n%s", fixed, err, out)
	}
	if cur := currentVersionOf(t, deploymentName); cur != first.BuildID {
		t.Fatalf("the engine's current version of %s is %q; want the exporter's %s", deploymentName, cur, first.BuildID)
	}

	// The idle sessions of the stop-old-first step are pinned to the first
	// version; they must move without a new turn.
	idle := []string{"load-1", "load-2", "load-3"}
	load := startTurnLoad(ctx, t, s, []string{"steady-1", "steady-2", "steady-3"}, 3)
	for round, target := range []string{fixed, first.Image} {
		before := waitAgent(t, agentName, settled).Status.WorkerVersions[0]
		want := rollout.Worker{EngineVersion: before.EngineVersion, Image: target}.BuildID()
		load.waitTurns(t, 1) // every session has a turn running or done on the old version
		reasons := sampleReasons(ctx, agentName)
		t.Logf("rolling %s from %s (%s) to %s (%s) while sessions send turns", agentName, before.Image, before.BuildID, target, want)
		kubectl(t, "patch", "agent", agentName, "--type", "merge", "-p", fmt.Sprintf(`{"spec":{"workers":{"image":%q}}}`, target))
		waitFor(t, "both versions to run at once", func() (bool, error) {
			pods, err := listWorkerPods(agentName)
			seen := map[string]bool{}
			for i := range pods {
				if podReady(&pods[i]) {
					seen[pods[i].Labels[render.LabelBuildID]] = true
				}
			}
			return seen[before.BuildID] && seen[want], err
		})
		after := waitAgent(t, agentName, func(a *agentsv1.Agent) bool {
			return settled(a) && a.Status.WorkerVersions[0].BuildID == want && a.Status.RolloutStrategy == string(rollout.StrategyVersioned)
		})
		load.waitTurns(t, 1) // and a turn since on the new one
		for _, id := range append(slices.Clone(idle), load.ids...) {
			waitFor(t, "session "+id+" to run on "+want, func() (bool, error) { return runsOn(ctx, s, id, want) })
		}
		if err := kube.Get(ctx, client.ObjectKey{Namespace: "default", Name: render.VersionedWorkerName(agentName, before.BuildID)}, &appsv1.Deployment{}); !apierrors.IsNotFound(err) {
			t.Fatalf("the drained version's Deployment is still there (%v)", err)
		}
		waitFor(t, "the engine to forget version "+before.BuildID, func() (bool, error) {
			return !slices.Contains(versionsOf(t, deploymentName), before.BuildID), nil
		})
		if cur := currentVersionOf(t, deploymentName); cur != want {
			t.Fatalf("the engine's current version is %q after the rollout; want %s", cur, want)
		}
		got := reasons()
		if !slices.Contains(got, string(rollout.PhaseDraining)) {
			t.Errorf("round %d: the Agent's Progressing reasons were %v; want %s while the old version drained", round+1, got, rollout.PhaseDraining)
		}
		t.Logf("round %d: %s is current, %s drained and removed; Progressing went %v; %d workers ready", round+1, want, before.BuildID, got, after.Status.ReadyReplicas)
	}
	load.stop(t)
}

// sessionBuildID is the build ID of the Worker Deployment version the
// session's current run is pinned to, or "" when it is not pinned.
func sessionBuildID(ctx context.Context, s *sessions.Sessions, id string) string {
	desc, err := describeSession(ctx, s, id)
	if err != nil {
		return ""
	}
	return desc.RawResponse.GetWorkflowExecutionInfo().GetVersioningInfo().GetDeploymentVersion().GetBuildId()
}

// runsOn says whether a session runs on a version, and otherwise, what the
// engine says of its versioning.
func runsOn(ctx context.Context, s *sessions.Sessions, id, buildID string) (bool, error) {
	desc, err := describeSession(ctx, s, id)
	if err != nil {
		return false, err
	}
	info := desc.RawResponse.GetWorkflowExecutionInfo().GetVersioningInfo()
	if info.GetDeploymentVersion().GetBuildId() == buildID {
		return true, nil
	}
	return false, fmt.Errorf("session %s (run %s) has versioning %v", id, desc.RawResponse.GetWorkflowExecutionInfo().GetExecution().GetRunId(), info)
}

func describeWorkerDeployment(t *testing.T, name string) *workflowservice.DescribeWorkerDeploymentResponse {
	t.Helper()
	var resp *workflowservice.DescribeWorkerDeploymentResponse
	// The engine limits the requests each Worker Deployment takes, which
	// the operator shares: a refused one is asked again.
	waitFor(t, "the engine to describe Worker Deployment "+name, func() (bool, error) {
		var err error
		resp, err = engine.Client().WorkflowService().DescribeWorkerDeployment(context.Background(),
			&workflowservice.DescribeWorkerDeploymentRequest{Namespace: devserver.Namespace, DeploymentName: name})
		var exhausted *serviceerror.ResourceExhausted
		if errors.As(err, &exhausted) {
			return false, nil
		}
		return err == nil, err
	})
	return resp
}

func currentVersionOf(t *testing.T, name string) string {
	t.Helper()
	return describeWorkerDeployment(t, name).GetWorkerDeploymentInfo().GetRoutingConfig().GetCurrentDeploymentVersion().GetBuildId()
}

func versionsOf(t *testing.T, name string) []string {
	t.Helper()
	var out []string
	for _, v := range describeWorkerDeployment(t, name).GetWorkerDeploymentInfo().GetVersionSummaries() {
		out = append(out, v.GetDeploymentVersion().GetBuildId())
	}
	return out
}
