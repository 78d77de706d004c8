package worker

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"errors"
	"io"
	"log/slog"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/stepwise-run/stepwise/internal/contract"
	"github.com/stepwise-run/stepwise/internal/engine"
	"github.com/stepwise-run/stepwise/internal/enginetest"
	"github.com/stepwise-run/stepwise/internal/events"
	"github.com/stepwise-run/stepwise/internal/render"
	"github.com/stepwise-run/stepwise/internal/session"
	"github.com/stepwise-run/stepwise/internal/tenancy"
	"github.com/stepwise-run/stepwise/internal/version"
	"github.com/stepwise-run/stepwise/pkg/agent"
	"github.com/stepwise-run/stepwise/pkg/client"
	"github.com/stepwise-run/stepwise/pkg/workerconfig"
)

func demoConfig() workerconfig.Config {
	return workerconfig.Config{
		APIVersion: workerconfig.APIVersion, Kind: workerconfig.Kind,
		Agent:    workerconfig.AgentRef{Namespace: "team", Name: "support"},
		FlowType: "SupportAgent", EngineVersion: version.EngineVersion, TaskSlots: 10,
		Engine: workerconfig.Engine{Address: "127.0.0.1:7233", Namespace: "default", TaskQueue: "stepwise/SupportAgent"},
		Definition: workerconfig.Definition{
			Name: "support", Model: workerconfig.Model{Provider: agent.ScriptedProvider, Name: "demo"},
			DefaultToolEffect: "unclassified",
		},
	}
}

type noteArgs struct {
	Note string `json:"note"`
}

func noteTool(t *testing.T, name string, effect agent.Effect) agent.Tool {
	t.Helper()
	tool, err := agent.NewTool(name, "Takes a note.", effect,
		func(_ context.Context, _ agent.ToolContext, a noteArgs) (string, error) { return a.Note, nil })
	if err != nil {
		t.Fatal(err)
	}
	return tool
}

// discardOutput drops a model call's streamed deltas.
type discardOutput struct{}

func (discardOutput) TextDelta(string)      {}
func (discardOutput) ReasoningDelta(string) {}

// reply makes one model call with a single user message and returns the
// answer's text.
func reply(t *testing.T, m agent.ModelClient, text string) string {
	t.Helper()
	resp, err := m.CallModel(context.Background(), agent.ModelRequest{
		Input: []agent.Message{{Sequence: 1, Role: agent.RoleUser, Text: text}},
	}, discardOutput{})
	if err != nil {
		t.Fatalf("CallModel() = %v", err)
	}
	return resp.Text()
}

func TestDefinitionCarriesTheConfiguredAgent(t *testing.T) {
	cfg := demoConfig()
	maxOutput := int32(512)
	noApproval := false
	cfg.Definition.Instructions = "You help customers."
	cfg.Definition.Model.MaxOutputTokens = &maxOutput
	cfg.Definition.Model.ReasoningEffort = "low"
	cfg.Definition.DefaultToolEffect = "read"
	cfg.Definition.ToolPolicies = []workerconfig.ToolPolicy{
		{Name: "refund", Effect: "non_idempotent_write", RequiresApproval: &noApproval},
		{Name: "tickets__list", Effect: "idempotent_write"},
	}
	cfg.Definition.BuiltInTools = []string{"ask_user", "durable_wait"}
	cfg.Definition.Limits = workerconfig.Limits{
		MaxModelCallsPerTurn: 7,
		InterruptDeadline:    metav1.Duration{Duration: time.Hour},
		MaxDurableWait:       metav1.Duration{Duration: 2 * time.Hour},
	}
	tool := noteTool(t, "refund", agent.EffectNonIdempotentWrite)

	def, err := Definition(cfg, Options{Tools: []agent.Tool{tool}})
	if err != nil {
		t.Fatalf("Definition() = %v", err)
	}
	if def.Name != "support" || def.Instructions != "You help customers." {
		t.Errorf("name and instructions = %q, %q", def.Name, def.Instructions)
	}
	if def.Model == nil {
		t.Fatal("the definition has no model")
	}
	if got := reply(t, def.Model, "hi"); got != "Demo reply: hi" {
		t.Errorf("the model answered %q, want the demo script's reply", got)
	}
	if def.ModelSettings != (agent.ModelSettings{MaxOutputTokens: 512, ReasoningEffort: "low"}) {
		t.Errorf("ModelSettings = %+v", def.ModelSettings)
	}
	if def.DefaultToolEffect != agent.EffectRead {
		t.Errorf("DefaultToolEffect = %q, want read", def.DefaultToolEffect)
	}
	refund := def.ToolPolicies["refund"]
	if refund.Effect != agent.EffectNonIdempotentWrite || refund.RequiresApproval == nil || *refund.RequiresApproval {
		t.Errorf("policy of refund = %+v, want a non-idempotent write without approval", refund)
	}
	list := def.ToolPolicies["tickets__list"]
	if list.Effect != agent.EffectIdempotentWrite || list.RequiresApproval != nil {
		t.Errorf("policy of tickets__list = %+v, want an idempotent write with the default approval", list)
	}
	if len(def.ToolPolicies) != 2 {
		t.Errorf("ToolPolicies = %v, want the two configured", def.ToolPolicies)
	}
	wantBuiltIns := []agent.BuiltInTool{agent.BuiltInAskUser, agent.BuiltInDurableWait}
	if len(def.BuiltInTools) != 2 || def.BuiltInTools[0] != wantBuiltIns[0] || def.BuiltInTools[1] != wantBuiltIns[1] {
		t.Errorf("BuiltInTools = %v, want %v", def.BuiltInTools, wantBuiltIns)
	}
	if len(def.Tools) != 1 || def.Tools[0].Name != "refund" {
		t.Errorf("Tools = %v, want the image's refund tool", def.Tools)
	}
	if def.MaxModelCallsPerTurn != 7 || def.InterruptDeadline != time.Hour || def.MaxDurableWait != 2*time.Hour {
		t.Errorf("limits = %d calls, deadline %s, wait %s; want 7, 1h, 2h",
			def.MaxModelCallsPerTurn, def.InterruptDeadline, def.MaxDurableWait)
	}
}

