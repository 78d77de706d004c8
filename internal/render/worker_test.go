package render

import (
	"encoding/json"
	"encoding/pem"
	"errors"
	"maps"
	"net/http"
	"net/http/httptest"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"

	agentsv1 "github.com/stepwise-run/stepwise/api/v1alpha1"
	"github.com/stepwise-run/stepwise/internal/tenancy"
	"github.com/stepwise-run/stepwise/internal/version"
	"github.com/stepwise-run/stepwise/pkg/workerconfig"
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

func TestRenderWorkerConfig(t *testing.T) {
	agent := testAgent(withModelKey("openai", "api-key"), withToolSources("files", "tickets"), withMediaStoreRef("media"),
		func(a *agentsv1.Agent) {
			a.Spec.Instructions = "Help <customers> & staff."
			a.Spec.BuiltInTools = []agentsv1.BuiltInTool{agentsv1.BuiltInToolWriteTodos, agentsv1.BuiltInToolAskUser}
			a.Spec.PlanMode = &agentsv1.PlanModeSpec{Enabled: true}
			a.Spec.ToolPolicies = []agentsv1.ToolPolicy{{Name: "tickets__close", Effect: agentsv1.ToolEffectNonIdempotentWrite}}
			a.Spec.Compaction = &agentsv1.CompactionSpec{ContextWindowTokens: 200_000}
			a.Spec.Limits = &agentsv1.LimitsSpec{InterruptDeadline: &metav1.Duration{Duration: time.Hour},
				EventStreamCapacity: new(resource.MustParse("1Mi"))}
			a.Spec.Workers = &agentsv1.WorkersSpec{TaskSlots: 40}
			a.Spec.ModelChoices = []agentsv1.ModelChoice{{Choice: "claude", Model: agentsv1.ModelSpec{
				Provider: agentsv1.ModelProviderAnthropic, Name: "claude-x",
				APIKeySecretRef: &agentsv1.SecretKeyReference{Name: "anthropic", Key: "key"},
				Settings:        &agentsv1.ModelSettings{ReasoningEffort: "high"},
			}}}
			a.Spec.SpendLimit = &agentsv1.SpendLimitSpec{
				Agent:   &agentsv1.AgentBudget{Cost: new("2.5")},
				Session: &agentsv1.SessionBudget{Tokens: 50_000},
				Prices: []agentsv1.ModelPrice{
					{Model: "gpt-5-mini", InputPerMillion: "0.25", OutputPerMillion: "2"},
					{Model: "claude-x", InputPerMillion: "3", CachedInputPerMillion: new("0.3"), OutputPerMillion: "15"},
				},
			}
		})
	tickets := readyToolSource("tickets", func(ts *agentsv1.ToolSource) {
		ts.Spec.SourceName = "crm"
		ts.Spec.TrustToolAnnotations = new(false)
		ts.Spec.MCP = agentsv1.MCPServer{StreamableHTTP: &agentsv1.MCPStreamableHTTP{URL: "https://crm/mcp",
			Headers: []agentsv1.HTTPHeader{
				{Name: "X-Team", Value: new("support")},
				{Name: "Authorization", ValueFrom: &agentsv1.SecretValueSource{SecretKeyRef: agentsv1.SecretKeyReference{Name: "crm", Key: "token"}}},
			}}}
	})
	w := render(t, agent, observed(readyToolSource("files"), tickets, readyMediaStore("media"),
		secret("openai", map[string]string{"api-key": "sk-live"}), secret("crm", map[string]string{"token": "Bearer t"}),
		secret("anthropic", map[string]string{"key": "sk-ant"})))

	if doc := string(w.ConfigDocument); strings.Contains(doc, "sk-live") || strings.Contains(doc, "Bearer t") || strings.Contains(doc, "sk-ant") {
		t.Fatal("the config document holds a Secret value")
	}
	cfg, err := workerconfig.Decode(w.ConfigDocument)
	if err != nil {
		t.Fatalf("Decode(rendered) = %v", err)
	}
	checks := []struct {
		name      string
		got, want any
	}{
		{"flow type", cfg.FlowType, "SupportAgent"},
		{"task queue of the Agent's own names", cfg.Engine.TaskQueue, "stepwise/team/SupportAgent"},
		{"no shared task queue", cfg.Engine.SharedTaskQueue, ""},
		{"the Agent's UID", cfg.Agent.UID, "uid-1"},
		{"engine", cfg.Engine.Address + " " + cfg.Engine.Namespace, "temporal:7233 default"},
		{"engine version", cfg.EngineVersion, version.EngineVersion},
		{"task slots", cfg.TaskSlots, int32(40)},
		{"instructions kept as written", cfg.Definition.Instructions, "Help <customers> & staff."},
		{"built-in tools in name order", strings.Join(cfg.Definition.BuiltInTools, ","), "ask_user,write_todos"},
		{"plan mode", cfg.Definition.PlanMode.PlanningToolChoice, "auto"},
		{"default effect", cfg.Definition.DefaultToolEffect, "unclassified"},
		{"compaction defaults", [3]float64{cfg.Definition.Compaction.TriggerRatio, cfg.Definition.Compaction.KeepRatio,
			float64(cfg.Definition.Compaction.RetainedMessageLimit)}, [3]float64{0.85, 0.3, 1000}},
		{"interrupt deadline", cfg.Definition.Limits.InterruptDeadline.Duration, time.Hour},
		{"max durable wait default", cfg.Definition.Limits.MaxDurableWait.Duration, 365 * 24 * time.Hour},
		{"event stream bytes", cfg.Definition.Limits.EventStreamCapacityBytes, int64(1 << 20)},
		{"model calls default", cfg.Definition.Limits.MaxModelCallsPerTurn, int32(100)},
		{"source order and names", cfg.ToolSources[0].SourceName + "," + cfg.ToolSources[1].SourceName, "files,crm"},
		{"annotation trust", cfg.ToolSources[1].TrustToolAnnotations, false},
		// A server's hints could skip an approval: unset, they are not trusted.
		{"no annotation trust by default", cfg.ToolSources[0].TrustToolAnnotations, false},
		{"listing TTL default", cfg.ToolSources[0].ListingTTL.Duration, 5 * time.Minute},
		{"inline header", cfg.ToolSources[1].StreamableHTTP.Headers[0].Value, "support"},
		{"secret header by env", cfg.ToolSources[1].StreamableHTTP.Headers[1].FromEnv.Env, SecretEnvName("crm", "token")},
		{"model key by env", cfg.Definition.Model.APIKey.Env, SecretEnvName("openai", "api-key")},
		{"model choice", cfg.Definition.ModelChoices[0].Choice + " " + cfg.Definition.ModelChoices[0].Model.Provider + " " +
			cfg.Definition.ModelChoices[0].Model.Name + " " + cfg.Definition.ModelChoices[0].Model.ReasoningEffort, "claude anthropic claude-x high"},
		{"model choice key by env", cfg.Definition.ModelChoices[0].Model.APIKey.Env, SecretEnvName("anthropic", "key")},
		{"store URI", cfg.MediaStore.StoreURI, "file:///media"},
		{"health on the pod network", cfg.HealthAddress, ":8080"},
		{"events on loopback only", cfg.DebugAddress, "127.0.0.1:8081"},
		{"spend window default", cfg.SpendLimit.Window.Duration, 24 * time.Hour},
		{"agent cost in millionths", cfg.SpendLimit.AgentMicroCost, int64(2_500_000)},
		{"no agent token budget", cfg.SpendLimit.AgentTokens, int64(0)},
		{"session tokens", cfg.SpendLimit.SessionTokens, int64(50_000)},
		{"price in millionths", cfg.SpendLimit.Prices[1], workerconfig.ModelPrice{Model: "claude-x",
			InputMicroPerMillion: 3_000_000, CachedInputMicroPerMillion: 300_000, OutputMicroPerMillion: 15_000_000}},
	}
	for _, c := range checks {
		if c.got != c.want {
			t.Errorf("%s = %v, want %v", c.name, c.got, c.want)
		}
	}

	// The pod name comes first, then the Secret variables in name order.
	secretEnv := []string{SecretEnvName("crm", "token"), SecretEnvName("openai", "api-key"), SecretEnvName("anthropic", "key")}
	slices.Sort(secretEnv)
	wantEnv := append([]string{EnvPodName}, secretEnv...)
	if env := envNames(w.Deployment.Spec.Template.Spec.Containers[0].Env); !slices.Equal(env, wantEnv) {
		t.Errorf("container env = %v, want %v", env, wantEnv)
	}
}

func TestRenderWorkerDeployment(t *testing.T) {
	tests := []struct {
		name  string
		agent *agentsv1.Agent
		obs   Observed
		check func(t *testing.T, w *WorkerObjects)
	}{
		{
			name:  "defaults: one replica, the stock image, the operator's ServiceAccount",
			agent: testAgent(),
			check: func(t *testing.T, w *WorkerObjects) {
				spec := w.Deployment.Spec
				if *spec.Replicas != 1 {
					t.Errorf("replicas = %d, want 1", *spec.Replicas)
				}
				if got := *spec.Template.Spec.Containers[0].Image; got != "worker:stock" {
					t.Errorf("image = %s, want the stock image", got)
				}
				if w.ServiceAccount == nil || *spec.Template.Spec.ServiceAccountName != "support-worker" {
					t.Errorf("service account = %v, want support-worker created", spec.Template.Spec.ServiceAccountName)
				}
				if got := spec.Template.Labels[LabelEngineVersion]; got != version.EngineVersion {
					t.Errorf("engine version label = %q", got)
				}
				if w.Deployment.Labels[LabelFlowClaim] != FlowClaim(testEngineID, tenancy.Tenant("team", "SupportAgent")) {
					t.Errorf("Deployment labels = %v, want the claim of the Agent's own names", w.Deployment.Labels)
				}
				if _, ok := w.Deployment.Labels[LabelSharedFlowClaim]; ok || w.EngineSecret != nil {
					t.Errorf("Deployment labels = %v, engine Secret %v; want no shared claim and no credentials to carry", w.Deployment.Labels, w.EngineSecret)
				}
				if got := *w.ConfigMap.Name; got != ConfigMapName("support", w.ConfigDigest) || !*w.ConfigMap.Immutable {
					t.Errorf("config ConfigMap %s, want an immutable one named by the digest", got)
				}
				if ConfigMapOf(applyConfig[corev1.PodTemplateSpec](w.Deployment.Spec.Template)) != *w.ConfigMap.Name {
					t.Error("the pod template does not mount the config ConfigMap")
				}
				if spec.Selector.MatchLabels[LabelAgent] != "support" || len(spec.Selector.MatchLabels) != 2 {
					t.Errorf("selector = %v, want the two stable labels", spec.Selector.MatchLabels)
				}
				if got := spec.Template.Annotations[AnnotationConfigDigest]; got != w.ConfigDigest {
					t.Errorf("pod digest = %s, want %s", got, w.ConfigDigest)
				}
			},
		},
		{
			name: "an Agent's own image, ServiceAccount, scheduling and env, of an engine version whose sessions an earlier operator ran under the shared names",
			agent: testAgent(func(a *agentsv1.Agent) {
				a.Status.TaskQueue = "stepwise/SupportAgent"
				a.Spec.Workers = &agentsv1.WorkersSpec{
					Image: "team/worker:2", EngineVersion: "0.2.0", Replicas: new(int32(3)),
					ServiceAccountName: "cloud", NodeSelector: map[string]string{"pool": "agents"},
					Tolerations: []corev1.Toleration{{Key: "agents", Operator: corev1.TolerationOpExists}},
					Env:         []corev1.EnvVar{{Name: "LOG_LEVEL", Value: "debug"}},
					Resources:   corev1.ResourceRequirements{Limits: corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("1Gi")}},
				}
			}),
			check: func(t *testing.T, w *WorkerObjects) {
				pod := w.Deployment.Spec.Template.Spec
				if w.ServiceAccount != nil || *pod.ServiceAccountName != "cloud" {
					t.Errorf("service account: created %v, used %s; want none created and cloud used", w.ServiceAccount != nil, *pod.ServiceAccountName)
				}
				c := pod.Containers[0]
				if *c.Image != "team/worker:2" || w.Deployment.Spec.Template.Labels[LabelEngineVersion] != "0.2.0" {
					t.Errorf("image %s version %s", *c.Image, w.Deployment.Spec.Template.Labels[LabelEngineVersion])
				}
				if *w.Deployment.Spec.Replicas != 3 || pod.NodeSelector["pool"] != "agents" || *pod.Tolerations[0].Key != "agents" {
					t.Error("replicas, node selector or tolerations not passed through")
				}
				env := envNames(c.Env)
				if env[len(env)-1] != "LOG_LEVEL" {
					t.Errorf("env = %v, want the Agent's env last", env)
				}
				if got := (*c.Resources.Limits)[corev1.ResourceMemory]; got.String() != "1Gi" {
					t.Errorf("memory limit = %s", got.String())
				}
			},
		},
		{
			name: "values the API server defaults or rounds are rendered as it stores them",
			agent: testAgent(func(a *agentsv1.Agent) {
				a.Spec.Workers = &agentsv1.WorkersSpec{
					Env: []corev1.EnvVar{
						{Name: "NODE", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "spec.nodeName"}}},
						{Name: "TOKEN", ValueFrom: &corev1.EnvVarSource{FileKeyRef: &corev1.FileKeySelector{VolumeName: "tmp", Path: "env", Key: "TOKEN"}}},
					},
					Resources: corev1.ResourceRequirements{
						Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("100u")},
						Limits:   corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("0.5")},
					},
				}
			}),
			check: func(t *testing.T, w *WorkerObjects) {
				c := w.Deployment.Spec.Template.Spec.Containers[0]
				from := map[string]*corev1ac.EnvVarSourceApplyConfiguration{}
				for _, e := range c.Env {
					from[*e.Name] = e.ValueFrom
				}
				for _, name := range []string{EnvPodName, "NODE"} {
					if ref := from[name].FieldRef; ref.APIVersion == nil || *ref.APIVersion != "v1" {
						t.Errorf("%s field reference API version = %v, want v1", name, ref.APIVersion)
					}
				}
				if ref := from["TOKEN"].FileKeyRef; ref.Optional == nil || *ref.Optional {
					t.Errorf("file key reference optional = %v, want false", ref.Optional)
				}
				if got := (*c.Resources.Requests)[corev1.ResourceCPU]; got.String() != "1m" {
					t.Errorf("cpu request = %s, want 100u rounded up to 1m", got.String())
				}
				if got := (*c.Resources.Limits)[corev1.ResourceCPU]; got.String() != "500m" {
					t.Errorf("cpu limit = %s, want 500m", got.String())
				}
			},
		},
		{
			name:  "engine TLS mounts the Secret and names only the files it has",
			agent: testAgent(withEngineTLS("engine-tls")),
			obs:   observed(secret("engine-tls", map[string]string{"ca.crt": "ca"})),
			check: func(t *testing.T, w *WorkerObjects) {
				tls := w.Config.Engine.TLS
				if tls == nil || tls.CAFile != EngineTLSDir+"/ca.crt" || tls.CertFile != "" {
					t.Errorf("TLS config = %+v, want only the CA file", tls)
				}
				if !hasVolume(w, "engine-tls") {
					t.Error("no engine-tls volume")
				}
			},
		},
		{
			name:  "a local directory MediaStore with a claim is mounted at its root",
			agent: testAgent(withMediaStoreRef("media")),
			obs: observed(readyMediaStore("media", func(ms *agentsv1.MediaStore) {
				ms.Spec.LocalDirectory.PersistentVolumeClaimName = "media-pvc"
			})),
			check: func(t *testing.T, w *WorkerObjects) {
				if !hasVolume(w, "media") {
					t.Fatal("no media volume")
				}
				for _, m := range w.Deployment.Spec.Template.Spec.Containers[0].VolumeMounts {
					if *m.Name == "media" && *m.MountPath != "/media" {
						t.Errorf("media mounted at %s, want /media", *m.MountPath)
					}
				}
			},
		},
		{
			name:  "a local directory MediaStore without a claim is the node's directory",
			agent: testAgent(withMediaStoreRef("media")),
			obs:   observed(readyMediaStore("media")),
			check: func(t *testing.T, w *WorkerObjects) {
				for _, v := range w.Deployment.Spec.Template.Spec.Volumes {
					if *v.Name == "media" {
						if v.HostPath == nil || *v.HostPath.Path != "/media" || *v.HostPath.Type != corev1.HostPathDirectory {
							t.Errorf("media volume = %+v, want hostPath /media of type Directory", v)
						}
						return
					}
				}
				t.Error("no media volume")
			},
		},
		{
			name:  "S3 credentials come from the Secret's conventional keys",
			agent: testAgent(withMediaStoreRef("media")),
			obs: observed(readyMediaStore("media", func(ms *agentsv1.MediaStore) {
				ms.Spec = agentsv1.MediaStoreSpec{S3: &agentsv1.S3MediaStore{Bucket: "b", Prefix: "p",
					CredentialsSecretRef: &agentsv1.SecretReference{Name: "s3"}}}
			}), secret("s3", map[string]string{S3AccessKeyIDKey: "id", S3SecretAccessKeyKey: "key"})),
			check: func(t *testing.T, w *WorkerObjects) {
				s3 := w.Config.MediaStore.S3
				if s3.AccessKeyID.Key != S3AccessKeyIDKey || s3.SecretAccessKey.Key != S3SecretAccessKeyKey || s3.SessionToken != nil {
					t.Errorf("S3 credentials = %+v", s3)
				}
				if w.Config.MediaStore.StoreURI != "s3://b/p" {
					t.Errorf("store URI = %s", w.Config.MediaStore.StoreURI)
				}
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.check(t, render(t, tt.agent, tt.obs))
		})
	}
}

