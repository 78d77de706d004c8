package engineadmin

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	agentsv1 "github.com/stepwise-run/stepwise/api/v1alpha1"
	"github.com/stepwise-run/stepwise/internal/render"
	"github.com/stepwise-run/stepwise/internal/version"
)

// testPEM is a self-signed certificate and its key, made once.
var testPEM = func() (pair struct{ cert, key string }) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		panic(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "engine-test"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, DNSNames: []string{"localhost"},
		KeyUsage:    x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth, x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		panic(err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		panic(err)
	}
	pair.cert = string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}))
	pair.key = string(pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}))
	return pair
}()

const testAPIKey = "sk-engine-0123456789-never-printed"

var testDefaults = render.Defaults{
	DefaultEngine:         "shared",
	AllowNamespaceEngines: true,
	WorkerImage:           "worker:stock",
	WorkerEngineVersion:   version.EngineVersion,
}

type agentOption func(*agentsv1.Agent)

func testAgent(opts ...agentOption) *agentsv1.Agent {
	a := &agentsv1.Agent{
		ObjectMeta: metav1.ObjectMeta{Namespace: "team", Name: "support", Generation: 1},
		Spec: agentsv1.AgentSpec{
			FlowType: "SupportAgent",
			Model:    agentsv1.ModelSpec{Provider: agentsv1.ModelProviderScripted, Name: "demo"},
			Engine:   &agentsv1.EngineSpec{Address: "temporal.prod:7233", Namespace: "prod"},
		},
	}
	for _, o := range opts {
		o(a)
	}
	return a
}

func withTLS(secret, serverName string) agentOption {
	return func(a *agentsv1.Agent) {
		a.Spec.Engine.TLS = &agentsv1.EngineTLS{ServerName: serverName}
		if secret != "" {
			a.Spec.Engine.TLS.SecretRef = &agentsv1.SecretReference{Name: secret}
		}
	}
}

func withAPIKey(secret, key string) agentOption {
	return func(a *agentsv1.Agent) {
		a.Spec.Engine.APIKeySecretRef = &agentsv1.SecretKeyReference{Name: secret, Key: key}
	}
}

func withClusterEngine() agentOption { return func(a *agentsv1.Agent) { a.Spec.Engine = nil } }

// secret is a Secret of the Agent's namespace that may be sent to the
// Agent's engine.
func secret(name string, data map[string]string) *corev1.Secret {
	s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "team", Name: name,
		Annotations: map[string]string{agentsv1.EngineAddressesAnnotation: "temporal.prod:7233"}}, Data: map[string][]byte{}}
	for k, v := range data {
		s.Data[k] = []byte(v)
	}
	return s
}

func secretsByName(secrets ...*corev1.Secret) map[string]*corev1.Secret {
	out := map[string]*corev1.Secret{}
	for _, s := range secrets {
		out[s.Name] = s
	}
	return out
}

// clusterEngine is the default ClusterEngine, with an API key from the
// operator's namespace.
func clusterEngine() *agentsv1.ClusterEngine {
	return &agentsv1.ClusterEngine{
		ObjectMeta: metav1.ObjectMeta{Name: "shared", Generation: 1},
		Spec: agentsv1.ClusterEngineSpec{Address: "temporal.default:7233", NamespaceSelector: &metav1.LabelSelector{},
			TLS: &agentsv1.EngineTLS{}, APIKeySecretRef: &agentsv1.SecretKeyReference{Name: "engine-key", Key: "token"}},
		Status: agentsv1.ClusterEngineStatus{ObservedGeneration: 1, NamespaceID: "engine-id",
			Conditions: []metav1.Condition{{Type: agentsv1.ConditionReady, Status: metav1.ConditionTrue, Reason: agentsv1.ReasonReconciled}}},
	}
}