func TestDefinitionFillsDefaultsForOmittedFields(t *testing.T) {
	cfg := demoConfig()
	cfg.Definition.DefaultToolEffect = ""
	def, err := Definition(cfg, Options{})
	if err != nil {
		t.Fatalf("Definition() = %v", err)
	}
	if def.DefaultToolEffect != agent.EffectUnclassified {
		t.Errorf("DefaultToolEffect = %q, want unclassified", def.DefaultToolEffect)
	}
	if def.MaxModelCallsPerTurn != contract.DefaultMaxModelCallsPerTurn || def.MaxDurableWait != contract.DefaultMaxDurableWait {
		t.Errorf("limits = %d calls, wait %s; want the defaults", def.MaxModelCallsPerTurn, def.MaxDurableWait)
	}
	if def.InterruptDeadline != 0 || def.ToolPolicies != nil || def.BuiltInTools != nil {
		t.Errorf("omitted fields were filled: deadline %s, policies %v, built-ins %v",
			def.InterruptDeadline, def.ToolPolicies, def.BuiltInTools)
	}
	if def.ModelSettings != (agent.ModelSettings{}) {
		t.Errorf("ModelSettings = %+v, want none", def.ModelSettings)
	}
}

func TestDefinitionRefuses(t *testing.T) {
	tests := []struct {
		name   string
		mutate func(*workerconfig.Config)
		tools  []agent.Tool
		want   []string
	}{
		{
			name: "a tool policy with an unknown effect",
			mutate: func(c *workerconfig.Config) {
				c.Definition.ToolPolicies = []workerconfig.ToolPolicy{{Name: "refund", Effect: "write"}}
			},
			want: []string{"definition.toolPolicies[refund]", `"write"`},
		},
		{
			name:   "an unknown default tool effect",
			mutate: func(c *workerconfig.Config) { c.Definition.DefaultToolEffect = "harmless" },
			want:   []string{"definition.defaultToolEffect", `"harmless"`},
		},
		{
			name:   "a function tool named like an enabled built-in tool",
			mutate: func(c *workerconfig.Config) { c.Definition.BuiltInTools = []string{"ask_user"} },
			tools:  []agent.Tool{noteTool(t, "ask_user", agent.EffectRead)},
			want:   []string{"tool ask_user uses the name of an enabled built-in tool"},
		},
		{
			name: "a model provider this worker does not carry",
			mutate: func(c *workerconfig.Config) {
				c.Definition.Model = workerconfig.Model{Provider: "mistral", Name: "large"}
			},
			want: []string{"definition.model.provider", `"mistral"`},
		},
		{
			name: "a model choice this worker cannot build",
			mutate: func(c *workerconfig.Config) {
				c.Definition.ModelChoices = []workerconfig.ModelChoice{{Choice: "large", Model: workerconfig.Model{Provider: "scripted", Name: "nope"}}}
			},
			want: []string{"definition.modelChoices[large].model.name", `"nope"`},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := demoConfig()
			tt.mutate(&cfg)
			_, err := Definition(cfg, Options{Tools: tt.tools})
			if err == nil {
				t.Fatal("Definition() = nil, want an error")
			}
			for _, want := range tt.want {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("Definition() = %q, want it to mention %s", err, want)
				}
			}
		})
	}
}

func TestDefinitionAllowsAFunctionToolNamedLikeADisabledBuiltInTool(t *testing.T) {
	cfg := demoConfig()
	cfg.Definition.BuiltInTools = []string{"durable_wait"}
	def, err := Definition(cfg, Options{Tools: []agent.Tool{noteTool(t, "ask_user", agent.EffectRead)}})
	if err != nil {
		t.Fatalf("Definition() = %v, want the tool accepted while ask_user is not enabled", err)
	}
	if _, ok := def.Tool("ask_user"); !ok {
		t.Error("the function tool ask_user is missing from the definition")
	}
}