func hasVolume(w *WorkerObjects, name string) bool {
	for _, v := range w.Deployment.Spec.Template.Spec.Volumes {
		if *v.Name == name {
			return true
		}
	}
	return false
}

func TestConfigDigest(t *testing.T) {
	agent := testAgent(withModelKey("openai", "api-key"))
	base := render(t, agent, observed(secret("openai", map[string]string{"api-key": "one"})))
	again := render(t, agent, observed(secret("openai", map[string]string{"api-key": "one"})))
	rotated := render(t, agent, observed(secret("openai", map[string]string{"api-key": "two"})))
	changed := render(t, testAgent(withModelKey("openai", "api-key"), func(a *agentsv1.Agent) { a.Spec.Instructions = "new" }),
		observed(secret("openai", map[string]string{"api-key": "one"})))

	if base.ConfigDigest != again.ConfigDigest || string(base.ConfigDocument) != string(again.ConfigDocument) {
		t.Error("the same inputs rendered differently")
	}
	if rotated.ConfigDigest == base.ConfigDigest {
		t.Error("a rotated Secret value did not change the digest")
	}
	if string(rotated.ConfigDocument) != string(base.ConfigDocument) {
		t.Error("a rotated Secret value changed the document, which must hold no value")
	}
	if changed.ConfigDigest == base.ConfigDigest {
		t.Error("a spec change did not change the digest")
	}
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

func TestSecretEnvName(t *testing.T) {
	a, b := SecretEnvName("openai", "api-key"), SecretEnvName("openai", "api-key")
	if a != b || !strings.HasPrefix(a, "STEPWISE_SECRET_") {
		t.Errorf("SecretEnvName not stable: %s %s", a, b)
	}
	if SecretEnvName("openai", "key") == a || SecretEnvName("openai-api", "key") == SecretEnvName("openai", "api-key") {
		t.Error("different Secret keys share a variable")
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

func TestRenderTracingTakesTheAgentsEndpointOrTheOperatorsDefault(t *testing.T) {
	fallback := &TracingEndpoint{Endpoint: "http://collector.observability:4317", Protocol: "grpc"}
	token := agentsv1.HTTPHeader{Name: "X-Api-Key", ValueFrom: &agentsv1.SecretValueSource{SecretKeyRef: agentsv1.SecretKeyReference{Name: "otel", Key: "key"}}}
	cases := []struct {
		name     string
		spec     *agentsv1.TracingSpec
		fallback *TracingEndpoint
		want     *workerconfig.Tracing
	}{
		{"nothing configured", nil, nil, nil},
		{"the operator's default", nil, fallback, &workerconfig.Tracing{Endpoint: fallback.Endpoint, Protocol: "grpc"}},
		{"the Agent's own endpoint wins", &agentsv1.TracingSpec{Endpoint: "https://traces.example.com/v1/traces", Protocol: "http/protobuf",
			SamplePercent: new(int32(25)), AgentName: "Triage", CaptureMessageContent: true, SemanticConventions: "1.36.0"}, fallback,
			&workerconfig.Tracing{Endpoint: "https://traces.example.com/v1/traces", Protocol: "http/protobuf",
				SamplePercent: new(int32(25)), AgentName: "Triage", CaptureMessageContent: true, SemanticConventions: "1.36.0"}},
		{"options on the default endpoint", &agentsv1.TracingSpec{Headers: []agentsv1.HTTPHeader{token}}, fallback,
			&workerconfig.Tracing{Endpoint: fallback.Endpoint, Protocol: "grpc", Headers: []workerconfig.Value{{Name: "X-Api-Key",
				FromEnv: &workerconfig.SecretEnv{Env: SecretEnvName("otel", "key"), Secret: "otel", Key: "key"}}}}},
		{"options without any endpoint", &agentsv1.TracingSpec{AgentName: "Triage"}, nil, nil},
		{"turned off for the Agent", &agentsv1.TracingSpec{Enabled: new(false), Endpoint: "http://c:4317"}, fallback, nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			agent := testAgent(func(a *agentsv1.Agent) { a.Spec.Tracing = c.spec })
			defaults := testDefaults
			defaults.Tracing = c.fallback
			resolved, blocker := Resolve(agent, observed(secret("otel", map[string]string{"key": "k-live"})), defaults)
			if blocker != nil {
				t.Fatalf("Resolve() blocked: %v", blocker)
			}
			w, err := Worker(resolved)
			if err != nil {
				t.Fatal(err)
			}
			cfg, err := workerconfig.Decode(w.ConfigDocument)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(cfg.Tracing, c.want) {
				t.Errorf("tracing = %+v, want %+v", cfg.Tracing, c.want)
			}
			if strings.Contains(string(w.ConfigDocument), "k-live") {
				t.Error("the config document holds the header's Secret value")
			}
		})
	}
}

func TestATracingHeaderFromAMissingSecretKeyBlocksTheAgent(t *testing.T) {
	agent := testAgent(func(a *agentsv1.Agent) {
		a.Spec.Tracing = &agentsv1.TracingSpec{Endpoint: "http://c:4317", Headers: []agentsv1.HTTPHeader{{Name: "X-Api-Key",
			ValueFrom: &agentsv1.SecretValueSource{SecretKeyRef: agentsv1.SecretKeyReference{Name: "otel", Key: "key"}}}}}
	})
	_, blocker := Resolve(agent, observed(secret("otel", map[string]string{"other": "x"})), testDefaults)
	if blocker == nil || !strings.Contains(blocker.Message, "spec.tracing.headers[X-Api-Key].valueFrom.secretKeyRef") {
		t.Fatalf("blocker = %v, want one naming spec.tracing.headers[X-Api-Key]", blocker)
	}
}

// testCAPEM is a real CA certificate in PEM: the test TLS server's own.
func testCAPEM(t *testing.T) string {
	t.Helper()
	srv := httptest.NewTLSServer(http.NotFoundHandler())
	defer srv.Close()
	return string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw}))
}

