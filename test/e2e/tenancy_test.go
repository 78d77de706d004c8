package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os/exec"
	"strings"
	"sync/atomic"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	agentsv1 "github.com/stepwise-run/stepwise/api/v1alpha1"
	"github.com/stepwise-run/stepwise/internal/flowclaim"
	"github.com/stepwise-run/stepwise/internal/gatewayapi"
	"github.com/stepwise-run/stepwise/internal/tenancy"
	"github.com/stepwise-run/stepwise/internal/testcluster"
	"github.com/stepwise-run/stepwise/internal/version"
	sessions "github.com/stepwise-run/stepwise/pkg/client"
)

// team is one team's namespace and the people who run its Agents'
// sessions, and nothing of another namespace's.
func team(namespace string) string {
	return fmt.Sprintf(`apiVersion: v1
kind: Namespace
metadata: {name: %[1]s, labels: {tenant: %[1]s}}
---
apiVersion: v1
kind: ServiceAccount
metadata: {name: people, namespace: %[1]s}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata: {name: sessions, namespace: %[1]s}
rules:
  - {apiGroups: [agents.stepwise.run], resources: [agents/sessions], verbs: [get, create, send, approve, answer, cancel, update]}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {name: people, namespace: %[1]s}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: Role, name: sessions}
subjects: [{kind: ServiceAccount, name: people, namespace: %[1]s}]
`, namespace)
}

// billingAgent is an Agent of Flow type BillingAgent in a namespace, on
// the engine its engine lines name.
func billingAgent(namespace, name, engine, image string) string {
	return fmt.Sprintf(`apiVersion: agents.stepwise.run/v1alpha1
kind: Agent
metadata: {name: %s, namespace: %s}
spec:
  flowType: BillingAgent
  instructions: You bill once a person approves.
  model: {provider: scripted, name: demo}
  toolPolicies:
    - {name: slow_export, effect: non_idempotent_write, requiresApproval: true}
  workers: {image: %s, engineVersion: %s, replicas: 1}
%s`, name, namespace, image, version.EngineVersion, engine)
}