func TestDefinitionLetsSessionSettingsChooseAModel(t *testing.T) {
	cfg := demoConfig()
	tokens := int32(50)
	cfg.Definition.ModelChoices = []workerconfig.ModelChoice{
		{Choice: "billing", Model: workerconfig.Model{Provider: agent.ScriptedProvider, Name: "billing-demo", MaxOutputTokens: &tokens, ReasoningEffort: "low"}},
	}
	scripts := map[string]agent.Script{"billing-demo": func(agent.ModelRequest) (agent.ScriptedReply, error) {
		return agent.ScriptedReply{Text: "billing"}, nil
	}}
	def, err := Definition(cfg, Options{Scripts: scripts})
	if err != nil {
		t.Fatal(err)
	}
	if def.ResolveModel == nil {
		t.Fatal("a definition with model choices has no resolver")
	}
	chosen, err := def.ChooseModel(agent.SessionSettings{"model": "billing"})
	if err != nil {
		t.Fatal(err)
	}
	if got := reply(t, chosen.Client, "hi"); got != "billing" || chosen.Settings != (agent.ModelSettings{MaxOutputTokens: 50, ReasoningEffort: "low"}) {
		t.Errorf("the billing choice answered %q with settings %+v", got, chosen.Settings)
	}
	fallback, err := def.ChooseModel(nil)
	if err != nil {
		t.Fatal(err)
	}
	if got := reply(t, fallback.Client, "hi"); got != "Demo reply: hi" {
		t.Errorf("without settings the model answered %q, want the Agent's model", got)
	}
	if _, err := def.ChooseModel(agent.SessionSettings{"model": "gpt-9"}); err == nil || !strings.Contains(err.Error(), "it offers: billing") {
		t.Errorf("ChooseModel(unknown) = %v", err)
	}

	plain, err := Definition(demoConfig(), Options{})
	if err != nil || plain.ResolveModel != nil {
		t.Errorf("a definition without model choices: resolver set = %v, err = %v", plain.ResolveModel != nil, err)
	}
}

func TestModelDemoNeedsNoScripts(t *testing.T) {
	m, err := Model(workerconfig.Model{Provider: agent.ScriptedProvider, Name: "demo"}, nil)
	if err != nil {
		t.Fatalf("Model() = %v", err)
	}
	if got := reply(t, m, "hi"); got != "Demo reply: hi" {
		t.Errorf("the demo model answered %q, want %q", got, "Demo reply: hi")
	}
}

func TestModelUsesTheNamedScript(t *testing.T) {
	scripts := map[string]agent.Script{
		"support-demo": func(req agent.ModelRequest) (agent.ScriptedReply, error) {
			texts := agent.UserTexts(req)
			return agent.ScriptedReply{Text: "support: " + texts[len(texts)-1]}, nil
		},
		"other": func(agent.ModelRequest) (agent.ScriptedReply, error) {
			return agent.ScriptedReply{Text: "other"}, nil
		},
	}
	m, err := Model(workerconfig.Model{Provider: agent.ScriptedProvider, Name: "support-demo"}, scripts)
	if err != nil {
		t.Fatalf("Model() = %v", err)
	}
	if got := reply(t, m, "refund order 7"); got != "support: refund order 7" {
		t.Errorf("the model answered %q, want the support-demo script's reply", got)
	}
	demo, err := Model(workerconfig.Model{Provider: agent.ScriptedProvider, Name: "demo"}, scripts)
	if err != nil {
		t.Fatalf("Model(demo) with other scripts = %v", err)
	}
	if got := reply(t, demo, "hi"); got != "Demo reply: hi" {
		t.Errorf("the demo model answered %q beside other scripts, want the stock demo", got)
	}
}

func TestModelRefusesAnUnknownScriptListingTheAvailableOnes(t *testing.T) {
	scripts := map[string]agent.Script{"support-demo": agent.DemoScript, "billing-demo": agent.DemoScript}
	_, err := Model(workerconfig.Model{Provider: agent.ScriptedProvider, Name: "nope"}, scripts)
	if err == nil {
		t.Fatal("Model() = nil, want an error")
	}
	for _, want := range []string{"definition.model.name", `"nope"`, `"demo"`, `"support-demo"`, `"billing-demo"`} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("Model() = %q, want it to mention %s", err, want)
		}
	}
}

func TestModelRefusesAProviderThisWorkerDoesNotCarry(t *testing.T) {
	_, err := Model(workerconfig.Model{Provider: "mistral", Name: "large"}, map[string]agent.Script{"large": agent.DemoScript})
	if err == nil {
		t.Fatal("Model() = nil, want an error")
	}
	for _, want := range []string{"definition.model.provider", `"mistral"`} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("Model() = %q, want it to mention %s", err, want)
		}
	}
}

// testPKI is a certificate authority and a client certificate it signed,
// written as PEM files.
type testPKI struct {
	ca                         *x509.Certificate
	client                     *x509.Certificate
	caFile, certFile, keyFile  string
	caKeyFile, notPEMFile, dir string
}

func newTestPKI(t *testing.T) testPKI {
	t.Helper()
	dir := t.TempDir()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	caTemplate := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "test engine CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTemplate, caTemplate, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	ca, err := x509.ParseCertificate(caDER)
	if err != nil {
		t.Fatal(err)
	}
	clientKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	clientTemplate := &x509.Certificate{
		SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "worker"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
	clientDER, err := x509.CreateCertificate(rand.Reader, clientTemplate, ca, &clientKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	client, err := x509.ParseCertificate(clientDER)
	if err != nil {
		t.Fatal(err)
	}
	write := func(name, blockType string, der []byte) string {
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: blockType, Bytes: der}), 0o600); err != nil {
			t.Fatal(err)
		}
		return path
	}
	keyDER, err := x509.MarshalECPrivateKey(clientKey)
	if err != nil {
		t.Fatal(err)
	}
	caKeyDER, err := x509.MarshalECPrivateKey(caKey)
	if err != nil {
		t.Fatal(err)
	}
	notPEM := filepath.Join(dir, "not-pem.txt")
	if err := os.WriteFile(notPEM, []byte("this is not a certificate\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return testPKI{
		ca: ca, client: client, dir: dir,
		caFile:     write("ca.pem", "CERTIFICATE", caDER),
		certFile:   write("client.pem", "CERTIFICATE", clientDER),
		keyFile:    write("client-key.pem", "EC PRIVATE KEY", keyDER),
		caKeyFile:  write("ca-key.pem", "EC PRIVATE KEY", caKeyDER),
		notPEMFile: notPEM,
	}
}

