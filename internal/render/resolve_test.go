package render

import (
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	agentsv1 "github.com/stepwise-run/stepwise/api/v1alpha1"
	"github.com/stepwise-run/stepwise/internal/tenancy"
	"github.com/stepwise-run/stepwise/internal/version"
)

func TestResolveBlockers(t *testing.T) {
	deleted := metav1.Now()
	tests := []struct {
		name        string
		agent       *agentsv1.Agent
		observed    Observed
		defaults    Defaults
		wantReason  string
		wantMessage string
	}{
		{
			name:       "no engine anywhere",
			agent:      testAgent(),
			defaults:   Defaults{WorkerImage: "w"},
			wantReason: agentsv1.ReasonEngineNotConfigured, wantMessage: "the Agent names no engine (spec.engineRef) and the operator has no default ClusterEngine",
		},
		{
			name:       "a missing ToolSource",
			agent:      testAgent(withToolSources("files", "tickets")),
			observed:   observed(readyToolSource("files")),
			wantReason: agentsv1.ReasonToolSourceNotFound, wantMessage: `spec.toolSources[1]: ToolSource "tickets" does not exist`,
		},
		{
			name:  "a ToolSource not reconciled for its generation",
			agent: testAgent(withToolSources("files")),
			observed: observed(readyToolSource("files", func(ts *agentsv1.ToolSource) {
				ts.Generation = 2
			})),
			wantReason: agentsv1.ReasonToolSourceNotReady, wantMessage: `ToolSource "files" has not been reconciled yet`,
		},
		{
			name:  "a ToolSource that is not Ready",
			agent: testAgent(withToolSources("files")),
			observed: observed(readyToolSource("files", func(ts *agentsv1.ToolSource) {
				ts.Status.Conditions = []metav1.Condition{{Type: agentsv1.ConditionReady, Status: metav1.ConditionFalse,
					Reason: agentsv1.ReasonSecretNotFound, Message: "no token"}}
			})),
			wantReason: agentsv1.ReasonToolSourceNotReady, wantMessage: `ToolSource "files" is not Ready (SecretNotFound: no token)`,
		},
		{
			name:  "a ToolSource being deleted",
			agent: testAgent(withToolSources("files")),
			observed: observed(readyToolSource("files", func(ts *agentsv1.ToolSource) {
				ts.DeletionTimestamp = &deleted
			})),
			wantReason: agentsv1.ReasonToolSourceNotReady, wantMessage: `ToolSource "files" is being deleted`,
		},
		{
			name:  "two ToolSources with one source name",
			agent: testAgent(withToolSources("files", "files-v2")),
			observed: observed(readyToolSource("files"), readyToolSource("files-v2", func(ts *agentsv1.ToolSource) {
				ts.Spec.SourceName = "files"
			})),
			wantReason: agentsv1.ReasonToolSourceConflict, wantMessage: `ToolSources "files" and "files-v2" both have source name "files"`,
		},
		{
			name:  "two ToolSources with resource and prompt tools",
			agent: testAgent(withToolSources("a", "b")),
			observed: observed(
				readyToolSource("a", func(ts *agentsv1.ToolSource) { ts.Spec.ResourceAndPromptTools = true }),
				readyToolSource("b", func(ts *agentsv1.ToolSource) { ts.Spec.ResourceAndPromptTools = true })),
			wantReason: agentsv1.ReasonToolSourceConflict, wantMessage: `both enable resourceAndPromptTools`,
		},
		{
			name:       "a missing MediaStore",
			agent:      testAgent(withMediaStoreRef("media")),
			wantReason: agentsv1.ReasonMediaStoreNotFound, wantMessage: `spec.mediaStore: MediaStore "media" does not exist`,
		},
		{
			name:  "a MediaStore being deleted",
			agent: testAgent(withMediaStoreRef("media")),
			observed: observed(readyMediaStore("media", func(ms *agentsv1.MediaStore) {
				ms.DeletionTimestamp = &deleted
			})),
			wantReason: agentsv1.ReasonMediaStoreNotReady, wantMessage: `MediaStore "media" is being deleted`,
		},
		{
			name:  "a hostPath MediaStore outside the allowed host directories, though it reports Ready",
			agent: testAgent(withMediaStoreRef("media")),
			observed: observed(readyMediaStore("media", func(ms *agentsv1.MediaStore) {
				ms.Spec.LocalDirectory.Root = "/srv/media"
			})),
			wantReason:  agentsv1.ReasonMediaStoreNotReady,
			wantMessage: `spec.mediaStore: MediaStore "media" is not usable (HostPathNotAllowed: spec.localDirectory.root: /srv/media`,
		},
		{
			name:        "a hostPath MediaStore when the operator allows no host directory",
			agent:       testAgent(withMediaStoreRef("media")),
			observed:    observed(readyMediaStore("media")),
			defaults:    Defaults{DefaultEngine: "shared", WorkerImage: "w"},
			wantReason:  agentsv1.ReasonMediaStoreNotReady,
			wantMessage: "the operator allows namespace team none); use a PersistentVolumeClaim",
		},
		{
			name:       "a missing model key Secret",
			agent:      testAgent(withModelKey("openai", "api-key")),
			wantReason: agentsv1.ReasonSecretNotFound, wantMessage: `spec.model.apiKeySecretRef: Secret "openai" does not exist`,
		},
		{
			name:       "a model key Secret without the key",
			agent:      testAgent(withModelKey("openai", "api-key")),
			observed:   observed(secret("openai", map[string]string{"key": "x"})),
			wantReason: agentsv1.ReasonSecretKeyNotFound, wantMessage: `spec.model.apiKeySecretRef: Secret "openai" has no key "api-key"`,
		},
		{
			// Another Agent's copy of the engine's key, sent to a model
			// address the tenant chose, would leave with the tenant never
			// having read it.
			name:  "a model key from the operator's copy of an engine's credentials",
			agent: testAgent(withModelKey("other-engine", "api-key")),
			observed: observed(func() *corev1.Secret {
				s := secret("other-engine", map[string]string{"api-key": "k"})
				s.Labels = objectLabels("other", componentEngineCredentials)
				return s
			}()),
			wantReason:  agentsv1.ReasonSecretValueInvalid,
			wantMessage: `spec.model.apiKeySecretRef: Secret "other-engine" holds credentials the operator copied for Agent "other"'s workers; no Agent, ToolSource or MediaStore may reference it`,
		},
		{
			name: "a missing model choice key Secret",
			agent: testAgent(func(a *agentsv1.Agent) {
				a.Spec.ModelChoices = []agentsv1.ModelChoice{{Choice: "large", Model: agentsv1.ModelSpec{
					Provider: agentsv1.ModelProviderOpenAI, Name: "gpt-x", APIKeySecretRef: &agentsv1.SecretKeyReference{Name: "large", Key: "key"}}}}
			}),
			wantReason: agentsv1.ReasonSecretNotFound, wantMessage: `spec.modelChoices[large].model.apiKeySecretRef: Secret "large" does not exist`,
		},
		{
			name:  "a ToolSource header Secret that is missing",
			agent: testAgent(withToolSources("tickets")),
			observed: observed(readyToolSource("tickets", func(ts *agentsv1.ToolSource) {
				ts.Spec.MCP = agentsv1.MCPServer{StreamableHTTP: &agentsv1.MCPStreamableHTTP{URL: "https://t",
					Headers: []agentsv1.HTTPHeader{{Name: "Authorization", ValueFrom: &agentsv1.SecretValueSource{
						SecretKeyRef: agentsv1.SecretKeyReference{Name: "tickets", Key: "token"}}}}}}
			})),
			wantReason:  agentsv1.ReasonSecretNotFound,
			wantMessage: `ToolSource "tickets" spec.mcp.streamableHTTP.headers[Authorization].valueFrom.secretKeyRef: Secret "tickets" does not exist`,
		},
		{
			name:  "a ToolSource header Secret whose value ends in a newline",
			agent: testAgent(withToolSources("tickets")),
			observed: observed(readyToolSource("tickets", func(ts *agentsv1.ToolSource) {
				ts.Spec.MCP = agentsv1.MCPServer{StreamableHTTP: &agentsv1.MCPStreamableHTTP{URL: "https://t",
					Headers: []agentsv1.HTTPHeader{{Name: "Authorization", ValueFrom: &agentsv1.SecretValueSource{
						SecretKeyRef: agentsv1.SecretKeyReference{Name: "tickets", Key: "token"}}}}}}
			}), secret("tickets", map[string]string{"token": "Bearer t0ken\n"})),
			wantReason: agentsv1.ReasonSecretValueInvalid,
			wantMessage: `ToolSource "tickets" spec.mcp.streamableHTTP.headers[Authorization].valueFrom.secretKeyRef: ` +
				`the value of key "token" in Secret "tickets" contains a control character, such as CR or LF, which an HTTP header value cannot carry`,
		},
		{
			name:  "a ToolSource environment Secret with a NUL byte",
			agent: testAgent(withToolSources("files")),
			observed: observed(readyToolSource("files", func(ts *agentsv1.ToolSource) {
				ts.Spec.MCP.Stdio.Env = []agentsv1.ValueVar{{Name: "TOKEN", ValueFrom: &agentsv1.SecretValueSource{
					SecretKeyRef: agentsv1.SecretKeyReference{Name: "files", Key: "token"}}}}
			}), secret("files", map[string]string{"token": "a\x00b"})),
			wantReason:  agentsv1.ReasonSecretValueInvalid,
			wantMessage: `spec.mcp.stdio.env[TOKEN].valueFrom.secretKeyRef: the value of key "token" in Secret "files" contains a NUL byte`,
		},
		{
			name:       "an engine TLS Secret that is missing",
			agent:      testAgent(withEngineTLS("engine-tls")),
			wantReason: agentsv1.ReasonSecretNotFound, wantMessage: `spec.engine.tls.secretRef: Secret "engine-tls" does not exist`,
		},
		{
			name:       "an engine TLS Secret with half a client certificate",
			agent:      testAgent(withEngineTLS("engine-tls")),
			observed:   observed(secret("engine-tls", map[string]string{"tls.crt": "cert"})),
			wantReason: agentsv1.ReasonSecretKeyNotFound, wantMessage: "must have both tls.crt and tls.key",
		},
		{
			name:       "an engine TLS Secret with nothing in it",
			agent:      testAgent(withEngineTLS("engine-tls")),
			observed:   observed(secret("engine-tls", map[string]string{"other": "x"})),
			wantReason: agentsv1.ReasonSecretKeyNotFound, wantMessage: "has none of ca.crt, tls.crt and tls.key",
		},
		{
			name: "a required extra env Secret key",
			agent: testAgent(func(a *agentsv1.Agent) {
				a.Spec.Workers = &agentsv1.WorkersSpec{Env: []corev1.EnvVar{{Name: "CRM_TOKEN", ValueFrom: &corev1.EnvVarSource{
					SecretKeyRef: &corev1.SecretKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: "crm"}, Key: "token"}}}}}
			}),
			wantReason: agentsv1.ReasonSecretNotFound, wantMessage: `spec.workers.env[CRM_TOKEN].valueFrom.secretKeyRef: Secret "crm" does not exist`,
		},
		{
			name: "workers of an engine version the operator does not know",
			agent: testAgent(func(a *agentsv1.Agent) {
				a.Spec.Workers = &agentsv1.WorkersSpec{Image: "team/worker:next", EngineVersion: "9.0.0"}
			}),
			wantReason: agentsv1.ReasonUnknownEngineVersion, wantMessage: `spec.workers.engineVersion "9.0.0" is not an engine version this operator knows`,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			defaults := tt.defaults
			if defaults.WorkerImage == "" {
				defaults = testDefaults
			}
			if tt.observed.ToolSources == nil {
				tt.observed = observed()
			}
			resolved, blocker := Resolve(tt.agent, tt.observed, defaults)
			if blocker == nil {
				t.Fatalf("Resolve() = %+v, want blocker %s", resolved, tt.wantReason)
			}
			if blocker.Reason != tt.wantReason {
				t.Errorf("reason = %s, want %s (message %q)", blocker.Reason, tt.wantReason, blocker.Message)
			}
			if !strings.Contains(blocker.Message, tt.wantMessage) {
				t.Errorf("message = %q, want it to contain %q", blocker.Message, tt.wantMessage)
			}
			if strings.Contains(blocker.Message, "t0ken") {
				t.Errorf("message = %q repeats a Secret value", blocker.Message)
			}
		})
	}
}

