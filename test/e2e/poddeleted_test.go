package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"

	enumspb "go.temporal.io/api/enums/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"sigs.k8s.io/controller-runtime/pkg/client"

	agentsv1 "github.com/stepwise-run/stepwise/api/v1alpha1"
	"github.com/stepwise-run/stepwise/internal/render"
	sessions "github.com/stepwise-run/stepwise/pkg/client"
)

func podDeletedDuringToolCall(t *testing.T) {
	manifest := fmt.Sprintf(`apiVersion: agents.stepwise.run/v1alpha1
kind: Agent
metadata:
  name: exporter
  namespace: default
spec:
  flowType: ExporterAgent
  instructions: You export records.
  model: {provider: scripted, name: demo}
  toolPolicies:
    - {name: slow_export, effect: non_idempotent_write, requiresApproval: false}
  workers:
    image: %s
    engineVersion: %s
    replicas: 2
`, image("e2e-worker"), engineVersionOf(t))
	apply(t, manifest)
	agent := waitAgent(t, "exporter", func(a *agentsv1.Agent) bool { return a.Status.ReadyReplicas == 2 })
	workerPods(t, "exporter", 2)

	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	s := sessions.New(engine.Client(), sessions.AgentOf(agent))
	const id = "export-1"
	if ok, err := s.Start(ctx, id, `call slow_export {"seconds":12}`); err != nil || !ok {
		t.Fatalf("starting %s: %v %v", id, ok, err)
	}
	// The tool Step runs on one of the two pods: the engine tells which.
	var runner string
	waitFor(t, "the slow_export Step to start on a worker", func() (bool, error) {
		desc, err := describeSession(ctx, s, id)
		if err != nil {
			return false, nil
		}
		for _, a := range desc.RawResponse.GetPendingActivities() {
			if a.State == enumspb.PENDING_ACTIVITY_STATE_STARTED && a.LastWorkerIdentity != "" {
				// The SDK's identity is "<pid>@<host name>@"; a pod's host
				// name is its name.
				parts := strings.Split(a.LastWorkerIdentity, "@")
				if len(parts) < 2 || parts[1] == "" {
					return false, fmt.Errorf("worker identity %q names no host", a.LastWorkerIdentity)
				}
				runner = parts[1]
				return true, nil
			}
		}
		return false, nil
	})
	// A worker the Agent names no resources for runs with the defaults: a
	// request the scheduler places, and a memory limit.
	pods, err := listWorkerPods("exporter")
	if err != nil || len(pods) == 0 {
		t.Fatalf("listing the exporter's pods: %d, %v", len(pods), err)
	}
	res := pods[0].Spec.Containers[0].Resources
	if res.Requests.Cpu().String() != "50m" || res.Requests.Memory().String() != "128Mi" || res.Limits.Memory().String() != "1Gi" {
		t.Fatalf("a worker pod runs with requests %v and limits %v, want 50m CPU and 128Mi requested, 1Gi of memory at most", res.Requests, res.Limits)
	}
	// The chart's default has the operator give every Agent's workers a
	// NetworkPolicy, which the API server took as the operator wrote it.
	var policy networkingv1.NetworkPolicy
	if err := kube.Get(context.Background(), client.ObjectKey{Namespace: "default", Name: render.NetworkPolicyName("exporter")}, &policy); err != nil {
		t.Fatalf("the exporter's worker NetworkPolicy: %v", err)
	}
	if sel, err := metav1.LabelSelectorAsSelector(&policy.Spec.PodSelector); err != nil || !sel.Matches(labels.Set(pods[0].Labels)) || len(policy.Spec.Ingress) != 2 {
		t.Fatalf("the worker NetworkPolicy %+v does not select the worker pods with a rule for probes and one for metrics", policy.Spec)
	}
	t.Logf("deleting pod %s while it runs slow_export", runner)
	kubectl(t, "delete", "pod", "-n", "default", runner, "--wait=false")

	var snap sessions.Snapshot
	waitFor(t, "the session to finish its turn", func() (bool, error) {
		var err error
		snap, err = s.Snapshot(ctx, id)
		return err == nil && snap.State != nil && snap.State.ActiveTurnID == "" && len(snap.Messages) >= 3, nil
	})
	result := toolMessage(snap, "slow_export")
	if result == nil || !strings.Contains(result.Text, "exported by "+runner) {
		t.Fatalf("the slow_export result is %+v; want it finished by the deleted pod %s within its grace period", result, runner)
	}
	if n := countToolMessages(snap, "slow_export"); n != 1 {
		t.Fatalf("slow_export ran %d times; a non-idempotent write runs once", n)
	}
	waitFor(t, "pod "+runner+" to be gone", func() (bool, error) {
		pods, err := listWorkerPods("exporter")
		for _, p := range pods {
			if p.Name == runner {
				return false, err
			}
		}
		return err == nil, err
	})

	// The session goes on, on a pod that is not the deleted one.
	if ok, err := s.Send(ctx, id, `call slow_export {"seconds":1}`); err != nil || !ok {
		t.Fatalf("sending to %s: %v %v", id, ok, err)
	}
	waitFor(t, "the second turn to finish", func() (bool, error) {
		var err error
		snap, err = s.Snapshot(ctx, id)
		return err == nil && snap.State != nil && snap.State.ActiveTurnID == "" && countToolMessages(snap, "slow_export") == 2, nil
	})
	last := lastToolMessage(snap, "slow_export")
	if strings.Contains(last.Text, "exported by "+runner) || !strings.Contains(last.Text, "exported by exporter-") {
		t.Fatalf("the second export ran as %q; want another exporter pod than %s", last.Text, runner)
	}
}

func toolMessage(snap sessions.Snapshot, tool string) *sessions.Message {
	for i := range snap.Messages {
		if snap.Messages[i].Role == "tool" && snap.Messages[i].ToolName == tool {
			return &snap.Messages[i]
		}
	}
	return nil
}