func TestClientTLSLoadsTheAuthorityAndClientCertificate(t *testing.T) {
	pki := newTestPKI(t)
	cfg, err := clientTLS(workerconfig.TLS{
		CAFile: pki.caFile, CertFile: pki.certFile, KeyFile: pki.keyFile, ServerName: "temporal.internal",
	})
	if err != nil {
		t.Fatalf("clientTLS() = %v", err)
	}
	if cfg.ServerName != "temporal.internal" {
		t.Errorf("ServerName = %q, want temporal.internal", cfg.ServerName)
	}
	if cfg.MinVersion != tls.VersionTLS12 {
		t.Errorf("MinVersion = %x, want TLS 1.2", cfg.MinVersion)
	}
	if cfg.RootCAs == nil {
		t.Fatal("RootCAs is nil, want the configured authority")
	}
	// A certificate the authority signed verifies against RootCAs alone.
	if _, err := pki.client.Verify(x509.VerifyOptions{
		Roots: cfg.RootCAs, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}); err != nil {
		t.Errorf("a certificate signed by the configured authority does not verify against RootCAs: %v", err)
	}
	if len(cfg.Certificates) != 1 || len(cfg.Certificates[0].Certificate) == 0 {
		t.Fatalf("Certificates = %d, want the client certificate", len(cfg.Certificates))
	}
	if got := cfg.Certificates[0].Certificate[0]; string(got) != string(pki.client.Raw) {
		t.Error("the client certificate is not the one in certFile")
	}
}

func TestClientTLSWithoutFilesUsesTheSystemAuthorities(t *testing.T) {
	cfg, err := clientTLS(workerconfig.TLS{ServerName: "temporal.example.com"})
	if err != nil {
		t.Fatalf("clientTLS() = %v", err)
	}
	if cfg.RootCAs != nil || len(cfg.Certificates) != 0 {
		t.Errorf("RootCAs = %v and %d certificates, want the system authorities and none", cfg.RootCAs, len(cfg.Certificates))
	}
	if cfg.ServerName != "temporal.example.com" {
		t.Errorf("ServerName = %q", cfg.ServerName)
	}
}

func TestClientTLSRefuses(t *testing.T) {
	pki := newTestPKI(t)
	missing := filepath.Join(pki.dir, "missing-ca.pem")
	tests := []struct {
		name string
		tls  workerconfig.TLS
		want []string
	}{
		{name: "a certificate without a key", tls: workerconfig.TLS{CertFile: pki.certFile},
			want: []string{"engine.tls needs both certFile and keyFile"}},
		{name: "a key without a certificate", tls: workerconfig.TLS{KeyFile: pki.keyFile},
			want: []string{"engine.tls needs both certFile and keyFile"}},
		{name: "a CA file without PEM", tls: workerconfig.TLS{CAFile: pki.notPEMFile},
			want: []string{"engine.tls.caFile", pki.notPEMFile, "holds no PEM certificate"}},
		{name: "a missing CA file", tls: workerconfig.TLS{CAFile: missing},
			want: []string{"engine.tls.caFile", missing}},
		{name: "a key that does not match the certificate", tls: workerconfig.TLS{CertFile: pki.certFile, KeyFile: pki.caKeyFile},
			want: []string{"engine.tls client certificate"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := clientTLS(tt.tls)
			if err == nil {
				t.Fatal("clientTLS() = nil, want an error")
			}
			for _, want := range tt.want {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("clientTLS() = %q, want it to mention %s", err, want)
				}
			}
		})
	}
}

func discardLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// unsetEnv removes an environment variable for the test and restores it
// afterwards.
func unsetEnv(t *testing.T, name string) {
	t.Helper()
	t.Setenv(name, "")
	if err := os.Unsetenv(name); err != nil {
		t.Fatal(err)
	}
}

func TestDialWithAMissingAPIKeyNamesTheSecretKey(t *testing.T) {
	const env = "STEPWISE_TEST_ENGINE_API_KEY"
	unsetEnv(t, env)
	e := workerconfig.Engine{
		Address: "127.0.0.1:1", Namespace: "default", TaskQueue: "stepwise/SupportAgent",
		APIKey: &workerconfig.SecretEnv{Env: env, Secret: "engine-credentials", Key: "api-key"},
	}
	_, err := Dial(context.Background(), e, discardLogger())
	if err == nil {
		t.Fatal("Dial() = nil, want an error")
	}
	for _, want := range []string{"engine.apiKey", env, "engine-credentials", "api-key"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("Dial() = %q, want it to mention %s", err, want)
		}
	}
}

