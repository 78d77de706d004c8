package e2e

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"testing"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/api/workflowservice/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"sigs.k8s.io/controller-runtime/pkg/client"

	agentsv1 "github.com/stepwise-run/stepwise/api/v1alpha1"
	"github.com/stepwise-run/stepwise/internal/devserver"
	"github.com/stepwise-run/stepwise/internal/tenancy"
	"github.com/stepwise-run/stepwise/internal/version"
	sessions "github.com/stepwise-run/stepwise/pkg/client"
)

// The previous release's Agents, as its users wrote them: ledger runs on
// the operator's default engine and waits for approval of every export;
// exports, in namespace legacy, names its engine in spec.engine. Both run
// one worker of the previous release's engine.
const (
	// thisChart is this build's chart.
	thisChart       = "../../charts/stepwise"
	ledgerFlowType  = "LedgerAgent"
	exportsFlowType = "ExportsAgent"
	legacyNamespace = "legacy"
)

func legacyAgents(image, engineVersion string) string {
	return fmt.Sprintf(`apiVersion: agents.stepwise.run/v1alpha1
kind: Agent
metadata: {name: ledger, namespace: default}
spec:
  flowType: %[3]s
  instructions: You export ledgers once a person approves.
  model: {provider: scripted, name: demo}
  toolPolicies:
    - {name: slow_export, effect: non_idempotent_write, requiresApproval: true}
  workers: {image: %[1]s, engineVersion: %[2]s, replicas: 1}
---
apiVersion: agents.stepwise.run/v1alpha1
kind: Agent
metadata: {name: exports, namespace: %[5]s}
spec:
  flowType: %[4]s
  instructions: You export records.
  model: {provider: scripted, name: demo}
  engine: {address: %[6]q, namespace: default}
  toolPolicies:
    - {name: slow_export, effect: non_idempotent_write, requiresApproval: false}
  workers: {image: %[1]s, engineVersion: %[2]s, replicas: 1}
`, image, engineVersion, ledgerFlowType, exportsFlowType, legacyNamespace, engineForPods)
}

// installPreviousRelease installs the chart, operator and gateway of the
// previous release, whose engine keeps every session under the names one
// Flow type shares across the Temporal namespace, and leaves two of its
// sessions mid-turn: one waits for approval of its export, one runs a
// slow export.
func installPreviousRelease(t *testing.T) {
	helm(t, "install", "stepwise", filepath.Join(cfg.previousRelease, "chart"), "--namespace", operatorNamespace, "--create-namespace",
		"--set", "image.registry="+cfg.registry, "--set", "image.tag="+cfg.previousTag, "--set", "gateway.image.tag="+cfg.previousTag,
		"--set", "engine.address="+engineForPods,
		"--set", "rollout.pollerQuietPeriod="+pollerQuietPeriod.String(),
		"--set", "gateway.replicas=1",
		"--wait", "--timeout", wait.String())
	pointAtEventHub(t, filepath.Join(cfg.previousRelease, "chart"))
	kubectl(t, "create", "namespace", legacyNamespace)
	apply(t, legacyAgents(previousImage("e2e-worker"), cfg.previousEngineVersion))
	for _, a := range []struct{ namespace, name, flowType string }{
		{"default", "ledger", ledgerFlowType}, {legacyNamespace, "exports", exportsFlowType},
	} {
		agent := waitAgentIn(t, a.namespace, a.name, func(a *agentsv1.Agent) bool { return a.Status.ReadyReplicas == 1 })
		if want := tenancy.Shared(a.flowType).TaskQueue(); agent.Status.TaskQueue != want {
			t.Fatalf("the previous release runs Agent %s/%s on task queue %q, want the shared %s", a.namespace, a.name, agent.Status.TaskQueue, want)
		}
	}

	// Sessions as the previous release's clients started them: under the
	// shared names, with no owner recorded.
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	ledger := sessions.New(engine.Client(), sessions.Agent{FlowType: ledgerFlowType})
	exports := sessions.New(engine.Client(), sessions.Agent{FlowType: exportsFlowType})
	if ok, err := ledger.Start(ctx, "approve-1", `call slow_export {"seconds":1}`); !ok || err != nil {
		t.Fatalf("starting approve-1: %v %v", ok, err)
	}
	if ok, err := exports.Start(ctx, "mid-1", `call slow_export {"seconds":20}`); !ok || err != nil {
		t.Fatalf("starting mid-1: %v %v", ok, err)
	}
	waitFor(t, "approve-1 to wait for approval", func() (bool, error) {
		snap, err := ledger.Snapshot(ctx, "approve-1")
		return err == nil && len(snap.PendingInterrupts) == 1, nil
	})
	waitFor(t, "mid-1's slow_export to run", func() (bool, error) { return stepStarted(ctx, exports, "mid-1"), nil })
}

