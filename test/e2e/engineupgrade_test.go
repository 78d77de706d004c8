package e2e

import (
	"context"
	"fmt"
	"slices"
	"testing"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/converter"
	appsv1 "k8s.io/api/apps/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"sigs.k8s.io/controller-runtime/pkg/client"

	agentsv1 "github.com/stepwise-run/stepwise/api/v1alpha1"
	"github.com/stepwise-run/stepwise/internal/render"
	"github.com/stepwise-run/stepwise/internal/rollout"
	"github.com/stepwise-run/stepwise/internal/tenancy"
	"github.com/stepwise-run/stepwise/internal/version"
	sessions "github.com/stepwise-run/stepwise/pkg/client"
)

// upgradeAcrossEngineVersions runs a new Agent on the worker image of the
// previous engine version, built from that version's last commit, and
// upgrades it to this build's image and engine version, which the previous
// one may not run beside, while sessions send turns. The two versions run at
// once as Worker Deployment versions: every session keeps answering, each
// moves to the new version at its next turn (its run there records this
// build's workflow code revision, its run before the previous one's), and
// the old version drains, its Deployment and its engine-side record
// removed. No tool call runs twice.
func upgradeAcrossEngineVersions(t *testing.T) {
	const agentName = "archiver"
	current, previous := version.EngineVersion, cfg.previousEngineVersion
	if rollout.RunBeside(previous, current) {
		t.Fatalf("engine %s runs beside %s; the upgrade must cross versions that may not", previous, current)
	}
	manifest := func(image, engineVersion string) string {
		return fmt.Sprintf(`apiVersion: agents.stepwise.run/v1alpha1
kind: Agent
metadata:
  name: %s
  namespace: default
spec:
  flowType: ArchiverAgent
  instructions: You archive records.
  model: {provider: scripted, name: demo}
  toolPolicies:
    - {name: slow_export, effect: non_idempotent_write, requiresApproval: false}
  workers:
    image: %s
    engineVersion: %s
    replicas: 2
`, agentName, image, engineVersion)
	}
	settledOn := func(engineVersion string) func(*agentsv1.Agent) bool {
		return func(a *agentsv1.Agent) bool {
			v := a.Status.WorkerVersions
			return len(v) == 1 && v[0].EngineVersion == engineVersion && v[0].State == agentsv1.WorkerVersionCurrent && v[0].ReadyReplicas == 2 &&
				meta.IsStatusConditionFalse(a.Status.Conditions, agentsv1.ConditionProgressing)
		}
	}
	apply(t, manifest(previousImage("e2e-worker"), previous))
	t.Cleanup(func() { kubectl(t, "delete", "agent", agentName, "--wait=false") })
	agent := waitAgent(t, agentName, settledOn(previous))
	before := agent.Status.WorkerVersions[0]
	s := sessions.New(engine.Client(), sessions.AgentOf(agent))
	ctx, cancel := context.WithTimeout(context.Background(), 2*wait)
	defer cancel()

	ids := []string{"archive-1", "archive-2", "archive-3"}
	load := startTurnLoad(ctx, t, s, ids, 3)
	load.waitTurns(t, 1) // every session has run a turn on the previous engine
	firstRuns := map[string]string{}
	for _, id := range ids {
		desc, err := describeSession(ctx, s, id)
		if err != nil {
			t.Fatal(err)
		}
		firstRuns[id] = desc.RawResponse.GetWorkflowExecutionInfo().GetExecution().GetRunId()
		if got := sessionBuildID(ctx, s, id); got != before.BuildID {
			t.Fatalf("session %s runs on %q, want the previous engine's %s", id, got, before.BuildID)
		}
	}
	reasons := sampleReasons(ctx, agentName)
	want := rollout.Worker{EngineVersion: current, Image: image("e2e-worker")}.BuildID()
	t.Logf("upgrading %s from engine %s (%s) to %s (%s) while sessions send turns", agentName, previous, before.BuildID, current, want)
	apply(t, manifest(image("e2e-worker"), current))
	waitFor(t, "both engine versions to run at once", func() (bool, error) {
		pods, err := listWorkerPods(agentName)
		seen := map[string]bool{}
		for i := range pods {
			if podReady(&pods[i]) {
				seen[pods[i].Labels[render.LabelEngineVersion]] = true
			}
		}
		return seen[previous] && seen[current], err
	})
	after := waitAgent(t, agentName, func(a *agentsv1.Agent) bool {
		return settledOn(current)(a) && a.Status.WorkerVersions[0].BuildID == want && a.Status.RolloutStrategy == string(rollout.StrategyVersioned)
	})
	load.waitTurns(t, 1) // and a turn since on the new one
	for _, id := range ids {
		waitFor(t, "session "+id+" to run on "+want, func() (bool, error) { return runsOn(ctx, s, id, want) })
	}
	deploymentName := tenancy.Tenant(agent.Namespace, agent.Spec.FlowType).WorkerDeployment()
	if err := kube.Get(ctx, client.ObjectKey{Namespace: "default", Name: render.VersionedWorkerName(agentName, before.BuildID)}, &appsv1.Deployment{}); !apierrors.IsNotFound(err) {
		t.Fatalf("the drained version's Deployment is still there (%v)", err)
	}
	waitFor(t, "the engine to forget version "+before.BuildID, func() (bool, error) {
		return !slices.Contains(versionsOf(t, deploymentName), before.BuildID), nil
	})
	load.stop(t)
	if got := reasons(); !slices.Contains(got, string(rollout.PhaseDraining)) {
		t.Errorf("the Agent's Progressing reasons were %v; want %s while the old version drained", got, rollout.PhaseDraining)
	}
	// The runs themselves show which engine ran them: the workflow code
	// revision each recorded when it began.
	for _, id := range ids {
		old, err := engineRevision(ctx, s, id, firstRuns[id])
		if err != nil {
			t.Fatal(err)
		}
		now, err := engineRevision(ctx, s, id, "")
		if err != nil {
			t.Fatal(err)
		}
		if now <= old {
			t.Errorf("session %s: its run on engine %s records revision %d, its first run on %s revision %d; want a newer one", id, current, now, previous, old)
		}
	}
	t.Logf("%s is current on engine %s with %d workers; %s drained and removed", want, current, after.Status.ReadyReplicas, before.BuildID)
}

// engineRevision is the workflow code revision a session's run recorded in
// its version marker when it began.
func engineRevision(ctx context.Context, s *sessions.Sessions, id, runID string) (int, error) {
	found, err := s.Describe(ctx, id)
	if err != nil {
		return 0, err
	}
	it := engine.Client().GetWorkflowHistory(ctx, found.WorkflowID, runID, false, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
	for it.HasNext() {
		event, err := it.Next()
		if err != nil {
			return 0, err
		}
		marker := event.GetMarkerRecordedEventAttributes()
		if marker == nil || marker.GetMarkerName() != "Version" {
			continue
		}
		var changeID string
		var revision int
		if err := converter.GetDefaultDataConverter().FromPayloads(marker.GetDetails()["change-id"], &changeID); err != nil {
			return 0, err
		}
		if changeID != engineRevisionChangeID {
			continue
		}
		if err := converter.GetDefaultDataConverter().FromPayloads(marker.GetDetails()["version"], &revision); err != nil {
			return 0, err
		}
		return revision, nil
	}
	return 0, fmt.Errorf("session %s run %q records no %s version marker", id, runID, engineRevisionChangeID)
}

// engineRevisionChangeID is the change ID under which the session workflow
// records its code revision.
const engineRevisionChangeID = "stepwise-engine"