func TestDialNeverPutsTheAPIKeyInAnError(t *testing.T) {
	const env, key = "STEPWISE_TEST_ENGINE_API_KEY", "sk-test-do-not-print-1234"
	t.Setenv(env, key)
	e := workerconfig.Engine{
		Address: freeAddress(t), Namespace: "default", TaskQueue: "stepwise/SupportAgent",
		APIKey: &workerconfig.SecretEnv{Env: env, Secret: "engine-credentials", Key: "api-key"},
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	c, err := Dial(ctx, e, discardLogger())
	if err == nil {
		c.Close()
		t.Fatal("Dial() to an address nothing listens on = nil, want an error")
	}
	if !strings.Contains(err.Error(), "connecting to Temporal at "+e.Address) {
		t.Errorf("Dial() = %q, want it to name the address", err)
	}
	if strings.Contains(err.Error(), key) {
		t.Errorf("Dial() = %q, which holds the API key", err)
	}
}

func TestDialRefusesABadTLSConfiguration(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "ca.pem")
	e := workerconfig.Engine{Address: "127.0.0.1:1", Namespace: "default", TLS: &workerconfig.TLS{CAFile: missing}}
	_, err := Dial(context.Background(), e, discardLogger())
	if err == nil || !strings.Contains(err.Error(), "engine.tls.caFile") {
		t.Fatalf("Dial() = %v, want an error naming engine.tls.caFile", err)
	}
}

func freeAddress(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// get fetches a URL and returns its status and body.
func get(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("GET %s: reading the body: %v", url, err)
	}
	return resp.StatusCode, string(body)
}

func startHealthServer(t *testing.T, ready *atomic.Bool) string {
	t.Helper()
	server, err := healthServer("127.0.0.1:0", ready)
	if err != nil {
		t.Fatalf("healthServer() = %v", err)
	}
	go func() { _ = server.Serve() }()
	t.Cleanup(func() { _ = server.Close() })
	return "http://" + server.Addr().String()
}

func startDebugServer(t *testing.T, ring *events.Ring) string {
	t.Helper()
	server, err := debugServer("127.0.0.1:0", ring)
	if err != nil {
		t.Fatalf("debugServer() = %v", err)
	}
	go func() { _ = server.Serve() }()
	t.Cleanup(func() { _ = server.Close() })
	return "http://" + server.Addr().String()
}

func TestHealthServerAnswersHealthzAlways(t *testing.T) {
	var ready atomic.Bool
	base := startHealthServer(t, &ready)
	if status, body := get(t, base+"/healthz"); status != http.StatusOK || body != "ok\n" {
		t.Errorf("/healthz = %d %q, want 200 ok", status, body)
	}
}

func TestHealthServerIsReadyOnlyOnceTheWorkerPolls(t *testing.T) {
	var ready atomic.Bool
	base := startHealthServer(t, &ready)
	if status, _ := get(t, base+"/readyz"); status != http.StatusServiceUnavailable {
		t.Errorf("/readyz before the worker polls = %d, want 503", status)
	}
	ready.Store(true)
	if status, body := get(t, base+"/readyz"); status != http.StatusOK || body != "ok\n" {
		t.Errorf("/readyz while the worker polls = %d %q, want 200 ok", status, body)
	}
	ready.Store(false)
	if status, _ := get(t, base+"/readyz"); status != http.StatusServiceUnavailable {
		t.Errorf("/readyz after the worker stopped polling = %d, want 503", status)
	}
}

// The health port is on the pod network: it answers probes and serves no
// session's events, with or without a session.
func TestHealthServerServesNoEvents(t *testing.T) {
	var ready atomic.Bool
	base := startHealthServer(t, &ready)
	for _, path := range []string{"/debug/events", "/debug/events?session=s1", "/debug/"} {
		if status, body := get(t, base+path); status != http.StatusNotFound {
			t.Errorf("GET %s on the health port = %d %q, want 404", path, status, body)
		}
	}
}

func TestDebugServerServesOneSessionsRecentEvents(t *testing.T) {
	ring := events.NewRing(1 << 20)
	ring.Write("s1", session.NewEvent(session.EventTurnStarted, "t1", map[string]any{"sequence": 1}))
	ring.Write("s2", session.NewEvent(session.EventTurnStarted, "t9", map[string]any{"sequence": 1}))
	ring.Write("s1", session.NewEvent(session.EventTextDelta, "t1", map[string]any{"text": "hello"}))
	base := startDebugServer(t, ring)

	decode := func(query string) []events.Record {
		t.Helper()
		status, body := get(t, base+"/debug/events?"+query)
		if status != http.StatusOK {
			t.Fatalf("/debug/events?%s = %d %q", query, status, body)
		}
		var got []events.Record
		if err := json.Unmarshal([]byte(body), &got); err != nil {
			t.Fatalf("/debug/events?%s is not a JSON list of records: %v\n%s", query, err, body)
		}
		return got
	}
	same := func(got, want []events.Record) bool {
		if len(got) != len(want) {
			return false
		}
		for i := range got {
			if got[i].Seq != want[i].Seq || got[i].SessionID != want[i].SessionID || got[i].Event.Type != want[i].Event.Type ||
				got[i].Event.TurnID != want[i].Event.TurnID || string(got[i].Event.Payload) != string(want[i].Event.Payload) ||
				!got[i].Time.Equal(want[i].Time) {
				return false
			}
		}
		return true
	}

	s1 := decode("session=s1")
	if want := ring.Since("s1", 0); len(want) != 2 || !same(s1, want) {
		t.Errorf("events of s1 = %+v, want %+v", s1, want)
	}
	if after := decode("session=s1&after=1"); len(after) != 1 || after[0].Seq != 3 || after[0].Event.Type != session.EventTextDelta {
		t.Errorf("events of s1 after 1 = %+v, want only the text delta", after)
	}
	if s2 := decode("session=s2"); len(s2) != 1 || s2[0].SessionID != "s2" || s2[0].Event.TurnID != "t9" {
		t.Errorf("events of s2 = %+v, want its one event", s2)
	}
	if none := decode("session=s3"); len(none) != 0 {
		t.Errorf("events of a session with none = %+v", none)
	}
	for _, query := range []string{"", "?session=", "?after=1", "?session=s1&after=one"} {
		if status, body := get(t, base+"/debug/events"+query); status != http.StatusBadRequest || strings.Contains(body, "hello") {
			t.Errorf("/debug/events%s = %d %q, want 400 and no events", query, status, body)
		}
	}
}

