package render

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	agentsv1 "github.com/stepwise-run/stepwise/api/v1alpha1"
	"github.com/stepwise-run/stepwise/internal/tenancy"
)

func withEngineRef(name string) agentOption {
	return func(a *agentsv1.Agent) { a.Spec.EngineRef = &agentsv1.EngineReference{Name: name} }
}

// withOwnEngine names an engine of the namespace's own, with an API key.
func withOwnEngine(address, keySecret string) agentOption {
	return func(a *agentsv1.Agent) {
		a.Spec.Engine = &agentsv1.EngineSpec{Address: address, Namespace: "agents",
			TLS: &agentsv1.EngineTLS{}, APIKeySecretRef: &agentsv1.SecretKeyReference{Name: keySecret, Key: "key"}}
	}
}

func withEngineVersion(v string) agentOption {
	return func(a *agentsv1.Agent) {
		a.Spec.Workers = &agentsv1.WorkersSpec{Image: "team/worker:" + v, EngineVersion: v}
	}
}

// annotatedSecret is a credential Secret that names the addresses it may
// be sent to.
func annotatedSecret(name, addresses string) *corev1.Secret {
	s := secret(name, map[string]string{"key": "credential"})
	s.Annotations = map[string]string{agentsv1.EngineAddressesAnnotation: addresses}
	return s
}

func TestEngineRules(t *testing.T) {
	elsewhere := readyClusterEngine("team-b-only", func(ce *agentsv1.ClusterEngine) {
		ce.Spec.NamespaceSelector = &metav1.LabelSelector{MatchLabels: map[string]string{"tenant": "team-b"}}
	})
	notReady := readyClusterEngine("shared", func(ce *agentsv1.ClusterEngine) { ce.Generation = 2 })
	noNamespaceEngines := testDefaults
	noNamespaceEngines.AllowNamespaceEngines = false
	tests := []struct {
		name        string
		agent       *agentsv1.Agent
		observed    Observed
		defaults    *Defaults
		wantReason  string
		wantMessage string
		// want checks a resolved Agent.
		want func(t *testing.T, r *Resolved)
	}{
		{
			name: "the default ClusterEngine", agent: testAgent(), observed: observed(),
			want: func(t *testing.T, r *Resolved) {
				if r.ClusterEngine != "shared" || r.EngineID != testEngineID || r.Names != tenancy.Tenant("team", "SupportAgent") {
					t.Errorf("resolved %q %q %v", r.ClusterEngine, r.EngineID, r.Names)
				}
			},
		},
		{
			name: "a ClusterEngine that does not exist", agent: testAgent(withEngineRef("missing")), observed: observed(),
			wantReason: agentsv1.ReasonEngineNotFound, wantMessage: `spec.engineRef (ClusterEngine "missing"): ClusterEngine "missing" does not exist`,
		},
		{
			name: "a ClusterEngine that does not select the namespace", agent: testAgent(withEngineRef("team-b-only")), observed: observed(elsewhere),
			wantReason: agentsv1.ReasonEngineNotAllowed, wantMessage: `ClusterEngine "team-b-only" does not let namespace "team" use it`,
		},
		{
			name: "a ClusterEngine not yet Ready for its generation", agent: testAgent(), observed: observed(notReady),
			wantReason: agentsv1.ReasonEngineNotReady, wantMessage: `ClusterEngine "shared" is not Ready yet`,
		},
		{
			name: "an engine of the namespace's own where none is allowed", agent: testAgent(withOwnEngine("temporal.team-a.example:7233", "key")),
			observed: observed(annotatedSecret("key", "temporal.team-a.example:7233")), defaults: &noNamespaceEngines,
			wantReason: agentsv1.ReasonEngineNotAllowed, wantMessage: "does not allow (--allow-namespace-engines)",
		},
		{
			name: "a credential whose Secret names no address", agent: testAgent(withOwnEngine("attacker.example:7233", "key")),
			observed:   observed(secret("key", map[string]string{"key": "credential"})),
			wantReason: agentsv1.ReasonEngineCredentialNotAllowed, wantMessage: `Secret "key" holds an engine credential but does not name attacker.example:7233`,
		},
		{
			name: "a credential whose Secret names another address", agent: testAgent(withOwnEngine("attacker.example:7233", "key")),
			observed:   observed(annotatedSecret("key", "temporal.team-a.example:7233")),
			wantReason: agentsv1.ReasonEngineCredentialNotAllowed, wantMessage: "does not name attacker.example:7233",
		},
		{
			name: "a credential whose Secret names the address, spelt otherwise", agent: testAgent(withOwnEngine("Temporal.Team-A.example.:07233", "key")),
			observed: observed(annotatedSecret("key", "other.example:7233, temporal.team-a.example:7233")),
			want: func(t *testing.T, r *Resolved) {
				if r.ClusterEngine != "" || string(r.EngineCredentials.APIKey) != "credential" || r.EngineID != testEngineID {
					t.Errorf("resolved %q, key %q, ID %q", r.ClusterEngine, r.EngineCredentials.APIKey, r.EngineID)
				}
			},
		},
		{
			name: "an engine of the namespace's own that did not say who it is", agent: testAgent(withOwnEngine("temporal.team-a.example:7233", "key")),
			observed: func() Observed {
				o := observed(annotatedSecret("key", "temporal.team-a.example:7233"))
				o.NamespaceEngineID, o.NamespaceEngineError = "", "connection refused"
				return o
			}(),
			wantReason: agentsv1.ReasonEngineUnavailable, wantMessage: "could not ask the engine at temporal.team-a.example:7233 who it is: connection refused",
		},
		{
			name: "workers of engine 0.7.0 for a new Agent run under its own names", agent: testAgent(withEngineVersion("0.7.0")), observed: observed(),
			want: func(t *testing.T, r *Resolved) {
				if r.Names != tenancy.Tenant("team", "SupportAgent") || r.SharedTaskQueue != "" {
					t.Errorf("names = %v, shared task queue %q; want its own", r.Names, r.SharedTaskQueue)
				}
			},
		},
		{
			name: "an agent budget on workers of engine 0.7.0 under the Agent's own names",
			agent: testAgent(withEngineVersion("0.7.0"), func(a *agentsv1.Agent) {
				a.Spec.SpendLimit = &agentsv1.SpendLimitSpec{Agent: &agentsv1.AgentBudget{Tokens: ptrTo(int64(1000))}}
			}),
			observed:   observed(),
			wantReason: agentsv1.ReasonAgentBudgetNeedsEngine, wantMessage: "spec.spendLimit.agent needs workers of engine 0.8.0 or later",
		},
		{
			name:     "workers of engine 0.7.0 for an Agent an earlier operator ran under the shared names",
			agent:    testAgent(withEngineVersion("0.7.0"), func(a *agentsv1.Agent) { a.Status.TaskQueue = "stepwise/SupportAgent" }),
			observed: observed(),
			want: func(t *testing.T, r *Resolved) {
				if r.Names != tenancy.Shared("SupportAgent") || r.SharedTaskQueue != "" {
					t.Errorf("names = %v, shared task queue %q; want the shared names", r.Names, r.SharedTaskQueue)
				}
			},
		},
		{
			name:  "engine 0.8.0 for an Agent whose sessions run under the shared names",
			agent: testAgent(func(a *agentsv1.Agent) { a.Status.SharedTaskQueue = "stepwise/SupportAgent" }), observed: observed(),
			want: func(t *testing.T, r *Resolved) {
				if r.Names != tenancy.Tenant("team", "SupportAgent") || r.SharedTaskQueue != "stepwise/SupportAgent" {
					t.Errorf("names = %v, shared task queue %q; want its own, moving sessions from the shared queue", r.Names, r.SharedTaskQueue)
				}
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			defaults := testDefaults
			if tt.defaults != nil {
				defaults = *tt.defaults
			}
			resolved, blocker := Resolve(tt.agent, tt.observed, defaults)
			switch {
			case tt.want != nil && blocker != nil:
				t.Fatalf("Resolve() blocked: %v", blocker)
			case tt.want != nil:
				tt.want(t, resolved)
				return
			case blocker == nil:
				t.Fatalf("Resolve() = %+v, want blocker %s", resolved, tt.wantReason)
			}
			if blocker.Reason != tt.wantReason || !strings.Contains(blocker.Message, tt.wantMessage) {
				t.Errorf("blocker = %s: %q, want %s containing %q", blocker.Reason, blocker.Message, tt.wantReason, tt.wantMessage)
			}
			if strings.Contains(blocker.Message, "credential\"") || strings.Contains(blocker.Message, "=credential") {
				t.Errorf("message %q repeats a Secret value", blocker.Message)
			}
		})
	}
}

