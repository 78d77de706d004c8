package e2e

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"

	temporalclient "go.temporal.io/sdk/client"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	agentsv1 "github.com/stepwise-run/stepwise/api/v1alpha1"
	"github.com/stepwise-run/stepwise/internal/demo"
	"github.com/stepwise-run/stepwise/internal/render"
	sessions "github.com/stepwise-run/stepwise/pkg/client"
)

// hubCredentials reads the event hub's publish keys and read tokens, which
// the chart makes once and keeps.
func hubCredentials(t *testing.T) string {
	t.Helper()
	var out []string
	for name, key := range map[string]string{"stepwise-event-hub-publish-keys": "keys", "stepwise-event-hub-read-tokens": "tokens"} {
		var secret corev1.Secret
		if err := kube.Get(context.Background(), client.ObjectKey{Namespace: operatorNamespace, Name: name}, &secret); err != nil {
			t.Fatal(err)
		}
		if len(secret.Data[key]) < 32 {
			t.Fatalf("Secret %s holds %d bytes under %s", name, len(secret.Data[key]), key)
		}
		out = append(out, string(secret.Data[key]))
	}
	slices.Sort(out)
	return strings.Join(out, "\n")
}

// readyPodIP waits for one Ready pod with these labels, none terminating,
// and returns its address, which this host reaches on the bridge.
func readyPodIP(t *testing.T, namespace, selector string) string {
	t.Helper()
	var ip string
	waitFor(t, "a Ready pod "+selector, func() (bool, error) {
		pods, err := core.CoreV1().Pods(namespace).List(context.Background(), metav1.ListOptions{LabelSelector: selector})
		if err != nil {
			return false, err
		}
		if len(pods.Items) != 1 || pods.Items[0].DeletionTimestamp != nil || !podReady(&pods.Items[0]) {
			return false, nil
		}
		ip = pods.Items[0].Status.PodIP
		return ip != "", nil
	})
	return ip
}

func engineVersionOf(t *testing.T) string {
	t.Helper()
	var a agentsv1.Agent
	if err := kube.Get(context.Background(), client.ObjectKey{Namespace: "default", Name: "support"}, &a); err != nil {
		t.Fatal(err)
	}
	return a.Spec.Workers.EngineVersion
}

func apply(t *testing.T, manifest string) {
	t.Helper()
	f, err := os.CreateTemp(t.TempDir(), "*.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteString(manifest); err != nil {
		t.Fatal(err)
	}
	_ = f.Close()
	kubectl(t, "apply", "-f", f.Name())
}

func waitAgent(t *testing.T, name string, cond func(*agentsv1.Agent) bool) *agentsv1.Agent {
	t.Helper()
	return waitAgentIn(t, "default", name, cond)
}

func waitAgentIn(t *testing.T, namespace, name string, cond func(*agentsv1.Agent) bool) *agentsv1.Agent {
	t.Helper()
	var a agentsv1.Agent
	waitFor(t, "Agent "+namespace+"/"+name, func() (bool, error) {
		if err := kube.Get(context.Background(), client.ObjectKey{Namespace: namespace, Name: name}, &a); err != nil {
			return false, err
		}
		return a.Status.ObservedGeneration == a.Generation && cond(&a), nil
	})
	return &a
}

// waitRolledOut waits until the Agent's worker Deployment runs its newest
// template on exactly replicas Ready pods.
func waitRolledOut(t *testing.T, agent string, replicas int32) {
	t.Helper()
	waitFor(t, "the "+agent+" workers to roll out", func() (bool, error) {
		var a agentsv1.Agent
		if err := kube.Get(context.Background(), client.ObjectKey{Namespace: "default", Name: agent}, &a); err != nil {
			return false, err
		}
		// Where the engine offers Worker Deployments, the desired workers
		// are the newest version's own Deployment.
		names := []string{render.WorkerName(agent)}
		if v := a.Status.WorkerVersions; len(v) > 0 {
			names = append([]string{render.VersionedWorkerName(agent, v[0].BuildID)}, names...)
		}
		var d appsv1.Deployment
		found := false
		for _, name := range names {
			err := kube.Get(context.Background(), client.ObjectKey{Namespace: "default", Name: name}, &d)
			if client.IgnoreNotFound(err) != nil {
				return false, err
			}
			if found = err == nil; found {
				break
			}
		}
		if !found {
			return false, nil
		}
		s := d.Status
		terminating := s.TerminatingReplicas != nil && *s.TerminatingReplicas > 0
		return s.ObservedGeneration == d.Generation && s.UpdatedReplicas == replicas && s.ReadyReplicas == replicas &&
			s.Replicas == replicas && !terminating, nil
	})
}

// workerPods waits until the Agent has exactly n pods, all Ready and none
// terminating, and returns them.
func workerPods(t *testing.T, agent string, n int) []corev1.Pod {
	t.Helper()
	var pods []corev1.Pod
	waitFor(t, fmt.Sprintf("%d Ready %s pods", n, agent), func() (bool, error) {
		var err error
		pods, err = listWorkerPods(agent)
		if err != nil || len(pods) != n {
			return false, err
		}
		for i := range pods {
			if !podReady(&pods[i]) || pods[i].DeletionTimestamp != nil {
				return false, nil
			}
		}
		return true, nil
	})
	return pods
}

func listWorkerPods(agent string) ([]corev1.Pod, error) {
	var list corev1.PodList
	err := kube.List(context.Background(), &list, client.InNamespace("default"), client.MatchingLabels(render.SelectorLabels(agent)))
	return list.Items, err
}

func podReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

func podNames(pods []corev1.Pod) map[string]bool {
	names := map[string]bool{}
	for _, p := range pods {
		names[p.Name] = true
	}
	return names
}

func lastToolMessage(snap sessions.Snapshot, tool string) *sessions.Message {
	for i := len(snap.Messages) - 1; i >= 0; i-- {
		if snap.Messages[i].Role == "tool" && snap.Messages[i].ToolName == tool {
			return &snap.Messages[i]
		}
	}
	return nil
}

func countToolMessages(snap sessions.Snapshot, tool string) int {
	n := 0
	for _, m := range snap.Messages {
		if m.Role == "tool" && m.ToolName == tool {
			n++
		}
	}
	return n
}

// countStoredToolMessages counts a tool's results in every stored message
// of a session, page by page.
func countStoredToolMessages(ctx context.Context, s *sessions.Sessions, id, tool string) (int, error) {
	n := 0
	req := sessions.MessagesRequest{Limit: 200}
	for {
		page, err := s.Messages(ctx, id, req)
		if err != nil {
			return n, err
		}
		for _, m := range page.Messages {
			if m.Role == "tool" && m.ToolName == tool {
				n++
			}
		}
		if page.NextBeforeSequence == 0 {
			return n, nil
		}
		req.BeforeSequence = page.NextBeforeSequence
	}
}

func waitFor(t *testing.T, what string, cond func() (bool, error)) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	if err := demo.Poll(ctx, cond); err != nil {
		t.Fatalf("waiting for %s: %v", what, err)
	}
}

// describeSession describes one of the Agent's sessions on the engine.
func describeSession(ctx context.Context, s *sessions.Sessions, id string) (*temporalclient.WorkflowExecutionDescription, error) {
	found, err := s.Describe(ctx, id)
	if err != nil {
		return nil, err
	}
	return engine.Client().DescribeWorkflow(ctx, found.WorkflowID, "")
}