func TestDebugServerRefusesAnAddressOffLoopback(t *testing.T) {
	for _, address := range []string{":0", "0.0.0.0:0", "[::]:0"} {
		if _, err := debugServer(address, events.NewRing(1<<20)); err == nil || !strings.Contains(err.Error(), "debugAddress") ||
			!strings.Contains(err.Error(), "not a loopback address") {
			t.Errorf("debugServer(%q) = %v, want a refusal naming debugAddress", address, err)
		}
	}
}

func TestHealthServerRefusesAnAddressInUse(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	var ready atomic.Bool
	_, err = healthServer(l.Addr().String(), &ready)
	if err == nil || !strings.Contains(err.Error(), "serving health probes on "+l.Addr().String()) {
		t.Fatalf("healthServer() on an address in use = %v, want an error naming it", err)
	}
}

func TestRunRefusesABadDefinitionBeforeConnecting(t *testing.T) {
	cfg := demoConfig()
	cfg.Definition.Model = workerconfig.Model{Provider: "mistral", Name: "large"}
	err := Run(context.Background(), cfg, Options{Logger: discardLogger()})
	if err == nil || !strings.Contains(err.Error(), "definition.model.provider") {
		t.Fatalf("Run() = %v, want an error naming definition.model.provider", err)
	}
}

func TestRunServesSessionsUntilItsContextEnds(t *testing.T) {
	server := enginetest.StartDevServer(t)
	cfg := demoConfig()
	cfg.FlowType = "WorkerRunDemo"
	cfg.Engine = workerconfig.Engine{
		Address: server.FrontendHostPort(), Namespace: "default", TaskQueue: tenancy.Tenant(cfg.Agent.Namespace, cfg.FlowType).TaskQueue(),
	}
	cfg.HealthAddress = freeAddress(t)
	health := "http://" + cfg.HealthAddress
	cfg.DebugAddress = freeAddress(t)
	debug := "http://" + cfg.DebugAddress

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- Run(ctx, cfg, Options{Logger: discardLogger(), StopTimeout: 5 * time.Second}) }()

	enginetest.Eventually(t, 30*time.Second, "the worker to be ready", func() (bool, error) {
		select {
		case err := <-done:
			t.Fatalf("Run() returned %v before the worker was ready", err)
		default:
		}
		resp, err := http.Get(health + "/readyz")
		if err != nil {
			return false, err
		}
		_ = resp.Body.Close()
		return resp.StatusCode == http.StatusOK, nil
	})

	sessions := client.New(server.Client(), client.Agent{Namespace: cfg.Agent.Namespace, Name: cfg.Agent.Name, FlowType: cfg.FlowType})
	if ok, err := sessions.Start(context.Background(), "run-s1", "hi"); !ok || err != nil {
		t.Fatalf("Start() = %v, %v", ok, err)
	}
	var last string
	enginetest.Eventually(t, 30*time.Second, "the first turn to end", func() (bool, error) {
		snap, err := sessions.Snapshot(context.Background(), "run-s1")
		if err != nil || snap.State == nil || snap.State.TurnCount < 1 || snap.State.ActiveTurnID != "" {
			return false, err
		}
		if snap.State.LastTurnError != "" {
			t.Fatalf("the turn failed: %s", snap.State.LastTurnError)
		}
		last = snap.Messages[len(snap.Messages)-1].Text
		return true, nil
	})
	if last != "Demo reply: hi" {
		t.Errorf("the last message is %q, want %q", last, "Demo reply: hi")
	}
	status, body := get(t, debug+"/debug/events?session=run-s1")
	if status != http.StatusOK || !strings.Contains(body, `"turn_started"`) {
		t.Errorf("/debug/events of the session = %d %s, want its turn_started event", status, body)
	}
	if status, body := get(t, health+"/debug/events?session=run-s1"); status != http.StatusNotFound {
		t.Errorf("/debug/events on the health port = %d %s, want 404", status, body)
	}

	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("Run() after its context ended = %v, want nil", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("Run() did not return within 30s of its context ending")
	}
	resp, err := http.Get(health + "/readyz")
	if err == nil {
		_ = resp.Body.Close()
		t.Fatalf("/readyz answered %d after Run returned, want no answer", resp.StatusCode)
	}
	if !errors.Is(err, syscall.ECONNREFUSED) {
		t.Errorf("/readyz after Run returned: %v, want the connection refused", err)
	}
}

