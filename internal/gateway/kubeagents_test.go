package gateway_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	agentsv1 "github.com/stepwise-run/stepwise/api/v1alpha1"
	"github.com/stepwise-run/stepwise/internal/engineadmin"
	"github.com/stepwise-run/stepwise/internal/enginetest"
	"github.com/stepwise-run/stepwise/internal/flowclaim"
	"github.com/stepwise-run/stepwise/internal/gateway"
	"github.com/stepwise-run/stepwise/internal/render"
	"github.com/stepwise-run/stepwise/internal/tenancy"
	sessions "github.com/stepwise-run/stepwise/pkg/client"
)

func TestKubernetesAgentsServeOnlyTheAgentThatHoldsItsNames(t *testing.T) {
	k := startKube(t)
	server := enginetest.StartDevServer(t)
	ctx := t.Context()
	for _, ns := range []string{"team-a", "team-b", "team-c"} {
		labels := map[string]string{"tenant": "yes"}
		if ns == "team-c" {
			labels = nil
		}
		must(t, k.admin.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns, Labels: labels}}))
	}
	engines := engineadmin.New(logr.Discard())
	t.Cleanup(engines.Close)
	// The engine's own identity, as the operator records it.
	id, err := engines.Identity(ctx, engineadmin.Connection{Address: server.FrontendHostPort(), Namespace: "default"})
	if err != nil {
		t.Fatal(err)
	}
	ce := &agentsv1.ClusterEngine{ObjectMeta: metav1.ObjectMeta{Name: "dev"}, Spec: agentsv1.ClusterEngineSpec{
		Address: server.FrontendHostPort(), Namespace: "default",
		NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"tenant": "yes"}}}}
	must(t, k.admin.Create(ctx, ce))
	ce.Status = agentsv1.ClusterEngineStatus{ObservedGeneration: ce.Generation, NamespaceID: id.NamespaceID,
		Conditions: []metav1.Condition{{Type: agentsv1.ConditionReady, Status: metav1.ConditionTrue, Reason: agentsv1.ReasonReconciled,
			LastTransitionTime: metav1.Now()}}}
	must(t, k.admin.Status().Update(ctx, ce))

	// Agents as the operator applied them: status names their engine and
	// task queue, and a worker Deployment each controls carries its claim.
	isController := true
	newAgent := func(ns, name string, workers bool) *agentsv1.Agent {
		a := &agentsv1.Agent{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
			Spec: agentsv1.AgentSpec{FlowType: "SupportAgent", Model: agentsv1.ModelSpec{Provider: agentsv1.ModelProviderScripted, Name: "demo"}}}
		must(t, k.admin.Create(ctx, a))
		a.Status.EngineID, a.Status.TaskQueue = id.NamespaceID, tenancy.Tenant(ns, "SupportAgent").TaskQueue()
		must(t, k.admin.Status().Update(ctx, a))
		if workers {
			claim := flowclaim.Claim{EngineID: id.NamespaceID, Names: tenancy.Tenant(ns, "SupportAgent")}.Label()
			labels := map[string]string{"app": name, flowclaim.LabelFlowClaim: claim}
			must(t, k.admin.Create(ctx, &appsv1.Deployment{
				ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name + "-worker", Labels: labels,
					OwnerReferences: []metav1.OwnerReference{{APIVersion: agentsv1.GroupVersion.String(), Kind: "Agent",
						Name: a.Name, UID: a.UID, Controller: &isController}}},
				Spec: appsv1.DeploymentSpec{Selector: &metav1.LabelSelector{MatchLabels: labels},
					Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels},
						Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "worker", Image: "worker"}}}}},
			}))
		}
		return a
	}
	agents := &gateway.KubernetesAgents{Reader: k.gateway, Defaults: render.Defaults{DefaultEngine: "dev"},
		OperatorNamespace: "stepwise-system", Engines: engines}
	target := func(ns, name string) (gateway.Target, error) {
		tg, release, err := agents.Target(ctx, gateway.AgentRef{Namespace: ns, Name: name})
		if err == nil {
			release()
		}
		return tg, err
	}

	if _, err := target("team-a", "missing"); !errors.Is(err, gateway.ErrAgentNotFound) {
		t.Fatalf("an Agent that does not exist: %v, want ErrAgentNotFound", err)
	}
	// team-b's Agent is older than team-a's, with a Deployment that forges
	// team-a's claim: it takes nothing from team-a.
	teamB := newAgent("team-b", "support", false)
	forged := map[string]string{"app": "forged", flowclaim.LabelFlowClaim: flowclaim.Claim{EngineID: id.NamespaceID, Names: tenancy.Tenant("team-a", "SupportAgent")}.Label()}
	must(t, k.admin.Create(ctx, &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Namespace: "team-b", Name: "forged", Labels: forged,
			OwnerReferences: []metav1.OwnerReference{{APIVersion: agentsv1.GroupVersion.String(), Kind: "Agent",
				Name: teamB.Name, UID: teamB.UID, Controller: &isController}}},
		Spec: appsv1.DeploymentSpec{Selector: &metav1.LabelSelector{MatchLabels: forged}, Replicas: new(int32(0)),
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: forged},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "worker", Image: "worker"}}}}},
	}))
	support := newAgent("team-a", "support", true)
	newAgent("team-a", "copycat", false)
	waitUntil(t, "the gateway's cache sees the worker Deployments", func() bool {
		_, err := target("team-a", "support")
		return err == nil
	})
	tg, err := target("team-a", "support")
	want := sessionsAgent(support)
	if err != nil || tg.Agent != want {
		t.Fatalf("the holder: %+v, %v; want %+v", tg.Agent, err, want)
	}
	if _, err := target("team-a", "copycat"); err == nil || !strings.Contains(err.Error(), "another Agent holds") {
		t.Fatalf("an Agent naming a Flow type another Agent of its namespace holds: %v", err)
	}
	// team-b's Agent of the same Flow type holds nothing of its own yet,
	// and is never given team-a's.
	if _, err := target("team-b", "support"); err == nil || !strings.Contains(err.Error(), "runs no workers yet") {
		t.Fatalf("team-b's Agent: %v, want not served", err)
	}
	// An Agent whose workers, of engine 0.7.0, keep the shared names holds
	// their claim, and is served on them.
	legacy := &agentsv1.Agent{ObjectMeta: metav1.ObjectMeta{Namespace: "team-b", Name: "legacy"},
		Spec: agentsv1.AgentSpec{FlowType: "LegacyAgent", Model: agentsv1.ModelSpec{Provider: agentsv1.ModelProviderScripted, Name: "demo"}}}
	must(t, k.admin.Create(ctx, legacy))
	shared := tenancy.Shared("LegacyAgent")
	legacy.Status.EngineID, legacy.Status.TaskQueue = id.NamespaceID, shared.TaskQueue()
	must(t, k.admin.Status().Update(ctx, legacy))
	legacyLabels := map[string]string{"app": "legacy", flowclaim.LabelFlowClaim: flowclaim.Claim{EngineID: id.NamespaceID, Names: shared}.Label()}
	must(t, k.admin.Create(ctx, &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Namespace: "team-b", Name: "legacy-worker", Labels: legacyLabels,
			OwnerReferences: []metav1.OwnerReference{{APIVersion: agentsv1.GroupVersion.String(), Kind: "Agent",
				Name: legacy.Name, UID: legacy.UID, Controller: &isController}}},
		Spec: appsv1.DeploymentSpec{Selector: &metav1.LabelSelector{MatchLabels: legacyLabels},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: legacyLabels},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "worker", Image: "worker"}}}}},
	}))
	waitUntil(t, "the gateway's cache sees the shared names' workers", func() bool {
		tg, err := target("team-b", "legacy")
		return err == nil && tg.Agent.TaskQueue == shared.TaskQueue()
	})

	// A namespace the ClusterEngine does not select is not served.
	newAgent("team-c", "support", true)
	if _, err := target("team-c", "support"); err == nil || !strings.Contains(err.Error(), `does not let namespace "team-c" use it`) {
		t.Fatalf("an Agent of a namespace the ClusterEngine leaves out: %v", err)
	}
	// An engine of the namespace's own, where the gateway allows none.
	own := newAgent("team-a", "own", false)
	own.Spec.Engine = &agentsv1.EngineSpec{Address: server.FrontendHostPort(), Namespace: "default"}
	must(t, k.admin.Update(ctx, own))
	waitUntil(t, "the gateway's cache sees the Agent's engine", func() bool {
		_, err := target("team-a", "own")
		return err != nil && strings.Contains(err.Error(), "--allow-namespace-engines")
	})
}