func TestATracingCAIsMountedFromItsSecretAndMustBePEM(t *testing.T) {
	agent := testAgent(func(a *agentsv1.Agent) {
		a.Spec.Tracing = &agentsv1.TracingSpec{Endpoint: "https://collector.observability:4317",
			CASecretRef: &agentsv1.SecretKeyReference{Name: "otel-ca", Key: "bundle.pem"}}
	})
	w := render(t, agent, observed(secret("otel-ca", map[string]string{"bundle.pem": testCAPEM(t)})))
	cfg, err := workerconfig.Decode(w.ConfigDocument)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Tracing == nil || cfg.Tracing.CAFile != TracingCAFile {
		t.Fatalf("tracing = %+v, want the CA file %s", cfg.Tracing, TracingCAFile)
	}
	pod := w.Deployment.Spec.Template.Spec
	var mounted bool
	for _, v := range pod.Volumes {
		if *v.Name == "tracing-ca" {
			mounted = v.Secret != nil && *v.Secret.SecretName == "otel-ca" && len(v.Secret.Items) == 1 &&
				*v.Secret.Items[0].Key == "bundle.pem" && *v.Secret.Items[0].Path == "ca.crt"
		}
	}
	for _, m := range pod.Containers[0].VolumeMounts {
		if *m.Name == "tracing-ca" && (*m.MountPath != "/etc/stepwise/tracing-ca" || !*m.ReadOnly) {
			mounted = false
		}
	}
	if !mounted {
		t.Errorf("the CA Secret's key is not mounted read-only as %s: %+v", TracingCAFile, pod.Volumes)
	}
	_, blocker := Resolve(agent, observed(secret("otel-ca", map[string]string{"bundle.pem": "not a certificate"})), testDefaults)
	if blocker == nil || !strings.Contains(blocker.Message, "spec.tracing.caSecretRef") || !strings.Contains(blocker.Message, "holds no PEM certificate") {
		t.Errorf("blocker = %v, want one naming spec.tracing.caSecretRef", blocker)
	}
}