func TestAWorkersOwnModelClientWinsOverTheBuiltInOnes(t *testing.T) {
	own := agent.NewScriptedModel(func(agent.ModelRequest) (agent.ScriptedReply, error) {
		return agent.ScriptedReply{Text: "own"}, nil
	})
	cfg := workerconfig.Config{Definition: workerconfig.Definition{Model: workerconfig.Model{Provider: "openai", Name: "gpt-5-mini"}}}
	def, err := Definition(cfg, Options{Model: func(m workerconfig.Model) (agent.ModelClient, error) {
		if m.Provider == "openai" {
			return own, nil
		}
		return nil, nil
	}})
	if err != nil || def.Model != own {
		t.Fatalf("Definition = %v, %v; want the worker's own client for openai", def.Model, err)
	}
	cfg.Definition.Model = workerconfig.Model{Provider: "scripted", Name: "demo"}
	if def, err = Definition(cfg, Options{Model: func(workerconfig.Model) (agent.ModelClient, error) { return nil, nil }}); err != nil || def.Model == nil {
		t.Fatalf("Definition = %v, %v; want the built-in demo when the hook declines", def.Model, err)
	}
	_, err = Definition(cfg, Options{Model: func(workerconfig.Model) (agent.ModelClient, error) { return nil, errors.New("no key") }})
	if err == nil || !strings.Contains(err.Error(), "definition.model: no key") {
		t.Errorf("Definition with a failing hook = %v", err)
	}
}

func TestTimingsFollowTheHeartbeatAndTheRunModelLimit(t *testing.T) {
	cfg := workerconfig.Config{}
	if got := timings(cfg, agent.Definition{}); got != engine.DefaultTimings() {
		t.Errorf("Timings without settings = %+v, want the defaults", got)
	}
	cfg.Engine.StepHeartbeatTimeout.Duration = 5 * time.Second
	def := agent.Definition{RunModelLimit: &agent.StepLimit{AttemptTimeout: time.Minute, MaxAttempts: 5, Within: time.Hour}}
	got := timings(cfg, def)
	if got.Heartbeat != 5*time.Second || got.ModelAttempt != time.Minute || got.ModelAttempts != 5 || got.ModelWithin != time.Hour {
		t.Errorf("Timings = %+v", got)
	}
	custom, err := Definition(workerconfig.Config{Definition: workerconfig.Definition{Model: workerconfig.Model{Provider: "scripted", Name: "demo"}}},
		Options{Customize: func(d *agent.Definition) { d.Instructions = "computed" }})
	if err != nil || custom.Instructions != "computed" {
		t.Errorf("Customize = %q, %v", custom.Instructions, err)
	}
}

func TestAnOpenAICompatibleModelTalksToItsBaseURLWithTheKeyFromTheEnvironment(t *testing.T) {
	var auth string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		auth = r.Header.Get("Authorization")
		w.Header().Set("Content-Type", "text/event-stream")
		_, _ = w.Write([]byte("data: {\"id\":\"c\",\"object\":\"chat.completion.chunk\",\"created\":1,\"model\":\"m\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"hi\"},\"finish_reason\":\"stop\"}]}\n\ndata: [DONE]\n\n"))
	}))
	defer srv.Close()
	t.Setenv("STEPWISE_SECRET_TESTKEY", "sk-from-env")
	m := workerconfig.Model{Provider: "openai-compatible", Name: "qwen3", BaseURL: srv.URL + "/v1",
		APIKey: &workerconfig.SecretEnv{Env: "STEPWISE_SECRET_TESTKEY", Secret: "vllm", Key: "api-key"}}
	client, err := Model(m, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := client.CallModel(context.Background(), agent.ModelRequest{Input: []agent.Message{{Role: agent.RoleUser, Text: "hello"}}}, nil)
	if err != nil || resp.Text() != "hi" || auth != "Bearer sk-from-env" {
		t.Fatalf("CallModel = %q, %v; Authorization %q", resp.Text(), err, auth)
	}
	m.BaseURL = ""
	if _, err := Model(m, nil); err == nil || !strings.Contains(err.Error(), "definition.model.baseURL") {
		t.Errorf("Model without a base URL = %v", err)
	}
	m.BaseURL, m.APIKey.Env = srv.URL+"/v1", "STEPWISE_SECRET_MISSING"
	client, _ = Model(m, nil)
	_, err = client.CallModel(context.Background(), agent.ModelRequest{Input: []agent.Message{{Role: agent.RoleUser, Text: "hello"}}}, nil)
	if err == nil || !strings.Contains(err.Error(), "definition.model.apiKey") || !strings.Contains(err.Error(), "Secret vllm key api-key") {
		t.Errorf("CallModel without the key's variable = %v", err)
	}
}

