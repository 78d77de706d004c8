package render

import (
	"encoding/pem"
	"net/http"
	"net/http/httptest"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	agentsv1 "github.com/stepwise-run/stepwise/api/v1alpha1"
	"github.com/stepwise-run/stepwise/internal/version"
	"github.com/stepwise-run/stepwise/pkg/workerconfig"
)

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

func TestSecretEnvName(t *testing.T) {
	a, b := SecretEnvName("openai", "api-key"), SecretEnvName("openai", "api-key")
	if a != b || !strings.HasPrefix(a, "STEPWISE_SECRET_") {
		t.Errorf("SecretEnvName not stable: %s %s", a, b)
	}
	if SecretEnvName("openai", "key") == a || SecretEnvName("openai-api", "key") == SecretEnvName("openai", "api-key") {
		t.Error("different Secret keys share a variable")
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
