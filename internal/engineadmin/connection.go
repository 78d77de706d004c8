package engineadmin

import (
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"

	"go.temporal.io/sdk/client"
	corev1 "k8s.io/api/core/v1"

	agentsv1 "github.com/stepwise-run/stepwise/api/v1alpha1"
	"github.com/stepwise-run/stepwise/internal/render"
)

// Connection is everything needed to dial one engine as an Agent's workers
// dial it. It holds secret material, so it prints as its address and
// namespace only; Key identifies it without revealing anything.
type Connection struct {
	// Address is the host:port of the Temporal frontend.
	Address string
	// Namespace is the Temporal namespace of the sessions.
	Namespace string
	// TLS is nil for a plaintext connection.
	TLS *TLS
	// APIKey is sent as a bearer token when set. As in the workers, a key
	// without TLS settings turns on TLS with the system's authorities.
	APIKey string
}

// TLS is the TLS material of a Connection, as bytes read from the engine
// TLS Secret.
type TLS struct {
	// CAPEM verifies the server; empty uses the system's authorities.
	CAPEM []byte
	// ClientCertPEM and ClientKeyPEM are a client certificate and its key,
	// both or neither.
	ClientCertPEM []byte
	ClientKeyPEM  []byte
	// ServerName overrides the name the server's certificate is checked
	// against.
	ServerName string
}

// Key is a digest of every field, so clients can be cached per connection
// and a rotated key or certificate gets a new client. It reveals nothing of
// the key or the PEM contents.
func (c Connection) Key() string {
	h := sha256.New()
	field := func(b []byte) {
		var n [8]byte
		binary.BigEndian.PutUint64(n[:], uint64(len(b)))
		h.Write(n[:])
		h.Write(b)
	}
	field([]byte(c.Address))
	field([]byte(c.Namespace))
	field([]byte(c.APIKey))
	if c.TLS == nil {
		field([]byte("plaintext"))
	} else {
		field([]byte("tls"))
		field(c.TLS.CAPEM)
		field(c.TLS.ClientCertPEM)
		field(c.TLS.ClientKeyPEM)
		field([]byte(c.TLS.ServerName))
	}
	return hex.EncodeToString(h.Sum(nil))
}

// String names the connection for messages and logs, without its secrets.
func (c Connection) String() string {
	return fmt.Sprintf("engine at %s, namespace %s", c.Address, c.Namespace)
}

// GoString keeps %#v from printing the secrets.
func (c Connection) GoString() string { return "engineadmin.Connection{" + c.String() + "}" }

// clientOptions are the SDK options for the connection, built the way the
// worker builds them from its configuration.
func (c Connection) clientOptions() (client.Options, error) {
	opts := client.Options{HostPort: c.Address, Namespace: c.Namespace}
	if c.TLS != nil {
		cfg, err := c.TLS.config()
		if err != nil {
			return client.Options{}, err
		}
		opts.ConnectionOptions.TLS = cfg
	}
	if c.APIKey != "" {
		opts.Credentials = client.NewAPIKeyStaticCredentials(c.APIKey)
	}
	return opts, nil
}

// config builds the TLS configuration. Errors say which material is wrong,
// never what it holds.
func (t *TLS) config() (*tls.Config, error) {
	cfg := &tls.Config{ServerName: t.ServerName, MinVersion: tls.VersionTLS12}
	if len(t.CAPEM) > 0 {
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(t.CAPEM) {
			return nil, fmt.Errorf("%s holds no PEM certificate", render.TLSCAKey)
		}
		cfg.RootCAs = pool
	}
	if (len(t.ClientCertPEM) == 0) != (len(t.ClientKeyPEM) == 0) {
		return nil, fmt.Errorf("a client certificate needs both %s and %s", render.TLSCertKey, render.TLSPrivateKeyKey)
	}
	if len(t.ClientCertPEM) > 0 {
		cert, err := tls.X509KeyPair(t.ClientCertPEM, t.ClientKeyPEM)
		if err != nil {
			return nil, fmt.Errorf("%s and %s are not a certificate and its key: %w", render.TLSCertKey, render.TLSPrivateKeyKey, err)
		}
		cfg.Certificates = []tls.Certificate{cert}
	}
	return cfg, nil
}

// ConnectionFor is the connection an Agent's workers make, from what the
// controller resolved and the Secrets it read, keyed by name. It reads the
// same Secret keys the rendered worker configuration points at, so the
// operator reaches the engine exactly as the workers do. Errors name the
// field and the Secret, never a value.
func ConnectionFor(r *render.Resolved, secrets map[string]*corev1.Secret) (Connection, error) {
	if r == nil || r.Agent == nil {
		return Connection{}, errors.New("no resolved Agent")
	}
	conn := Connection{Address: r.Engine.Address, Namespace: r.Engine.Namespace}
	uses := engineSecretUses(r)
	if b := render.CheckSecrets(uses, secrets); b != nil {
		return Connection{}, errors.New(b.Message)
	}
	for _, use := range uses {
		switch {
		case strings.HasSuffix(use.Field, ".apiKeySecretRef"):
			value, _ := render.SecretValue(secrets[use.Secret], use.Required[0])
			conn.APIKey = string(value)
		case strings.HasSuffix(use.Field, ".tls.secretRef"):
			material, err := tlsMaterial(use, secrets[use.Secret], r.EngineTLS)
			if err != nil {
				return Connection{}, err
			}
			conn.TLS = material
		}
	}
	if r.Engine.TLS != nil {
		if conn.TLS == nil {
			conn.TLS = &TLS{}
		}
		conn.TLS.ServerName = r.Engine.TLS.ServerName
		if _, err := conn.TLS.config(); err != nil {
			return Connection{}, fmt.Errorf("%s: %w", tlsField(uses), err)
		}
	}
	return conn, nil
}

// engineSecretUses are the Secret keys the Agent's engine takes values
// from, with the fields render names them by: render's list for an Agent
// that has only the engine.
func engineSecretUses(r *render.Resolved) []render.SecretUse {
	engineOnly := &agentsv1.Agent{Spec: agentsv1.AgentSpec{Engine: r.Agent.Spec.Engine}}
	return render.AgentSecretUses(engineOnly, &r.Engine)
}

func tlsField(uses []render.SecretUse) string {
	for _, use := range uses {
		if strings.HasSuffix(use.Field, ".tls.secretRef") {
			return use.Field
		}
	}
	return "engine.tls"
}

// tlsMaterial reads the files the worker configuration names: ca.crt when
// the Secret had it at resolve time, tls.crt and tls.key for a client
// certificate.
func tlsMaterial(use render.SecretUse, secret *corev1.Secret, files render.TLSFiles) (*TLS, error) {
	if secret == nil {
		return nil, fmt.Errorf("%s: Secret %q does not exist", use.Field, use.Secret)
	}
	read := func(key string) ([]byte, error) {
		value, ok := render.SecretValue(secret, key)
		if !ok {
			return nil, fmt.Errorf("%s: Secret %q has no key %q", use.Field, use.Secret, key)
		}
		return value, nil
	}
	out := &TLS{}
	var err error
	if files.CA {
		if out.CAPEM, err = read(render.TLSCAKey); err != nil {
			return nil, err
		}
	}
	if files.ClientCert {
		if out.ClientCertPEM, err = read(render.TLSCertKey); err != nil {
			return nil, err
		}
		if out.ClientKeyPEM, err = read(render.TLSPrivateKeyKey); err != nil {
			return nil, err
		}
	}
	return out, nil
}
