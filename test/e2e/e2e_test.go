package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"sigs.k8s.io/controller-runtime/pkg/client"

	agentsv1 "github.com/stepwise-run/stepwise/api/v1alpha1"
	"github.com/stepwise-run/stepwise/internal/demo"
	"github.com/stepwise-run/stepwise/internal/render"
	sessions "github.com/stepwise-run/stepwise/pkg/client"
)

const (
	operatorNamespace = "stepwise-system"
	// wait bounds every wait on the cluster: generous, because a shared
	// two-core machine may be slow, and never an assertion on speed.
	wait = 4 * time.Minute
	// pollerQuietPeriod is the operator's, above the engine's long poll.
	pollerQuietPeriod = 15 * time.Second
)

// TestOperatorOnRealPods walks what a platform team does, in order: install
// the previous release and upgrade it to this one, apply the samples, run a
// session, scale, change task slots, rotate a Secret, lose a pod during a
// tool call, roll workers, and keep two teams apart on one engine.
func TestOperatorOnRealPods(t *testing.T) {
	steps := []struct {
		name string
		run  func(t *testing.T)
	}{
		{"the previous release installs and leaves sessions mid-turn and waiting for approval", installPreviousRelease},
		{"the chart upgrades to this build and every session moves to its Agent's own names, none lost, no export repeated", upgradeFromPreviousRelease},
		{"the samples' support workers become Ready and run the demo session", supportDemo},
		{"the gateway runs a session of the worker pods for a user with the verbs, streams its events, and refuses a user without", gatewayOnPods},
		{"kubectl scale moves running pods", scaleAgent},
		{"a HorizontalPodAutoscaler scales the Agent through its scale subresource", autoscaleAgent},
		{"task slots reach the worker", taskSlots},
		{"a rotated Secret rolls the pods and the session continues", rotateSecret},
		{"a pod deleted during a tool call finishes the Step and the session goes on", podDeletedDuringToolCall},
		{"pods run with the rendered security context", securityContext},
		{"a rollback and an upgrade across engine versions stop every old worker first, under load", stopOldFirstUnderLoad},
		{"a new image and its revert roll as Worker Deployment versions while sessions keep answering", versionedUpgradeUnderLoad},
		{"a session feature is refused while a worker of an engine without it polls, and allowed once it stops", featureGateOnTheCluster},
		{"an upgrade across an incompatible engine version moves each session at its next turn while sessions keep answering", upgradeAcrossEngineVersions},
		{"an Agent with an S3 MediaStore shows the model a PNG from the CLI and an MCP tool's image", imagesOnTheCluster},
		{"two namespaces on one Temporal namespace never reach each other's sessions, workers or credentials", tenantsApart},
		{"a store on the node is its namespace's alone, and one reached through a symbolic link never starts a worker", hostMediaStoresPerNamespace},
	}
	for _, s := range steps {
		if !t.Run(s.name, s.run) {
			t.Fatalf("stopping after %q failed", s.name)
		}
	}
}

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

func securityContext(t *testing.T) {
	for _, p := range append(workerPods(t, "support", 2), workerPods(t, "exporter", 2)...) {
		sc := p.Spec.SecurityContext
		if sc == nil || sc.RunAsNonRoot == nil || !*sc.RunAsNonRoot {
			t.Fatalf("pod %s does not set runAsNonRoot", p.Name)
		}
		c := p.Spec.Containers[0].SecurityContext
		if c == nil || c.ReadOnlyRootFilesystem == nil || !*c.ReadOnlyRootFilesystem ||
			c.Capabilities == nil || len(c.Capabilities.Drop) != 1 || c.Capabilities.Drop[0] != "ALL" ||
			c.AllowPrivilegeEscalation == nil || *c.AllowPrivilegeEscalation {
			t.Fatalf("pod %s container security context is %+v", p.Name, c)
		}
		// What the kernel says of the running worker process.
		pid := containerPID(t, &p)
		status := readProc(t, pid, "status")
		for _, want := range []string{"Uid:\t65532\t65532\t65532\t65532", "Gid:\t65532\t65532\t65532\t65532",
			"CapEff:\t0000000000000000", "CapPrm:\t0000000000000000", "NoNewPrivs:\t1"} {
			if !strings.Contains(status, want) {
				t.Fatalf("pod %s: the worker process (pid %d) status lacks %q:\n%s", p.Name, pid, want, status)
			}
		}
		mounts := readProc(t, pid, "mountinfo")
		rootReadOnly, tmpWritable := false, false
		for _, line := range strings.Split(mounts, "\n") {
			f := strings.Fields(line)
			if len(f) < 6 {
				continue
			}
			opts := "," + f[5] + ","
			switch f[4] {
			case "/":
				rootReadOnly = strings.Contains(opts, ",ro,")
			case "/tmp":
				tmpWritable = strings.Contains(opts, ",rw,")
			}
		}
		if !rootReadOnly || !tmpWritable {
			t.Fatalf("pod %s: root read-only %v, /tmp (the declared volume) writable %v; mounts:\n%s", p.Name, rootReadOnly, tmpWritable, mounts)
		}
	}
}

// containerPID finds the host PID of the pod's worker container through
// containerd, where the pod's processes really run.
func containerPID(t *testing.T, p *corev1.Pod) int {
	t.Helper()
	if len(p.Status.ContainerStatuses) == 0 {
		t.Fatalf("pod %s has no container status", p.Name)
	}
	id := strings.TrimPrefix(p.Status.ContainerStatuses[0].ContainerID, "containerd://")
	out, err := exec.Command("ctr", "--address", cluster.ContainerdAddress(), "--namespace", "k8s.io", "tasks", "ls").CombinedOutput()
	if err != nil {
		t.Fatalf("ctr tasks ls: %v\n%s", err, out)
	}
	for _, line := range strings.Split(string(out), "\n") {
		f := strings.Fields(line)
		if len(f) >= 2 && f[0] == id {
			pid, err := strconv.Atoi(f[1])
			if err != nil {
				t.Fatal(err)
			}
			return pid
		}
	}
	t.Fatalf("containerd runs no task %s for pod %s:\n%s", id, p.Name, out)
	return 0
}

func readProc(t *testing.T, pid int, name string) string {
	t.Helper()
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/%s", pid, name))
	if err != nil {
		t.Fatal(err)
	}
	return string(data)
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

func toolMessage(snap sessions.Snapshot, tool string) *sessions.Message {
	for i := range snap.Messages {
		if snap.Messages[i].Role == "tool" && snap.Messages[i].ToolName == tool {
			return &snap.Messages[i]
		}
	}
	return nil
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

// testWriter sends the demo's progress to the test log.
type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}
