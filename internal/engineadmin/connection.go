package engineadmin

import (
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"

	"go.temporal.io/sdk/client"

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
// controller resolved: the engine and the credentials it presents, read
// where their owner keeps them. Errors say which material is wrong, never
// what it holds.
func ConnectionFor(r *render.Resolved) (Connection, error) {
	if r == nil || r.Agent == nil {
		return Connection{}, errors.New("no resolved Agent")
	}
	return ConnectionOf(r.Engine, r.EngineCredentials)
}

// ConnectionOf is the connection to an engine with its credentials.
func ConnectionOf(engine agentsv1.EngineSpec, creds render.EngineCredentials) (Connection, error) {
	conn := Connection{Address: engine.Address, Namespace: engine.Namespace, APIKey: string(creds.APIKey)}
	if engine.TLS != nil {
		conn.TLS = &TLS{CAPEM: creds.CA, ClientCertPEM: creds.ClientCert, ClientKeyPEM: creds.Key, ServerName: engine.TLS.ServerName}
		if _, err := conn.TLS.config(); err != nil {
			return Connection{}, fmt.Errorf("engine TLS: %w", err)
		}
	}
	return conn, nil
}