func TestNamespaceEngineWorkersReadTheNamespacesSecrets(t *testing.T) {
	agent := testAgent(withOwnEngine("temporal.team-a.example:7233", "key"))
	w := render(t, agent, observed(annotatedSecret("key", "temporal.team-a.example:7233")))
	if w.EngineSecret != nil {
		t.Error("an engine of the namespace's own got a copy of its credentials")
	}
	if w.Config.Engine.APIKey == nil || w.Config.Engine.APIKey.Secret != "key" {
		t.Errorf("the API key comes from %+v, want the namespace's Secret key", w.Config.Engine.APIKey)
	}
}

func TestClusterEngineCredentialsReachTheWorkersInASecretOfTheirOwn(t *testing.T) {
	ce := readyClusterEngine("shared", func(ce *agentsv1.ClusterEngine) {
		ce.Spec.TLS = &agentsv1.EngineTLS{SecretRef: &agentsv1.SecretReference{Name: "engine-tls"}}
		ce.Spec.APIKeySecretRef = &agentsv1.SecretKeyReference{Name: "engine", Key: "api-key"}
	})
	obs := observed(ce)
	obs.EngineSecrets = map[string]*corev1.Secret{
		"engine":     secret("engine", map[string]string{"api-key": "k"}),
		"engine-tls": secret("engine-tls", map[string]string{TLSCAKey: "ca", TLSCertKey: "cert", TLSPrivateKeyKey: "key"}),
	}
	w := render(t, testAgent(), obs)
	if w.EngineSecret == nil || *w.EngineSecret.Name != EngineSecretName("support") || *w.EngineSecret.Namespace != "team" {
		t.Fatalf("engine Secret = %+v, want the Agent's own", w.EngineSecret)
	}
	if got := w.EngineSecret.Data; string(got[EngineAPIKeyKey]) != "k" || string(got[TLSCertKey]) != "cert" || len(got) != 4 {
		t.Errorf("engine Secret keys = %v", got)
	}
	if owners := w.EngineSecret.OwnerReferences; len(owners) != 1 || *owners[0].UID != "uid-1" {
		t.Errorf("engine Secret owners = %+v, want the Agent", owners)
	}
	tls := w.Config.Engine.TLS
	if tls == nil || tls.CertFile == "" || tls.CAFile == "" || w.Config.Engine.APIKey.Secret != EngineSecretName("support") {
		t.Errorf("the workers' engine = %+v, want the copy's files and key", w.Config.Engine)
	}
	if strings.Contains(string(w.ConfigDocument), `"k"`) || strings.Contains(string(w.ConfigDocument), "cert\"") {
		t.Error("the config document holds a credential")
	}
}

func ptrTo[T any](v T) *T { return &v }