func TestAnOpenAIModelUsesTheResponsesAPI(t *testing.T) {
	var path, auth string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		path, auth = r.URL.Path, r.Header.Get("Authorization")
		w.Header().Set("Content-Type", "text/event-stream")
		_, _ = w.Write([]byte(`data: {"type":"response.output_item.done","output_index":0,"sequence_number":1,"item":{"id":"m","type":"message","role":"assistant","content":[{"type":"output_text","text":"hi"}]}}` + "\n\n" +
			`data: {"type":"response.completed","sequence_number":2,"response":{"id":"r","status":"completed","model":"gpt","output":[],"usage":{"input_tokens":1,"output_tokens":1,"total_tokens":2}}}` + "\n\n"))
	}))
	defer srv.Close()
	t.Setenv("STEPWISE_SECRET_OPENAI", "sk-openai")
	client, err := Model(workerconfig.Model{Provider: "openai", Name: "gpt-5-mini", BaseURL: srv.URL + "/v1",
		APIKey: &workerconfig.SecretEnv{Env: "STEPWISE_SECRET_OPENAI", Secret: "openai", Key: "api-key"}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := client.CallModel(context.Background(), agent.ModelRequest{Input: []agent.Message{{Role: agent.RoleUser, Text: "hello"}}}, nil)
	if err != nil || resp.Text() != "hi" || path != "/v1/responses" || auth != "Bearer sk-openai" {
		t.Fatalf("CallModel = %q, %v; %s with %q", resp.Text(), err, path, auth)
	}
}

func TestAnAnthropicModelUsesTheMessagesAPI(t *testing.T) {
	var path, key string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		path, key = r.URL.Path, r.Header.Get("X-Api-Key")+r.Header.Get("Authorization")
		w.Header().Set("Content-Type", "text/event-stream")
		for _, e := range []string{
			`{"type":"message_start","message":{"id":"m","type":"message","role":"assistant","model":"claude","content":[],"usage":{"input_tokens":1,"output_tokens":1}}}`,
			`{"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}`,
			`{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"hi"}}`,
			`{"type":"content_block_stop","index":0}`,
			`{"type":"message_delta","delta":{"stop_reason":"end_turn"},"usage":{"output_tokens":1}}`,
			`{"type":"message_stop"}`,
		} {
			var typed struct {
				Type string `json:"type"`
			}
			_ = json.Unmarshal([]byte(e), &typed)
			_, _ = w.Write([]byte("event: " + typed.Type + "\ndata: " + e + "\n\n"))
		}
	}))
	defer srv.Close()
	t.Setenv("STEPWISE_SECRET_ANTHROPIC", "sk-ant-env")
	client, err := Model(workerconfig.Model{Provider: "anthropic", Name: "claude-sonnet-5", BaseURL: srv.URL,
		APIKey: &workerconfig.SecretEnv{Env: "STEPWISE_SECRET_ANTHROPIC", Secret: "anthropic", Key: "api-key"}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := client.CallModel(context.Background(), agent.ModelRequest{Input: []agent.Message{{Role: agent.RoleUser, Text: "hello"}}}, nil)
	if err != nil || resp.Text() != "hi" || path != "/v1/messages" || !strings.Contains(key, "sk-ant-env") {
		t.Fatalf("CallModel = %q, %v; %s with %q", resp.Text(), err, path, key)
	}
}

func TestDefinitionTakesPlanModeFromTheConfiguration(t *testing.T) {
	cfg := demoConfig()
	cfg.Definition.BuiltInTools = []string{"write_todos"}
	cfg.Definition.PlanMode = &workerconfig.PlanMode{PlanningToolChoice: "required"}
	def, err := Definition(cfg, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if !def.PlanModeEnabled || def.PlanningToolChoice != agent.ToolChoiceRequired {
		t.Errorf("plan mode = %v, %q", def.PlanModeEnabled, def.PlanningToolChoice)
	}
	cfg.Definition.BuiltInTools = nil
	if _, err := Definition(cfg, Options{}); err == nil || !strings.Contains(err.Error(), "planModeEnabled needs the write_todos built-in tool") {
		t.Errorf("plan mode without write_todos = %v", err)
	}
}

// A worker joins a Worker Deployment with both a name and a build ID, or
// not at all; a half-set pair or a name Temporal would refuse stops it at
// start, naming the flag.
func TestDeploymentVersionNeedsBothFlags(t *testing.T) {
	if v, err := deploymentVersion("", ""); v != nil || err != nil {
		t.Errorf("no flags = %+v, %v; want an unversioned worker", v, err)
	}
	v, err := deploymentVersion("shop_support", "0.5.0-1a2b3c4d5e6f")
	if err != nil || v == nil || v.DeploymentName != "shop_support" || v.BuildID != "0.5.0-1a2b3c4d5e6f" {
		t.Errorf("both flags = %+v, %v", v, err)
	}
	for _, c := range []struct{ name, buildID, want string }{
		{"shop_support", "", "--build-id"},
		{"", "0.5.0-1a2b3c4d5e6f", "--deployment-name"},
		{"shop.support", "0.5.0-1a2b3c4d5e6f", `may not contain "."`},
	} {
		if _, err := deploymentVersion(c.name, c.buildID); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("deploymentVersion(%q, %q) = %v, want an error naming %s", c.name, c.buildID, err, c.want)
		}
	}
}

// The operator's init container runs this command of the stock worker
// before a worker with a hostPath store starts; its exit status decides.
func TestCheckMediaRootRefusesAStoreThroughALink(t *testing.T) {
	if checkMediaRootCommand != render.MediaRootCheckCommand {
		t.Fatalf("the worker answers %q, the operator runs %q", checkMediaRootCommand, render.MediaRootCheckCommand)
	}
	base := t.TempDir()
	other := t.TempDir()
	if err := os.Mkdir(filepath.Join(base, "store"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(other, filepath.Join(base, "link")); err != nil {
		t.Fatal(err)
	}
	if got := checkMediaRoot([]string{"--base=" + base, "--store=" + filepath.Join(base, "store"), "--path=store"}); got != 0 {
		t.Errorf("a real directory: exit %d, want 0", got)
	}
	if got := checkMediaRoot([]string{"--base=" + base, "--store=" + other, "--path=link"}); got != 1 {
		t.Errorf("a store through a link: exit %d, want 1", got)
	}
	if got := checkMediaRoot([]string{"--unknown"}); got != 2 {
		t.Errorf("a bad flag: exit %d, want 2", got)
	}
}
