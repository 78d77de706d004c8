package e2e

import (
	"context"
	"strings"
	"testing"

	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"sigs.k8s.io/controller-runtime/pkg/client"

	agentsv1 "github.com/stepwise-run/stepwise/api/v1alpha1"
	"github.com/stepwise-run/stepwise/internal/demo"
	sessions "github.com/stepwise-run/stepwise/pkg/client"
)

func supportDemo(t *testing.T) {
	kubectl(t, "apply", "-f", "../../config/samples/")
	agent := waitAgent(t, "support", func(a *agentsv1.Agent) bool {
		return meta.IsStatusConditionTrue(a.Status.Conditions, agentsv1.ConditionWorkersAvailable) && a.Status.ReadyReplicas == 2
	})
	pods := workerPods(t, "support", 2)
	for _, p := range pods {
		if p.Spec.Containers[0].Image != "ghcr.io/stepwise-run/support-worker:0.4.0" {
			t.Fatalf("pod %s runs %s, want the sample's image", p.Name, p.Spec.Containers[0].Image)
		}
	}
	// The Agent's status follows its workers' Deployment, which may still
	// be rolling to the template of a reference the Agent resolved late.
	waitFor(t, "kubectl get agent support to show AVAILABLE 2 (columns NAME FLOW-TYPE PROVIDER MODEL READY DESIRED AVAILABLE)", func() (bool, error) {
		out, err := kubectlErr("get", "agent", "support", "--no-headers")
		cols := strings.Fields(out)
		return err == nil && len(cols) >= 7 && cols[6] == "2", nil
	})

	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	s := sessions.New(engine.Client(), sessions.AgentOf(agent))
	snap, err := demo.Refund(ctx, testWriter{t}, s, demo.SessionID, "Please refund order 7", true)
	if err != nil {
		t.Fatal(err)
	}
	last := snap.Messages[len(snap.Messages)-1]
	if last.Role != "assistant" || !strings.Contains(last.Text, "refund rf-1-7") {
		t.Fatalf("the session's last message is %s %q; want the assistant's report of refund rf-1-7", last.Role, last.Text)
	}
	// The workers counted the session's model calls against the sample's
	// budget on the engine, and the operator shows it.
	used := snap.Usage.InputTokens + snap.Usage.OutputTokens
	waitAgent(t, "support", func(a *agentsv1.Agent) bool {
		sp := a.Status.Spend
		return sp != nil && sp.Tokens >= used && sp.ModelCalls >= snap.Usage.ModelCalls && sp.CostBudget == "25" && sp.Cost != "0" && !sp.Reached
	})
}

func scaleAgent(t *testing.T) {
	before := podNames(workerPods(t, "support", 2))
	kubectl(t, "scale", "agent", "support", "--replicas=3")
	waitAgent(t, "support", func(a *agentsv1.Agent) bool { return a.Status.ReadyReplicas == 3 })
	after := podNames(workerPods(t, "support", 3))
	for name := range before {
		if !after[name] {
			t.Fatalf("scaling up replaced pod %s; a scale must only add pods", name)
		}
	}
	out := kubectl(t, "get", "agent", "support", "--no-headers")
	if cols := strings.Fields(out); len(cols) < 7 || cols[6] != "3" {
		t.Fatalf("kubectl get agent support shows %q; want AVAILABLE 3", out)
	}
	kubectl(t, "scale", "agent", "support", "--replicas=2")
	waitAgent(t, "support", func(a *agentsv1.Agent) bool { return a.Status.ReadyReplicas == 2 && a.Status.Replicas == 2 })
	workerPods(t, "support", 2)
}

// autoscaleAgent applies the README's HorizontalPodAutoscaler example: the
// cluster's HPA controller reads and writes the Agent's scale subresource,
// and the operator follows. There is no metrics API here, so the HPA acts
// on its minimum alone, which is what this shows.
func autoscaleAgent(t *testing.T) {
	kubectl(t, "apply", "-f", "../../examples/autoscaling/hpa.yaml")
	waitFor(t, "the HPA to read the Agent's scale", func() (bool, error) {
		var hpa autoscalingv2.HorizontalPodAutoscaler
		if err := kube.Get(context.Background(), client.ObjectKey{Namespace: "default", Name: "support-workers"}, &hpa); err != nil {
			return false, err
		}
		for _, c := range hpa.Status.Conditions {
			if c.Type == autoscalingv2.AbleToScale && c.Status == corev1.ConditionTrue {
				return true, nil
			}
		}
		return false, nil
	})
	waitAgent(t, "support", func(a *agentsv1.Agent) bool {
		return *a.Spec.Workers.Replicas == 3 && a.Status.ReadyReplicas == 3
	})
	workerPods(t, "support", 3)
	kubectl(t, "delete", "-f", "../../examples/autoscaling/hpa.yaml", "--wait")
	kubectl(t, "scale", "agent", "support", "--replicas=2")
	waitAgent(t, "support", func(a *agentsv1.Agent) bool { return a.Status.ReadyReplicas == 2 && a.Status.Replicas == 2 })
	workerPods(t, "support", 2)
}

func taskSlots(t *testing.T) {
	kubectl(t, "patch", "agent", "support", "--type", "merge", "-p", `{"spec":{"workers":{"taskSlots":7}}}`)
	waitRolledOut(t, "support", 2)
	// Pods of the old template may still be listed while they stop: wait
	// until the running ones are two new workers that say what they run with.
	waitFor(t, "two Ready support pods that log taskSlots 7", func() (bool, error) {
		pods, err := listWorkerPods("support")
		if err != nil {
			return false, err
		}
		running := 0
		for i := range pods {
			p := &pods[i]
			if p.DeletionTimestamp != nil {
				continue
			}
			logs, err := kubectlErr("logs", "-n", "default", p.Name)
			if err != nil || !podReady(p) || !strings.Contains(logs, `"taskSlots":7`) {
				return false, err
			}
			running++
		}
		return running == 2, nil
	})
}

func rotateSecret(t *testing.T) {
	before := podNames(workerPods(t, "support", 2))
	kubectl(t, "patch", "secret", "tickets-mcp", "--type", "merge", "-p", `{"stringData":{"authorization":"Bearer rotated"}}`)
	waitFor(t, "the support pods to be replaced after the Secret changed", func() (bool, error) {
		pods, err := listWorkerPods("support")
		if err != nil {
			return false, err
		}
		ready := 0
		for _, p := range pods {
			if before[p.Name] {
				return false, nil
			}
			if podReady(&p) {
				ready++
			}
		}
		return ready == 2, nil
	})
	agent := waitAgent(t, "support", func(a *agentsv1.Agent) bool { return a.Status.ReadyReplicas == 2 })
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	s := sessions.New(engine.Client(), sessions.AgentOf(agent))
	snap, err := demo.Refund(ctx, testWriter{t}, s, demo.SessionID, "Please refund order 8", false)
	if err != nil {
		t.Fatal(err)
	}
	last := snap.Messages[len(snap.Messages)-1]
	if last.Role != "assistant" || !strings.Contains(last.Text, "order 8") {
		t.Fatalf("after the rotation the session's last message is %s %q; want the assistant's report on order 8", last.Role, last.Text)
	}
}

// testWriter sends the demo's progress to the test log.
type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}
