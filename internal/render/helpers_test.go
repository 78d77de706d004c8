package render

import (
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	agentsv1 "github.com/stepwise-run/stepwise/api/v1alpha1"
	"github.com/stepwise-run/stepwise/internal/version"
)

var testDefaults = Defaults{
	DefaultEngine:         "shared",
	AllowNamespaceEngines: true,
	WorkerImage:           "worker:stock",
	WorkerEngineVersion:   version.EngineVersion,
	MediaHostPathRoots:    []string{"team:/media"},
}

// testEngineID is what the test ClusterEngine's engine says of itself.
const testEngineID = "5b0b1c8e-0000-4000-8000-00000000e1d1"

// readyClusterEngine is a ClusterEngine of every namespace that the
// operator reached.
func readyClusterEngine(name string, mutate ...func(*agentsv1.ClusterEngine)) *agentsv1.ClusterEngine {
	ce := &agentsv1.ClusterEngine{
		ObjectMeta: metav1.ObjectMeta{Name: name, Generation: 1},
		Spec:       agentsv1.ClusterEngineSpec{Address: "temporal:7233", Namespace: "default", NamespaceSelector: &metav1.LabelSelector{}},
		Status:     agentsv1.ClusterEngineStatus{ObservedGeneration: 1, Conditions: readyConditions, NamespaceID: testEngineID},
	}
	for _, m := range mutate {
		m(ce)
	}
	return ce
}

type agentOption func(*agentsv1.Agent)

func testAgent(opts ...agentOption) *agentsv1.Agent {
	a := &agentsv1.Agent{
		ObjectMeta: metav1.ObjectMeta{Namespace: "team", Name: "support", UID: "uid-1", Generation: 1},
		Spec: agentsv1.AgentSpec{
			FlowType: "SupportAgent",
			Model:    agentsv1.ModelSpec{Provider: agentsv1.ModelProviderScripted, Name: "demo"},
		},
	}
	for _, o := range opts {
		o(a)
	}
	return a
}

func withToolSources(names ...string) agentOption {
	return func(a *agentsv1.Agent) {
		for _, n := range names {
			a.Spec.ToolSources = append(a.Spec.ToolSources, agentsv1.LocalObjectReference{Name: n})
		}
	}
}

func withModelKey(secret, key string) agentOption {
	return func(a *agentsv1.Agent) {
		a.Spec.Model = agentsv1.ModelSpec{Provider: agentsv1.ModelProviderOpenAI, Name: "gpt-5-mini",
			APIKeySecretRef: &agentsv1.SecretKeyReference{Name: secret, Key: key}}
	}
}

func withEngineTLS(secret string) agentOption {
	return func(a *agentsv1.Agent) {
		a.Spec.Engine = &agentsv1.EngineSpec{Address: "temporal.cloud:7233", Namespace: "prod",
			TLS: &agentsv1.EngineTLS{SecretRef: &agentsv1.SecretReference{Name: secret}}}
	}
}

func withMediaStoreRef(name string) agentOption {
	return func(a *agentsv1.Agent) { a.Spec.MediaStore = &agentsv1.LocalObjectReference{Name: name} }
}

var readyConditions = []metav1.Condition{{Type: agentsv1.ConditionReady, Status: metav1.ConditionTrue, Reason: agentsv1.ReasonReconciled}}

func readyToolSource(name string, mutate ...func(*agentsv1.ToolSource)) *agentsv1.ToolSource {
	ts := &agentsv1.ToolSource{
		ObjectMeta: metav1.ObjectMeta{Namespace: "team", Name: name, Generation: 1},
		Spec:       agentsv1.ToolSourceSpec{MCP: agentsv1.MCPServer{Stdio: &agentsv1.MCPStdio{Command: "mcp-" + name}}},
		Status:     agentsv1.ToolSourceStatus{ObservedGeneration: 1, Conditions: readyConditions},
	}
	for _, m := range mutate {
		m(ts)
	}
	return ts
}

func readyMediaStore(name string, mutate ...func(*agentsv1.MediaStore)) *agentsv1.MediaStore {
	ms := &agentsv1.MediaStore{
		ObjectMeta: metav1.ObjectMeta{Namespace: "team", Name: name, Generation: 1},
		Spec:       agentsv1.MediaStoreSpec{LocalDirectory: &agentsv1.LocalDirectoryMediaStore{Root: "/media"}},
		Status:     agentsv1.MediaStoreStatus{ObservedGeneration: 1, Conditions: readyConditions},
	}
	for _, m := range mutate {
		m(ms)
	}
	return ms
}

func secret(name string, data map[string]string) *corev1.Secret {
	s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "team", Name: name}, Data: map[string][]byte{}}
	for k, v := range data {
		s.Data[k] = []byte(v)
	}
	return s
}

// observed is what the controller would read: the objects given, and the
// default ClusterEngine unless another is given. The engine of an Agent's
// own answers who it is, as the test ClusterEngine's.
func observed(objs ...any) Observed {
	o := Observed{ToolSources: map[string]*agentsv1.ToolSource{}, Secrets: map[string]*corev1.Secret{},
		ClusterEngine: readyClusterEngine("shared"), NamespaceLabels: map[string]string{}, NamespaceEngineID: testEngineID}
	for _, obj := range objs {
		switch v := obj.(type) {
		case *agentsv1.ToolSource:
			o.ToolSources[v.Name] = v
		case *agentsv1.MediaStore:
			o.MediaStore = v
		case *corev1.Secret:
			o.Secrets[v.Name] = v
		case *agentsv1.ClusterEngine:
			o.ClusterEngine = v
		}
	}
	return o
}