func TestWorkersGetResourcesTheAgentCanOverride(t *testing.T) {
	q := resource.MustParse
	cases := []struct {
		name     string
		spec     corev1.ResourceRequirements
		requests corev1.ResourceList
		limits   corev1.ResourceList
	}{
		{"none named", corev1.ResourceRequirements{},
			corev1.ResourceList{corev1.ResourceCPU: q("50m"), corev1.ResourceMemory: q("128Mi")},
			corev1.ResourceList{corev1.ResourceMemory: q("1Gi")}},
		{"a larger memory limit", corev1.ResourceRequirements{Limits: corev1.ResourceList{corev1.ResourceMemory: q("4Gi")}},
			corev1.ResourceList{corev1.ResourceCPU: q("50m"), corev1.ResourceMemory: q("128Mi")},
			corev1.ResourceList{corev1.ResourceMemory: q("4Gi")}},
		{"a memory limit below the default request", corev1.ResourceRequirements{Limits: corev1.ResourceList{corev1.ResourceMemory: q("64Mi")}},
			corev1.ResourceList{corev1.ResourceCPU: q("50m"), corev1.ResourceMemory: q("64Mi")},
			corev1.ResourceList{corev1.ResourceMemory: q("64Mi")}},
		{"a memory request above the default limit", corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceMemory: q("2Gi")}},
			corev1.ResourceList{corev1.ResourceCPU: q("50m"), corev1.ResourceMemory: q("2Gi")},
			corev1.ResourceList{corev1.ResourceMemory: q("2Gi")}},
		{"a CPU limit below the default request", corev1.ResourceRequirements{Limits: corev1.ResourceList{corev1.ResourceCPU: q("20m")}},
			corev1.ResourceList{corev1.ResourceCPU: q("20m"), corev1.ResourceMemory: q("128Mi")},
			corev1.ResourceList{corev1.ResourceCPU: q("20m"), corev1.ResourceMemory: q("1Gi")}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			agent := testAgent()
			if agent.Spec.Workers == nil {
				agent.Spec.Workers = &agentsv1.WorkersSpec{}
			}
			agent.Spec.Workers.Resources = c.spec
			resolved, blocker := Resolve(agent, observed(), testDefaults)
			if blocker != nil {
				t.Fatal(blocker)
			}
			w, err := Worker(resolved)
			if err != nil {
				t.Fatal(err)
			}
			got := w.Deployment.Spec.Template.Spec.Containers[0].Resources
			for _, want := range []struct {
				what      string
				got, want corev1.ResourceList
			}{{"requests", *got.Requests, c.requests}, {"limits", *got.Limits, c.limits}} {
				if len(want.got) != len(want.want) {
					t.Errorf("%s = %v, want %v", want.what, want.got, want.want)
				}
				for name, q := range want.want {
					if g := want.got[name]; g.Cmp(q) != 0 {
						t.Errorf("%s[%s] = %s, want %s", want.what, name, g.String(), q.String())
					}
				}
			}
		})
	}
}