// tenantsApart runs two teams on one Temporal namespace, each with an
// Agent of Flow type BillingAgent, and tries from team-b every way into
// team-a's sessions: naming the engine by a second address, and by
// another spelling of its address; reading, listing, sending to,
// approving and starting team-a's session IDs through the gateway, the
// kubectl plugin and the client; a rollout; a Deployment that forges
// team-a's claim label; and a credential pointed at an address team-b
// controls. Each is refused, no message names team-a's objects, and
// team-a's sessions and workers never change.
func tenantsApart(t *testing.T) {
	apply(t, team("team-a"))
	apply(t, team("team-b"))
	// A second address of the one engine, as a second Service or load
	// balancer would give it, which the administrator offers team-b.
	alias, err := testcluster.Forward(engine.FrontendHostPort())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = alias.Close() })
	apply(t, fmt.Sprintf(`apiVersion: agents.stepwise.run/v1alpha1
kind: ClusterEngine
metadata: {name: alias}
spec:
  address: %q
  namespace: default
  namespaceSelector: {matchLabels: {tenant: team-b}}
`, alias.Address()))
	apply(t, billingAgent("team-a", "billing", "", image("e2e-worker")))
	apply(t, billingAgent("team-b", "billing", "  engineRef: {name: alias}\n", image("e2e-worker")))
	running := func(a *agentsv1.Agent) bool {
		return meta.IsStatusConditionTrue(a.Status.Conditions, agentsv1.ConditionReady) && a.Status.ReadyReplicas == 1
	}
	teamA := waitAgentIn(t, "team-a", "billing", running)
	teamB := waitAgentIn(t, "team-b", "billing", running)
	// One engine by two addresses is one engine, and each team has its
	// own names on it.
	if teamA.Status.EngineID == "" || teamA.Status.EngineID != teamB.Status.EngineID {
		t.Fatalf("engine IDs %q and %q; want the one engine's", teamA.Status.EngineID, teamB.Status.EngineID)
	}
	for _, a := range []*agentsv1.Agent{teamA, teamB} {
		if want := tenancy.Tenant(a.Namespace, "BillingAgent").TaskQueue(); a.Status.TaskQueue != want {
			t.Fatalf("Agent %s/%s runs on task queue %q, want %s", a.Namespace, a.Name, a.Status.TaskQueue, want)
		}
	}
	// The engine by another spelling of its address is that engine too:
	// a second Agent of team-b with the Flow type conflicts with team-b's
	// own, and with nothing of team-a's.
	host, port, _ := net.SplitHostPort(engineForPods)
	respelled := net.JoinHostPort("::ffff:"+host, port)
	apply(t, billingAgent("team-b", "billing-respelled", fmt.Sprintf("  engine: {address: %q, namespace: default}\n", respelled), image("e2e-worker")))
	respelledAgent := waitAgentIn(t, "team-b", "billing-respelled", func(a *agentsv1.Agent) bool {
		c := meta.FindStatusCondition(a.Status.Conditions, agentsv1.ConditionReady)
		return c != nil && c.Reason == agentsv1.ReasonFlowTypeConflict
	})
	if respelledAgent.Status.ReadyReplicas != 0 {
		t.Fatalf("the conflicting Agent runs %d workers", respelledAgent.Status.ReadyReplicas)
	}

	seen := &messages{}
	base := "http://" + readyPodIP(t, operatorNamespace, "app.kubernetes.io/component=gateway") + ":8080"
	tokenA, tokenB := gatewayTokenIn(t, "team-a", "people"), gatewayTokenIn(t, "team-b", "people")
	sessionURL := func(ns, agent, id string) string {
		return base + "/api/v1/namespaces/" + ns + "/agents/" + agent + "/sessions/" + id
	}

	// team-a's sessions: one waits for approval, one has ended its turn.
	for _, id := range []string{"s-1", "a-only"} {
		var accepted gatewayapi.Accepted
		if status := gatewayCall(t, http.MethodPost, sessionURL("team-a", "billing", id), tokenA,
			gatewayapi.StartRequest{Message: `call slow_export {"seconds":1}`}, &accepted); status != http.StatusOK || !accepted.Accepted {
			t.Fatalf("team-a's start of %s answered %d %+v", id, status, accepted)
		}
	}
	interruptA := pendingInterrupt(t, sessionURL("team-a", "billing", "s-1"), tokenA)
	onlyA := pendingInterrupt(t, sessionURL("team-a", "billing", "a-only"), tokenA)

	t.Log("team-b tries team-a's sessions through the gateway")
	for _, c := range []struct {
		method, path string
		body         any
	}{
		{http.MethodGet, "/snapshot", nil},
		{http.MethodGet, "/messages", nil},
		{http.MethodPost, "/messages", gatewayapi.SendRequest{Text: "hello"}},
		{http.MethodPost, "/interrupts/" + onlyA + "/approve", nil},
		{http.MethodPost, "/steer", gatewayapi.SteerRequest{Text: "stop"}},
	} {
		var foreign, missing gatewayapi.ErrorBody
		status := gatewayCall(t, c.method, sessionURL("team-b", "billing", "a-only")+c.path, tokenB, c.body, &foreign)
		never := gatewayCall(t, c.method, sessionURL("team-b", "billing", "never-1")+c.path, tokenB, c.body, &missing)
		if status != http.StatusNotFound || never != http.StatusNotFound || foreign.Reason != missing.Reason ||
			foreign.Message != strings.ReplaceAll(missing.Message, "never-1", "a-only") {
			t.Errorf("%s %s on team-a's session answered %d %+v; on one that does not exist %d %+v: want the same not_found",
				c.method, c.path, status, foreign, never, missing)
		}
		seen.add("gateway "+c.method+" "+c.path, foreign.Message)
		// And the Agent of team-a itself is not team-b's to call.
		var refusal gatewayapi.ErrorBody
		if status := gatewayCall(t, c.method, sessionURL("team-a", "billing", "a-only")+c.path, tokenB, c.body, &refusal); status != http.StatusForbidden {
			t.Errorf("team-b calling team-a's Agent answered %d %+v, want 403", status, refusal)
		}
	}
	for _, path := range []string{"/api/v1/waiting", "/api/v1/namespaces/team-b/waiting"} {
		var listed gatewayapi.WaitingResponse
		if status := gatewayCall(t, http.MethodGet, base+path, tokenB, nil, &listed); status != http.StatusOK {
			t.Fatalf("team-b's %s answered %d", path, status)
		}
		for _, s := range listed.Sessions {
			if s.Namespace != "team-b" {
				t.Errorf("team-b's %s lists %+v", path, s)
			}
		}
		raw, _ := json.Marshal(listed)
		seen.add("gateway "+path, string(raw))
	}

	t.Log("team-b tries team-a's sessions through kubectl stepwise")
	plugin := pluginAs(t, base, tokenB, "team-b")
	for _, args := range [][]string{
		{"get", "billing", "a-only"},
		{"send", "billing", "a-only", "hello"},
		{"approve", "billing", "a-only", onlyA},
	} {
		status, out, errOut := plugin(args...)
		if status != 1 || !strings.Contains(errOut, "has no session a-only") {
			t.Errorf("kubectl stepwise %v as team-b = %d %q %q; want not found", args, status, out, errOut)
		}
		seen.add("plugin "+strings.Join(args, " "), out+errOut)
	}
	for _, args := range [][]string{{"waiting"}, {"waiting", "-A"}} {
		status, out, errOut := plugin(args...)
		if status != 0 || strings.Contains(out, "a-only") || strings.Contains(out, "s-1") {
			t.Errorf("kubectl stepwise %v as team-b = %d %q %q; want none of team-a's sessions", args, status, out, errOut)
		}
		seen.add("plugin "+strings.Join(args, " "), out+errOut)
	}

	t.Log("team-b tries team-a's sessions through the client, on the engine itself")
	ctx, cancel := context.WithTimeout(context.Background(), 2*wait)
	defer cancel()
	clientB := sessions.New(engine.Client(), sessions.AgentOf(teamB))
	if _, err := clientB.Describe(ctx, "a-only"); err == nil {
		t.Error("team-b's client found team-a's session a-only")
	} else {
		seen.add("client Describe", err.Error())
	}
	if ok, err := clientB.Approve(ctx, "a-only", onlyA); ok || err == nil {
		t.Errorf("team-b's client approved team-a's a-only: %v %v", ok, err)
	} else {
		seen.add("client Approve", err.Error())
	}
	if found, _, err := clientB.Waiting(ctx, sessions.WaitingQuery{}); err != nil || len(found) != 0 {
		t.Errorf("team-b's client lists %+v waiting, %v; want none", found, err)
	}

	t.Log("team-b starts session s-1, which team-a also has, as its own")
	var accepted gatewayapi.Accepted
	if status := gatewayCall(t, http.MethodPost, sessionURL("team-b", "billing", "s-1"), tokenB,
		gatewayapi.StartRequest{Message: `call slow_export {"seconds":1}`}, &accepted); status != http.StatusOK || !accepted.Accepted {
		t.Fatalf("team-b's start of s-1 answered %d %+v", status, accepted)
	}
	interruptB := pendingInterrupt(t, sessionURL("team-b", "billing", "s-1"), tokenB)
	if status := gatewayCall(t, http.MethodPost, sessionURL("team-b", "billing", "s-1")+"/interrupts/"+interruptB+"/approve", tokenB, nil, &accepted); status != http.StatusOK {
		t.Fatalf("team-b's approval of its s-1 answered %d", status)
	}
	clientA := sessions.New(engine.Client(), sessions.AgentOf(teamA))
	endOfTurn(t, ctx, clientB, "s-1", 1)
	snapA, err := clientA.Snapshot(ctx, "s-1")
	if err != nil || len(snapA.PendingInterrupts) != 1 || snapA.PendingInterrupts[0].ID != interruptA || countToolMessages(snapA, "slow_export") != 0 {
		t.Fatalf("team-a's s-1 after team-b's approval of its own: %+v, %v; want still waiting for team-a", snapA.PendingInterrupts, err)
	}

	t.Log("team-b rolls its workers to a new image; team-a's version stays current")
	podsA := podNamesIn(t, "team-a", "billing")
	deploymentA := tenancy.Tenant("team-a", "BillingAgent").WorkerDeployment()
	currentA := currentVersionOf(t, deploymentA)
	if currentA != teamA.Status.WorkerVersions[0].BuildID {
		t.Fatalf("team-a's current version is %q, want its %s", currentA, teamA.Status.WorkerVersions[0].BuildID)
	}
	retagged := image("e2e-worker") + "-team-b"
	if out, err := exec.CommandContext(ctx, "ctr", "--address", cluster.ContainerdAddress(), "--namespace", "k8s.io",
		"images", "tag", "--force", image("e2e-worker"), retagged).CombinedOutput(); err != nil {
		t.Fatalf("tagging the worker image as %s: %v\n%s", retagged, err, out)
	}
	kubectl(t, "patch", "agent", "billing", "--namespace", "team-b", "--type", "merge", "-p", fmt.Sprintf(`{"spec":{"workers":{"image":%q}}}`, retagged))
	rolledB := waitAgentIn(t, "team-b", "billing", func(a *agentsv1.Agent) bool {
		v := a.Status.WorkerVersions
		return len(v) == 1 && v[0].Image == retagged && v[0].State == agentsv1.WorkerVersionCurrent && v[0].ReadyReplicas == 1 &&
			meta.IsStatusConditionFalse(a.Status.Conditions, agentsv1.ConditionProgressing)
	})
	if got := currentVersionOf(t, deploymentA); got != currentA {
		t.Fatalf("team-b's rollout to %s changed team-a's current version from %s to %s", rolledB.Status.WorkerVersions[0].BuildID, currentA, got)
	}
	if got := podNamesIn(t, "team-a", "billing"); !sameSet(got, podsA) {
		t.Fatalf("team-b's rollout changed team-a's pods from %v to %v", podsA, got)
	}

	t.Log("team-b forges team-a's claim on a Deployment an older Agent of its own controls")
	forgedLabels := map[string]string{
		"app": "forged", flowclaim.LabelFlowClaim: flowclaim.Claim{EngineID: teamA.Status.EngineID, Names: tenancy.Tenant("team-a", "BillingAgent")}.Label(),
	}
	forged := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Namespace: "team-b", Name: "forged", Labels: forgedLabels,
			OwnerReferences: []metav1.OwnerReference{{APIVersion: agentsv1.GroupVersion.String(), Kind: "Agent",
				Name: teamB.Name, UID: teamB.UID, Controller: ptr.To(true)}}},
		Spec: appsv1.DeploymentSpec{Replicas: ptr.To(int32(0)), Selector: &metav1.LabelSelector{MatchLabels: forgedLabels},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: forgedLabels},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "worker", Image: image("pause")}}}}},
	}
	if err := kube.Create(ctx, forged); err != nil {
		t.Fatal(err)
	}
	// The operator reconciles team-a's Agent again when it scales: a claim
	// the forgery took would scale its workers to zero instead.
	kubectl(t, "scale", "agent", "billing", "--namespace", "team-a", "--replicas=2")
	waitAgentIn(t, "team-a", "billing", running2)
	if got := currentVersionOf(t, deploymentA); got != currentA {
		t.Fatalf("team-a's current version moved from %s to %s", currentA, got)
	}
	// team-a's sessions are untouched; its own approval still runs its call once.
	if status := gatewayCall(t, http.MethodPost, sessionURL("team-a", "billing", "s-1")+"/interrupts/"+interruptA+"/approve", tokenA, nil, &accepted); status != http.StatusOK {
		t.Fatalf("team-a's approval of its s-1 answered %d", status)
	}
	if snap := endOfTurn(t, ctx, clientA, "s-1", 1); countToolMessages(snap, "slow_export") != 1 {
		t.Fatalf("team-a's s-1 ran slow_export %d times, want once", countToolMessages(snap, "slow_export"))
	}

	t.Log("team-b points an engine credential it cannot read at an address it controls")
	var dials atomic.Int32
	listener, err := net.Listen("tcp", net.JoinHostPort(testcluster.GatewayIP, "0"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = listener.Close() })
	go func() {
		for {
			conn, err := listener.Accept()
			if err != nil {
				return
			}
			dials.Add(1)
			_ = conn.Close()
		}
	}()
	// The key is team-b's administrator's, in a Secret that names no
	// address it may be sent to.
	apply(t, `apiVersion: v1
kind: Secret
metadata: {name: engine-key, namespace: team-b}
stringData: {api-key: key-of-team-b-admin}
`)
	apply(t, billingAgent("team-b", "exfil", fmt.Sprintf(
		"  engine: {address: %q, namespace: default, tls: {}, apiKeySecretRef: {name: engine-key, key: api-key}}\n", listener.Addr().String()),
		image("e2e-worker")))
	refusedWith := func(reason string) func(*agentsv1.Agent) bool {
		return func(a *agentsv1.Agent) bool {
			c := meta.FindStatusCondition(a.Status.Conditions, agentsv1.ConditionReady)
			return c != nil && c.Status == metav1.ConditionFalse && c.Reason == reason
		}
	}
	exfil := waitAgentIn(t, "team-b", "exfil", refusedWith(agentsv1.ReasonEngineCredentialNotAllowed))
	for _, c := range exfil.Status.Conditions {
		seen.add("condition exfil "+c.Type, c.Message)
	}
	var refusal gatewayapi.ErrorBody
	if status := gatewayCall(t, http.MethodPost, sessionURL("team-b", "exfil", "x-1"), tokenB, gatewayapi.StartRequest{Message: "hi"}, &refusal); status != http.StatusServiceUnavailable {
		t.Errorf("a start on the refused Agent answered %d %+v, want 503", status, refusal)
	}
	seen.add("gateway exfil", refusal.Message)

	// Without the administrator's leave, no namespace names an engine at all.
	t.Log("the administrator turns namespace engines off")
	helm(t, "upgrade", "stepwise", thisChart, "--namespace", operatorNamespace, "--reuse-values",
		"--set", "tenancy.namespaceEngines=false", "--wait", "--timeout", wait.String())
	exfil = waitAgentIn(t, "team-b", "exfil", refusedWith(agentsv1.ReasonEngineNotAllowed))
	respelledAgent = waitAgentIn(t, "team-b", "billing-respelled", refusedWith(agentsv1.ReasonEngineNotAllowed))
	waitAgentIn(t, "team-a", "billing", running2)
	if n := dials.Load(); n != 0 {
		t.Fatalf("the address team-b controls was dialled %d times", n)
	}

	// No answer team-b got names team-a's objects.
	for _, a := range []*agentsv1.Agent{waitAgentIn(t, "team-b", "billing", running), respelledAgent, exfil} {
		for _, c := range a.Status.Conditions {
			seen.add("condition "+a.Name+" "+c.Type, c.Message)
		}
	}
	events, err := core.CoreV1().Events("team-b").List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range events.Items {
		seen.add("event "+e.InvolvedObject.Name+" "+e.Reason, e.Message)
	}
	seen.check(t, "team-a")
	if err := kube.Delete(ctx, forged); err != nil {
		t.Fatal(err)
	}
}