func TestResolveSucceeds(t *testing.T) {
	agent := testAgent(withModelKey("openai", "api-key"), withToolSources("files"), withMediaStoreRef("media"),
		func(a *agentsv1.Agent) {
			a.Spec.Workers = &agentsv1.WorkersSpec{Image: "team/worker:2", EngineVersion: version.EngineVersion,
				Env: []corev1.EnvVar{{Name: "OPTIONAL", ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{
					LocalObjectReference: corev1.LocalObjectReference{Name: "absent"}, Key: "k", Optional: new(true)}}}}}
		})
	ms := readyMediaStore("media", func(ms *agentsv1.MediaStore) {
		ms.Spec = agentsv1.MediaStoreSpec{S3: &agentsv1.S3MediaStore{Bucket: "b",
			CredentialsSecretRef: &agentsv1.SecretReference{Name: "s3"}}}
	})
	obs := observed(readyToolSource("files"), ms,
		secret("openai", map[string]string{"api-key": "sk"}),
		secret("s3", map[string]string{S3AccessKeyIDKey: "id", S3SecretAccessKeyKey: "secret", S3SessionTokenKey: "token"}))

	resolved, blocker := Resolve(agent, obs, testDefaults)
	if blocker != nil {
		t.Fatalf("Resolve() blocked: %v", blocker)
	}
	if resolved.WorkerImage != "team/worker:2" || resolved.EngineVersion != version.EngineVersion {
		t.Errorf("worker = %s %s, want the Agent's image and engine version", resolved.WorkerImage, resolved.EngineVersion)
	}
	if resolved.Engine.Address != "temporal:7233" || resolved.Engine.Namespace != "default" || resolved.ClusterEngine != "shared" ||
		resolved.EngineID != testEngineID {
		t.Errorf("engine = %+v (ClusterEngine %q, ID %q), want the default ClusterEngine", resolved.Engine, resolved.ClusterEngine, resolved.EngineID)
	}
	if resolved.Names != tenancy.Tenant("team", "SupportAgent") || resolved.SharedTaskQueue != "" {
		t.Errorf("names = %v, shared task queue %q; want the namespace's own, and no shared queue", resolved.Names, resolved.SharedTaskQueue)
	}
	if !resolved.S3SessionToken {
		t.Error("S3SessionToken = false, want true")
	}
	var keys []string
	for _, d := range resolved.SecretDigests {
		keys = append(keys, d.Secret+"/"+d.Key)
		if len(d.SHA256) != 64 {
			t.Errorf("digest of %s/%s = %q, want a SHA-256", d.Secret, d.Key, d.SHA256)
		}
	}
	want := []string{"openai/api-key", "s3/AWS_ACCESS_KEY_ID", "s3/AWS_SECRET_ACCESS_KEY", "s3/AWS_SESSION_TOKEN"}
	if !slices.Equal(keys, want) {
		t.Errorf("secret digests = %v, want %v", keys, want)
	}
}