func TestWorkerNetworkPolicyComesWithTheOperatorsSetting(t *testing.T) {
	for _, p := range []*WorkerNetworkPolicy{nil, {}, {MetricsNamespace: "monitoring"}} {
		defaults := testDefaults
		defaults.WorkerNetworkPolicy = p
		resolved, blocker := Resolve(testAgent(), observed(), defaults)
		if blocker != nil {
			t.Fatal(blocker)
		}
		w, err := Worker(resolved)
		if err != nil {
			t.Fatal(err)
		}
		if p == nil {
			if w.NetworkPolicy != nil {
				t.Error("an operator that makes no NetworkPolicies rendered one")
			}
			continue
		}
		spec := w.NetworkPolicy.Spec
		if len(spec.Ingress) != 2 || *spec.Ingress[0].Ports[0].Port != intstr.FromInt32(HealthPort) || len(spec.Ingress[0].From) != 0 ||
			*spec.Ingress[1].Ports[0].Port != intstr.FromInt32(MetricsPort) {
			t.Fatalf("ingress = %+v, want the probe port from anywhere and the metrics port", spec.Ingress)
		}
		from := spec.Ingress[1].From
		if p.MetricsNamespace == "" && len(from) != 0 {
			t.Errorf("with no metrics namespace, metrics are let in from %+v", from)
		}
		if p.MetricsNamespace != "" && (len(from) != 1 || from[0].NamespaceSelector.MatchLabels[corev1.LabelMetadataName] != "monitoring") {
			t.Errorf("metrics are let in from %+v, want the monitoring namespace only", from)
		}
		if !maps.Equal(spec.PodSelector.MatchLabels, SelectorLabels(testAgent().Name)) {
			t.Errorf("the policy selects %v", spec.PodSelector.MatchLabels)
		}
	}
}
