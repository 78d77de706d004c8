package worker

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stepwise-run/stepwise/pkg/workerconfig"
)

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