// upgradeFromPreviousRelease upgrades that installation to this build as
// its upgrade notes say: the CRDs first, then the chart, with namespace
// engines allowed for the Agent that names its own. The sessions keep
// running on the previous engine's workers; once each Agent runs this
// engine, every session moves to its Agent's own names between turns, the
// one waiting for approval after its approval, and the shared names are
// retired. No export runs twice.
func upgradeFromPreviousRelease(t *testing.T) {
	kubectl(t, "apply", "--server-side", "--force-conflicts", "-f", "../../charts/stepwise/crds/")
	// The values given at install are kept, on this chart's defaults.
	helm(t, "upgrade", "stepwise", thisChart, "--namespace", operatorNamespace, "--reset-then-reuse-values",
		"--set", "image.tag="+cfg.version, "--set", "gateway.image.tag=", "--set", "tenancy.namespaceEngines=true",
		"--wait", "--timeout", wait.String())
	// The single hub key of the previous release, from which any Agent's
	// publish token could be derived, is gone; the keys that replace it
	// are kept across upgrades.
	if err := kube.Get(context.Background(), client.ObjectKey{Namespace: operatorNamespace, Name: "stepwise-event-hub-key"}, &corev1.Secret{}); !apierrors.IsNotFound(err) {
		t.Fatalf("the previous release's event hub key Secret: %v, want it deleted", err)
	}
	credentials := hubCredentials(t)
	// The event hub runs the new gateway image in a new pod, at a new address.
	pointAtEventHub(t, thisChart)
	if hubCredentials(t) != credentials {
		t.Fatal("helm upgrade made new event hub credentials; it must keep the ones the first upgrade made")
	}
	checkChartImages(t)

	ctx, cancel := context.WithTimeout(context.Background(), 2*wait)
	defer cancel()
	// The previous engine's workers know only the shared names, so the
	// Agents keep them, on the engine the operator now asks the identity of.
	ledgerAgent := waitAgentIn(t, "default", "ledger", keepsSharedNames(ledgerFlowType))
	exportsAgent := waitAgentIn(t, legacyNamespace, "exports", keepsSharedNames(exportsFlowType))
	if ledgerAgent.Status.EngineID == "" || ledgerAgent.Status.EngineID != exportsAgent.Status.EngineID {
		t.Fatalf("engine IDs %q and %q: the default engine and spec.engine name one engine", ledgerAgent.Status.EngineID, exportsAgent.Status.EngineID)
	}
	endOfTurn(t, ctx, sessions.New(engine.Client(), sessions.AgentOf(exportsAgent)), "mid-1", 1)

	t.Log("rolling both Agents to this engine while approve-1 waits for approval")
	for _, a := range []struct{ namespace, name string }{{"default", "ledger"}, {legacyNamespace, "exports"}} {
		kubectl(t, "patch", "agent", a.name, "--namespace", a.namespace, "--type", "merge", "-p",
			fmt.Sprintf(`{"spec":{"workers":{"image":%q,"engineVersion":%q}}}`, image("e2e-worker"), version.EngineVersion))
	}
	moving := func(flowType string) func(*agentsv1.Agent) bool {
		return func(a *agentsv1.Agent) bool {
			v := a.Status.WorkerVersions
			return a.Status.TaskQueue == tenancy.Tenant(a.Namespace, flowType).TaskQueue() && len(v) > 0 &&
				v[0].EngineVersion == version.EngineVersion && v[0].State == agentsv1.WorkerVersionCurrent && v[0].ReadyReplicas == 1
		}
	}
	ledgerAgent = waitAgentIn(t, "default", "ledger", moving(ledgerFlowType))
	exportsAgent = waitAgentIn(t, legacyNamespace, "exports", moving(exportsFlowType))
	ledger, exports := sessions.New(engine.Client(), sessions.AgentOf(ledgerAgent)), sessions.New(engine.Client(), sessions.AgentOf(exportsAgent))

	snap, err := ledger.Snapshot(ctx, "approve-1")
	if err != nil || len(snap.PendingInterrupts) != 1 {
		t.Fatalf("approve-1 after the upgrade: %d pending, %v; want its approval still waiting", len(snap.PendingInterrupts), err)
	}
	if ok, err := ledger.Approve(ctx, "approve-1", snap.PendingInterrupts[0].ID); !ok || err != nil {
		t.Fatalf("approving approve-1: %v %v", ok, err)
	}
	endOfTurn(t, ctx, ledger, "approve-1", 1)

	// Each session moves to its Agent's own task queue, keeping its ID, and
	// records its owner; a new turn runs there.
	for _, c := range []struct {
		s         *sessions.Sessions
		agent     *agentsv1.Agent
		id        string
		flowType  string
		namespace string
	}{
		{ledger, ledgerAgent, "approve-1", ledgerFlowType, "default"},
		{exports, exportsAgent, "mid-1", exportsFlowType, legacyNamespace},
	} {
		own := tenancy.Tenant(c.namespace, c.flowType).TaskQueue()
		waitFor(t, c.id+" to move to "+own, func() (bool, error) {
			found, err := c.s.Describe(ctx, c.id)
			return err == nil && found.TaskQueue == own && found.Running, nil
		})
		after := sessions.New(engine.Client(), sessions.Agent{Namespace: c.namespace, Name: c.agent.Name, UID: string(c.agent.UID), FlowType: c.flowType})
		if ok, err := after.Send(ctx, c.id, "thank you"); !ok || err != nil {
			t.Fatalf("a second turn of %s: %v %v", c.id, ok, err)
		}
		snap := endOfTurn(t, ctx, after, c.id, 2)
		if n := countToolMessages(snap, "slow_export"); n != 1 {
			t.Fatalf("session %s ran slow_export %d times; a non-idempotent write runs once per call", c.id, n)
		}
	}

	// With no session left there, the Agents give up the shared names.
	for _, a := range []struct{ namespace, name, flowType string }{
		{"default", "ledger", ledgerFlowType}, {legacyNamespace, "exports", exportsFlowType},
	} {
		waitAgentIn(t, a.namespace, a.name, func(agent *agentsv1.Agent) bool {
			return agent.Status.SharedTaskQueue == "" && len(agent.Status.WorkerVersions) == 1 &&
				meta.IsStatusConditionFalse(agent.Status.Conditions, agentsv1.ConditionProgressing)
		})
		shared := tenancy.Shared(a.flowType).WorkerDeployment()
		waitFor(t, "the shared Worker Deployment "+shared+" to be removed", func() (bool, error) {
			_, err := engine.Client().WorkflowService().DescribeWorkerDeployment(ctx,
				&workflowservice.DescribeWorkerDeploymentRequest{Namespace: devserver.Namespace, DeploymentName: shared})
			var notFound *serviceerror.NotFound
			return errors.As(err, &notFound), nil
		})
	}
	for _, a := range []struct{ namespace, name string }{{"default", "ledger"}, {legacyNamespace, "exports"}} {
		kubectl(t, "delete", "agent", a.name, "--namespace", a.namespace, "--wait=false")
	}
}

