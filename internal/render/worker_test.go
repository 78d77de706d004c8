package render

import (
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"

	agentsv1 "github.com/stepwise-run/stepwise/api/v1alpha1"
	"github.com/stepwise-run/stepwise/internal/version"
)

// render resolves and renders in one step, failing the test on a blocker.
func render(t *testing.T, agent *agentsv1.Agent, obs Observed) *WorkerObjects {
	t.Helper()
	if obs.ToolSources == nil {
		obs = observed()
	}
	resolved, blocker := Resolve(agent, obs, testDefaults)
	if blocker != nil {
		t.Fatalf("Resolve() blocked: %v", blocker)
	}
	w, err := Worker(resolved)
	if err != nil {
		t.Fatalf("Worker() = %v", err)
	}
	return w
}

func envNames(envs []corev1ac.EnvVarApplyConfiguration) []string {
	var out []string
	for _, e := range envs {
		out = append(out, *e.Name)
	}
	return out
}

func TestRenderWorkerRefusesAnOversizedConfig(t *testing.T) {
	agent := testAgent(func(a *agentsv1.Agent) { a.Spec.Instructions = strings.Repeat("x", maxConfigBytes) })
	resolved, blocker := Resolve(agent, observed(), testDefaults)
	if blocker != nil {
		t.Fatal(blocker)
	}
	_, err := Worker(resolved)
	var b *Blocker
	if !errors.As(err, &b) || b.Reason != agentsv1.ReasonInvalidSpec || !strings.Contains(b.Message, "spec.instructions") {
		t.Fatalf("Worker() = %v, want an InvalidSpec blocker naming spec.instructions", err)
	}
}

func TestGraph(t *testing.T) {
	g, err := Graph(testAgent(), "0.1.0")
	if err != nil {
		t.Fatal(err)
	}
	var doc map[string]any
	if err := json.Unmarshal([]byte(g.ConfigMap.Data["graph.json"]), &doc); err != nil {
		t.Fatal(err)
	}
	if doc["flowType"] != "SupportAgent" || doc["engineVersion"] != "0.1.0" {
		t.Errorf("graph names %v %v", doc["flowType"], doc["engineVersion"])
	}
	if g.ConfigMap.Annotations[AnnotationGraphDigest] != g.Digest || *g.ConfigMap.Name != "support-session-graph" {
		t.Errorf("graph ConfigMap %s digest %s", *g.ConfigMap.Name, g.ConfigMap.Annotations[AnnotationGraphDigest])
	}
}

// TestGraphIsTheWorkersEngineVersions: the operator publishes the graph of
// the engine its workers run, which may be older than its own.
func TestGraphIsTheWorkersEngineVersions(t *testing.T) {
	steps := func(engineVersion string) []string {
		g, err := Graph(testAgent(), engineVersion)
		if err != nil {
			t.Fatal(err)
		}
		var doc struct {
			Steps []struct{ Name string } `json:"steps"`
		}
		if err := json.Unmarshal([]byte(g.ConfigMap.Data["graph.json"]), &doc); err != nil {
			t.Fatal(err)
		}
		var names []string
		for _, s := range doc.Steps {
			names = append(names, s.Name)
		}
		return names
	}
	if old := steps("0.1.0"); slices.Contains(old, "ApplyTurnControl") || slices.Contains(old, "PollToolTask") {
		t.Errorf("the 0.1.0 graph has Steps 0.2.0 brought: %v", old)
	}
	if current := steps(version.EngineVersion); !slices.Contains(current, "ApplyTurnControl") || slices.Contains(current, "FinishTurnCancellation") {
		t.Errorf("the current graph's Steps = %v", current)
	}
	if _, err := Graph(testAgent(), "9.0.0"); err == nil {
		t.Error("Graph published a graph for an engine version this build does not know")
	}
}