// sessionsAgent is an Agent as the gateway addresses its sessions.
func sessionsAgent(a *agentsv1.Agent) sessions.Agent {
	return sessions.Agent{Namespace: a.Namespace, Name: a.Name, UID: string(a.UID), FlowType: a.Spec.FlowType,
		TaskQueue: tenancy.Tenant(a.Namespace, a.Spec.FlowType).TaskQueue()}
}

func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("waiting for %s: timed out", what)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func TestKubernetesAgentsServeOnlyTheGraphTheAgentOwns(t *testing.T) {
	k := startKube(t)
	ctx := t.Context()
	must(t, k.admin.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "team-a"}}))
	support := &agentsv1.Agent{ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "support"},
		Spec: agentsv1.AgentSpec{FlowType: "SupportAgent", Model: agentsv1.ModelSpec{Provider: agentsv1.ModelProviderScripted, Name: "demo"}}}
	must(t, k.admin.Create(ctx, support))
	agents := &gateway.KubernetesAgents{Reader: k.gateway}
	ref := gateway.AgentRef{Namespace: "team-a", Name: "support"}
	waitUntil(t, "the gateway's cache sees the Agent", func() bool {
		_, err := agents.Graph(ctx, ref)
		return !errors.Is(err, gateway.ErrAgentNotFound)
	})
	if _, err := agents.Graph(ctx, ref); !errors.Is(err, gateway.ErrGraphNotPublished) {
		t.Fatalf("an Agent with no graph: %v, want ErrGraphNotPublished", err)
	}
	// A ConfigMap of the graph's name that someone else wrote is not the
	// operator's graph.
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: render.GraphConfigMapName("support")},
		Data: map[string]string{render.GraphFileName: `{"flowType":"forged"}`}}
	must(t, k.admin.Create(ctx, cm))
	if _, err := agents.Graph(ctx, ref); !errors.Is(err, gateway.ErrGraphNotPublished) {
		t.Fatalf("a graph ConfigMap the Agent does not own: %v, want ErrGraphNotPublished", err)
	}
	isController := true
	cm.OwnerReferences = []metav1.OwnerReference{{APIVersion: agentsv1.GroupVersion.String(), Kind: "Agent",
		Name: support.Name, UID: support.UID, Controller: &isController}}
	cm.Data[render.GraphFileName] = `{"flowType":"SupportAgent"}`
	must(t, k.admin.Update(ctx, cm))
	doc, err := agents.Graph(ctx, ref)
	if err != nil || string(doc) != `{"flowType":"SupportAgent"}` {
		t.Fatalf("the published graph = %s, %v", doc, err)
	}
	if _, err := agents.Graph(ctx, gateway.AgentRef{Namespace: "team-a", Name: "missing"}); !errors.Is(err, gateway.ErrAgentNotFound) {
		t.Fatalf("an Agent that does not exist: %v, want ErrAgentNotFound", err)
	}
}