// resolve resolves the Agent as the controller does, against the Secrets
// it read: the Agent's namespace's, or the ClusterEngine's.
func resolve(t *testing.T, agent *agentsv1.Agent, secrets map[string]*corev1.Secret) *render.Resolved {
	t.Helper()
	r, blocker := render.Resolve(agent, render.Observed{Secrets: secrets, EngineSecrets: secrets, ClusterEngine: clusterEngine(),
		NamespaceEngineID: "engine-id"}, testDefaults)
	if blocker != nil {
		t.Fatalf("Resolve: %v", blocker)
	}
	return r
}

func TestConnectionFor(t *testing.T) {
	caOnly := secret("engine-tls", map[string]string{render.TLSCAKey: testPEM.cert})
	mutual := secret("engine-tls", map[string]string{render.TLSCAKey: testPEM.cert,
		render.TLSCertKey: testPEM.cert, render.TLSPrivateKeyKey: testPEM.key})
	certOnly := secret("engine-tls", map[string]string{render.TLSCertKey: testPEM.cert, render.TLSPrivateKeyKey: testPEM.key})
	apiKey := secret("engine-key", map[string]string{"token": testAPIKey})

	for _, tc := range []struct {
		name    string
		agent   *agentsv1.Agent
		secrets []*corev1.Secret
		want    Connection
		wantErr string
	}{{
		name:  "no TLS",
		agent: testAgent(),
		want:  Connection{Address: "temporal.prod:7233", Namespace: "prod"},
	}, {
		name:  "TLS with the system's authorities",
		agent: testAgent(withTLS("", "temporal.example")),
		want:  Connection{Address: "temporal.prod:7233", Namespace: "prod", TLS: &TLS{ServerName: "temporal.example"}},
	}, {
		name:    "CA only",
		agent:   testAgent(withTLS("engine-tls", "")),
		secrets: []*corev1.Secret{caOnly},
		want:    Connection{Address: "temporal.prod:7233", Namespace: "prod", TLS: &TLS{CAPEM: []byte(testPEM.cert)}},
	}, {
		name:    "client certificate and CA",
		agent:   testAgent(withTLS("engine-tls", "temporal.example")),
		secrets: []*corev1.Secret{mutual},
		want: Connection{Address: "temporal.prod:7233", Namespace: "prod", TLS: &TLS{CAPEM: []byte(testPEM.cert),
			ClientCertPEM: []byte(testPEM.cert), ClientKeyPEM: []byte(testPEM.key), ServerName: "temporal.example"}},
	}, {
		name:    "client certificate with the system's authorities",
		agent:   testAgent(withTLS("engine-tls", "")),
		secrets: []*corev1.Secret{certOnly},
		want: Connection{Address: "temporal.prod:7233", Namespace: "prod", TLS: &TLS{
			ClientCertPEM: []byte(testPEM.cert), ClientKeyPEM: []byte(testPEM.key)}},
	}, {
		name:    "API key",
		agent:   testAgent(withTLS("", ""), withAPIKey("engine-key", "token")),
		secrets: []*corev1.Secret{apiKey},
		want:    Connection{Address: "temporal.prod:7233", Namespace: "prod", APIKey: testAPIKey, TLS: &TLS{}},
	}, {
		name:    "the ClusterEngine's API key, from the operator's namespace",
		agent:   testAgent(withClusterEngine()),
		secrets: []*corev1.Secret{apiKey},
		want:    Connection{Address: "temporal.default:7233", Namespace: "default", APIKey: testAPIKey, TLS: &TLS{}},
	}, {
		name:    "ca.crt is no certificate",
		agent:   testAgent(withTLS("engine-tls", "")),
		secrets: []*corev1.Secret{secret("engine-tls", map[string]string{render.TLSCAKey: "not-a-pem-" + testAPIKey})},
		wantErr: `engine TLS: ca.crt holds no PEM certificate`,
	}, {
		name:  "tls.key does not belong to tls.crt",
		agent: testAgent(withTLS("engine-tls", "")),
		secrets: []*corev1.Secret{secret("engine-tls", map[string]string{
			render.TLSCertKey: testPEM.cert, render.TLSPrivateKeyKey: "-----BEGIN EC PRIVATE KEY-----\nAAAA\n-----END EC PRIVATE KEY-----\n"})},
		wantErr: `engine TLS: tls.crt and tls.key are not a certificate and its key`,
	}} {
		t.Run(tc.name, func(t *testing.T) {
			resolved := resolve(t, tc.agent, secretsByName(tc.secrets...))
			got, err := ConnectionFor(resolved)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("ConnectionFor() error = %v, want one containing %q", err, tc.wantErr)
				}
				assertNoSecret(t, err.Error(), tc.secrets...)
				return
			}
			if err != nil {
				t.Fatalf("ConnectionFor() error = %v", err)
			}
			if got.Key() != tc.want.Key() {
				t.Errorf("ConnectionFor() = %s, want %s", describe(got), describe(tc.want))
			}
		})
	}
}