// running2 is an Agent Ready with two workers.
func running2(a *agentsv1.Agent) bool {
	return meta.IsStatusConditionTrue(a.Status.Conditions, agentsv1.ConditionReady) && a.Status.ReadyReplicas == 2
}

// messages collects what a tenant was told, to check none of it names
// another tenant's objects.
type messages struct{ said []string }

func (m *messages) add(where, text string) { m.said = append(m.said, where+": "+text) }

func (m *messages) check(t *testing.T, never string) {
	t.Helper()
	for _, s := range m.said {
		if strings.Contains(s, never) {
			t.Errorf("team-b was told %q, which names %s", s, never)
		}
	}
	t.Logf("checked %d answers team-b got for %q", len(m.said), never)
}

// pendingInterrupt waits for a session to wait for approval through the
// gateway, and returns the interrupt.
func pendingInterrupt(t *testing.T, session, token string) string {
	t.Helper()
	var id string
	waitFor(t, "the session to wait for approval through the gateway", func() (bool, error) {
		var snap gatewayapi.SnapshotResponse
		if gatewayCall(t, http.MethodGet, session+"/snapshot", token, nil, &snap) != http.StatusOK || len(snap.Snapshot.PendingInterrupts) != 1 {
			return false, nil
		}
		id = snap.Snapshot.PendingInterrupts[0].ID
		return true, nil
	})
	return id
}