// keepsSharedNames waits for an Agent of the previous engine, Ready, on
// the shared task queue of its Flow type, with its engine's identity.
func keepsSharedNames(flowType string) func(*agentsv1.Agent) bool {
	return func(a *agentsv1.Agent) bool {
		return meta.IsStatusConditionTrue(a.Status.Conditions, agentsv1.ConditionReady) && a.Status.ReadyReplicas == 1 &&
			a.Status.TaskQueue == tenancy.Shared(flowType).TaskQueue() && a.Status.EngineID != ""
	}
}

// endOfTurn waits for a session to have ended turns turns with the
// assistant's answer, and returns it.
func endOfTurn(t *testing.T, ctx context.Context, s *sessions.Sessions, id string, turns int) sessions.Snapshot {
	t.Helper()
	var snap sessions.Snapshot
	waitFor(t, fmt.Sprintf("session %s to end turn %d", id, turns), func() (bool, error) {
		var err error
		snap, err = s.Snapshot(ctx, id)
		return err == nil && snap.State != nil && snap.State.ActiveTurnID == "" && snap.State.TurnCount == turns &&
			len(snap.Messages) > 0 && snap.Messages[len(snap.Messages)-1].Role == "assistant", nil
	})
	return snap
}

// stepStarted says whether a session has a Step running on a worker.
func stepStarted(ctx context.Context, s *sessions.Sessions, id string) bool {
	desc, err := describeSession(ctx, s, id)
	if err != nil {
		return false
	}
	for _, a := range desc.RawResponse.GetPendingActivities() {
		if a.GetState() == enumspb.PENDING_ACTIVITY_STATE_STARTED {
			return true
		}
	}
	return false
}

// pointAtEventHub tells the chart where the event hub's pod is: this
// cluster has no DNS, so workers and gateways reach it at its address.
func pointAtEventHub(t *testing.T, chart string) {
	t.Helper()
	hubIP := readyPodIP(t, operatorNamespace, "app.kubernetes.io/component=event-hub")
	helm(t, "upgrade", "stepwise", chart, "--namespace", operatorNamespace, "--reuse-values",
		"--set", "eventHub.url=http://"+hubIP+":8090", "--wait", "--timeout", wait.String())
}

// checkChartImages checks that the chart runs this build's operator,
// gateway and event hub, each available.
func checkChartImages(t *testing.T) {
	t.Helper()
	wantImages := map[string]string{
		"stepwise": image("operator"), "stepwise-gateway": image("gateway"), "stepwise-event-hub": image("gateway"),
	}
	var deploy appsv1.DeploymentList
	if err := kube.List(context.Background(), &deploy, client.InNamespace(operatorNamespace)); err != nil {
		t.Fatal(err)
	}
	if len(deploy.Items) != len(wantImages) {
		t.Fatalf("the chart installed %d Deployments, want the operator's, the gateway's and the event hub's", len(deploy.Items))
	}
	for _, d := range deploy.Items {
		if got := d.Spec.Template.Spec.Containers[0].Image; got != wantImages[d.Name] {
			t.Fatalf("Deployment %s runs %s, want %s", d.Name, got, wantImages[d.Name])
		}
		if d.Status.AvailableReplicas < 1 {
			t.Fatalf("Deployment %s has %d available replicas after helm --wait", d.Name, d.Status.AvailableReplicas)
		}
	}
}