func TestEffectiveSourceName(t *testing.T) {
	if got := EffectiveSourceName(readyToolSource("files")); got != "files" {
		t.Errorf("without spec.sourceName = %q, want the name", got)
	}
	named := readyToolSource("files", func(ts *agentsv1.ToolSource) { ts.Spec.SourceName = "docs" })
	if got := EffectiveSourceName(named); got != "docs" {
		t.Errorf("with spec.sourceName = %q, want docs", got)
	}
}

func TestResolveClusterEngineCredentials(t *testing.T) {
	ce := readyClusterEngine("shared", func(ce *agentsv1.ClusterEngine) {
		ce.Spec.TLS = &agentsv1.EngineTLS{SecretRef: &agentsv1.SecretReference{Name: "engine-tls"}, ServerName: "temporal.internal"}
		ce.Spec.APIKeySecretRef = &agentsv1.SecretKeyReference{Name: "engine", Key: "api-key"}
	})
	obs := observed(ce)
	_, blocker := Resolve(testAgent(), obs, testDefaults)
	if blocker == nil || blocker.Reason != agentsv1.ReasonEngineNotReady || strings.Contains(blocker.Message, "engine-tls") {
		t.Fatalf("Resolve() = %v, want EngineNotReady naming none of the administrator's Secrets", blocker)
	}

	obs.EngineSecrets = map[string]*corev1.Secret{
		"engine":     secret("engine", map[string]string{"api-key": "k"}),
		"engine-tls": secret("engine-tls", map[string]string{TLSCAKey: "ca"}),
	}
	// A Secret of the Agent's namespace named like the administrator's is
	// not the engine's.
	obs.Secrets["engine"] = secret("engine", map[string]string{"api-key": "the tenant's"})
	resolved, blocker := Resolve(testAgent(), obs, testDefaults)
	if blocker != nil {
		t.Fatal(blocker)
	}
	if string(resolved.EngineCredentials.APIKey) != "k" || string(resolved.EngineCredentials.CA) != "ca" {
		t.Errorf("credentials = %q, %q; want the ClusterEngine's", resolved.EngineCredentials.APIKey, resolved.EngineCredentials.CA)
	}
	// The workers read them from the Agent's own Secret.
	copySecret := EngineSecretName("support")
	e := resolved.Engine
	if e.APIKeySecretRef == nil || *e.APIKeySecretRef != (agentsv1.SecretKeyReference{Name: copySecret, Key: EngineAPIKeyKey}) ||
		e.TLS == nil || e.TLS.SecretRef == nil || e.TLS.SecretRef.Name != copySecret || e.TLS.ServerName != "temporal.internal" {
		t.Errorf("the workers' engine = %+v, want its credentials from Secret %s", e, copySecret)
	}
	var digested []string
	for _, d := range resolved.SecretDigests {
		digested = append(digested, d.Secret+"/"+d.Key)
	}
	if want := []string{copySecret + "/api-key", copySecret + "/ca.crt"}; !slices.Equal(digested, want) {
		t.Errorf("secret digests = %v, want %v: the ClusterEngine's credentials roll the workers too", digested, want)
	}
	if uses := AgentSecretUses(testAgent()); len(uses) != 0 {
		t.Errorf("AgentSecretUses on a ClusterEngine = %+v, want none of the Agent's namespace", uses)
	}
}