// describe shows every field of a Connection, for test failures only.
func describe(c Connection) string {
	s := fmt.Sprintf("{Address:%q Namespace:%q APIKey:%q", c.Address, c.Namespace, c.APIKey)
	if c.TLS != nil {
		s += fmt.Sprintf(" TLS:{CA:%d bytes Cert:%d bytes Key:%d bytes ServerName:%q}",
			len(c.TLS.CAPEM), len(c.TLS.ClientCertPEM), len(c.TLS.ClientKeyPEM), c.TLS.ServerName)
	}
	return s + "}"
}

// assertNoSecret fails when text holds any value, or any line of a PEM
// value, of the Secrets.
func assertNoSecret(t *testing.T, text string, secrets ...*corev1.Secret) {
	t.Helper()
	for _, s := range secrets {
		for k, v := range s.Data {
			for _, line := range strings.Split(string(v), "\n") {
				if len(line) >= 8 && !strings.HasPrefix(line, "-----") && strings.Contains(text, line) {
					t.Errorf("%q shows the value of key %s of Secret %s", text, k, s.Name)
				}
			}
		}
	}
}

func TestConnectionKey(t *testing.T) {
	base := Connection{Address: "temporal:7233", Namespace: "prod", APIKey: testAPIKey,
		TLS: &TLS{CAPEM: []byte(testPEM.cert), ClientCertPEM: []byte(testPEM.cert), ClientKeyPEM: []byte(testPEM.key), ServerName: "t"}}
	same := base
	same.TLS = &TLS{CAPEM: []byte(testPEM.cert), ClientCertPEM: []byte(testPEM.cert), ClientKeyPEM: []byte(testPEM.key), ServerName: "t"}
	if base.Key() != same.Key() {
		t.Errorf("equal connections have different keys")
	}
	changes := map[string]func(*Connection){
		"address":   func(c *Connection) { c.Address = "temporal:7234" },
		"namespace": func(c *Connection) { c.Namespace = "dev" },
		"API key":   func(c *Connection) { c.APIKey += "x" },
		"no TLS":    func(c *Connection) { c.TLS = nil },
		"empty TLS": func(c *Connection) { c.TLS = &TLS{} },
		"CA":        func(c *Connection) { c.TLS.CAPEM = nil },
		"cert":      func(c *Connection) { c.TLS.ClientCertPEM = []byte("x") },
		"key":       func(c *Connection) { c.TLS.ClientKeyPEM = nil },
		"server":    func(c *Connection) { c.TLS.ServerName = "u" },
		// Moving bytes between fields is a different connection.
		"shifted": func(c *Connection) { c.Address, c.Namespace = "temporal:7233p", "rod" },
	}
	for name, change := range changes {
		c := base
		tlsCopy := *base.TLS
		c.TLS = &tlsCopy
		change(&c)
		if c.Key() == base.Key() {
			t.Errorf("changing the %s keeps the key", name)
		}
	}
	shown := base.Key() + base.String() + fmt.Sprintf("%v %+v %#v %s", base, base, base, base)
	for _, secretValue := range []string{testAPIKey, "BEGIN", strings.Split(testPEM.key, "\n")[1]} {
		if strings.Contains(shown, secretValue) {
			t.Errorf("a printed Connection shows secret material: %s", shown)
		}
	}
}
