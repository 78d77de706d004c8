package e2e

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	temporalclient "go.temporal.io/sdk/client"
	appsv1 "k8s.io/api/apps/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	agentsv1 "github.com/stepwise-run/stepwise/api/v1alpha1"
	"github.com/stepwise-run/stepwise/internal/demo"
	"github.com/stepwise-run/stepwise/internal/gateway"
	"github.com/stepwise-run/stepwise/internal/kubectlstepwise"
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

// tokenIn asks the API server for a short-lived token of a service account,
// for the API server itself.
func tokenIn(t *testing.T, namespace, name string) string {
	t.Helper()
	return requestToken(t, namespace, name, nil)
}

// gatewayTokenIn asks for a short-lived token of a service account for the
// gateway's own audience, which the API server refuses.
func gatewayTokenIn(t *testing.T, namespace, name string) string {
	t.Helper()
	return requestToken(t, namespace, name, []string{gateway.DefaultAudience})
}

func requestToken(t *testing.T, namespace, name string, audiences []string) string {
	t.Helper()
	tr, err := core.CoreV1().ServiceAccounts(namespace).CreateToken(context.Background(), name,
		&authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To(int64(3600)), Audiences: audiences}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return tr.Status.Token
}

// pluginAs runs kubectl stepwise as the holder of a token, in a namespace.
func pluginAs(t *testing.T, base, token, namespace string) func(args ...string) (int, string, string) {
	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	config := "apiVersion: v1\nkind: Config\nclusters: [{name: c, cluster: {server: \"https://127.0.0.1:1\"}}]\n" +
		"contexts: [{name: ctx, context: {cluster: c, user: u, namespace: " + namespace + "}}]\ncurrent-context: ctx\n" +
		"users: [{name: u, user: {token: " + token + "}}]\n"
	if err := os.WriteFile(kubeconfig, []byte(config), 0o600); err != nil {
		t.Fatal(err)
	}
	env := map[string]string{"KUBECONFIG": kubeconfig, "STEPWISE_GATEWAY": base}
	return func(args ...string) (int, string, string) {
		var out, errOut bytes.Buffer
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		// The test cluster's pod network is this host's own bridge.
		args = append(args, "--plain-http")
		status := kubectlstepwise.Run(ctx, args, func(k string) string { return env[k] }, &out, &errOut)
		return status, out.String(), errOut.String()
	}
}

// podNamesIn lists the names of an Agent's worker pods in a namespace.
func podNamesIn(t *testing.T, namespace, agent string) map[string]bool {
	t.Helper()
	var list corev1.PodList
	if err := kube.List(context.Background(), &list, client.InNamespace(namespace), client.MatchingLabels(render.SelectorLabels(agent))); err != nil {
		t.Fatal(err)
	}
	names := map[string]bool{}
	for _, p := range list.Items {
		if p.DeletionTimestamp == nil {
			names[p.Name] = true
		}
	}
	return names
}

func sameSet(a, b map[string]bool) bool {
	if len(a) != len(b) {
		return false
	}
	for k := range a {
		if !b[k] {
			return false
		}
	}
	return true
}