// A stopping worker waits as long as the longest Step attempt the Agent
// allows, capped at an hour, and the pod's grace period leaves it a margin.
func TestStopTimeoutFollowsTheLongestStepTheAgentAllows(t *testing.T) {
	httpSource := func(timeout time.Duration) *agentsv1.ToolSource {
		return readyToolSource("web", func(ts *agentsv1.ToolSource) {
			ts.Spec.MCP = agentsv1.MCPServer{StreamableHTTP: &agentsv1.MCPStreamableHTTP{URL: "https://mcp.example.com/mcp"}}
			ts.Spec.RequestTimeout = &metav1.Duration{Duration: timeout}
		})
	}
	stdioSource := func(request, taskWait time.Duration) *agentsv1.ToolSource {
		return readyToolSource("files", func(ts *agentsv1.ToolSource) {
			ts.Spec.RequestTimeout = &metav1.Duration{Duration: request}
			ts.Spec.TaskWaitTimeout = &metav1.Duration{Duration: taskWait}
		})
	}
	withSources := func(names ...string) func(*agentsv1.Agent) {
		return func(a *agentsv1.Agent) {
			for _, n := range names {
				a.Spec.ToolSources = append(a.Spec.ToolSources, agentsv1.LocalObjectReference{Name: n})
			}
		}
	}
	for _, c := range []struct {
		name    string
		agent   *agentsv1.Agent
		sources []any
		want    time.Duration
	}{
		{"the stock worker: a model call", testAgent(), nil, 15 * time.Minute},
		{"an MCP request shorter than a model call", testAgent(withSources("web")), []any{httpSource(time.Minute)}, 15 * time.Minute},
		{"a long MCP request", testAgent(withSources("web")), []any{httpSource(40 * time.Minute)}, 40 * time.Minute},
		{"a stdio request and its task wait", testAgent(withSources("files")), []any{stdioSource(10*time.Minute, 20*time.Minute)}, 30 * time.Minute},
		{"capped at an hour", testAgent(withSources("files")), []any{stdioSource(time.Hour, 24*time.Hour)}, time.Hour},
		{"a team's own image may hold hour-long function tools", testAgent(func(a *agentsv1.Agent) {
			a.Spec.Workers = &agentsv1.WorkersSpec{Image: "team/worker:2", EngineVersion: version.EngineVersion}
		}), nil, time.Hour},
	} {
		t.Run(c.name, func(t *testing.T) {
			w := render(t, c.agent, observed(c.sources...))
			pod := w.Deployment.Spec.Template.Spec
			if got := *pod.TerminationGracePeriodSeconds; got != int64((c.want+stopMargin)/time.Second) {
				t.Errorf("grace period = %ds, want %s and the margin", got, c.want)
			}
			if args := pod.Containers[0].Args; !slices.Contains(args, "--stop-timeout="+c.want.String()) {
				t.Errorf("worker args = %v, want --stop-timeout=%s", args, c.want)
			}
		})
	}
}

func TestRenderEventHubToken(t *testing.T) {
	agent := testAgent()
	renderWith := func(hub *EventHub, token string) (*WorkerObjects, error) {
		defaults := testDefaults
		defaults.EventHub = hub
		resolved, blocker := Resolve(agent, observed(), defaults)
		if blocker != nil {
			t.Fatalf("Resolve() blocked: %v", blocker)
		}
		resolved.EventHubToken = token
		return Worker(resolved)
	}
	const url = "http://hub.stepwise-system.svc:8090"
	hub := &EventHub{URL: url}
	withHub, err := renderWith(hub, "the first token")
	if err != nil {
		t.Fatal(err)
	}
	renewed, err := renderWith(hub, "the renewed token")
	if err != nil {
		t.Fatal(err)
	}
	without, err := renderWith(nil, "")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := renderWith(hub, ""); err == nil {
		t.Error("an Agent with an event hub and no signed token rendered")
	}

	if without.EventHubSecret != nil || without.Config.EventHub != nil {
		t.Error("an operator without an event hub rendered a token")
	}
	cfg := withHub.Config.EventHub
	if cfg == nil || cfg.URL != url || cfg.Token.Secret != EventHubSecretName(agent.Name) || cfg.Token.Key != EventHubTokenKey {
		t.Fatalf("config eventHub = %+v", cfg)
	}
	if got := string(withHub.EventHubSecret.Data[EventHubTokenKey]); got != "the first token" {
		t.Errorf("the Secret holds %q, not the Agent's publish token", got)
	}
	if strings.Contains(string(withHub.ConfigDocument), "the first token") {
		t.Error("the config document holds the token")
	}
	if !slices.Contains(envNames(withHub.Deployment.Spec.Template.Spec.Containers[0].Env), cfg.Token.Env) {
		t.Errorf("the worker gets no %s", cfg.Token.Env)
	}
	if renewed.ConfigDigest == withHub.ConfigDigest {
		t.Error("a renewed token did not change the digest, so workers would keep the old token")
	}
}
