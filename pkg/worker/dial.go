package worker

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"os"

	"go.temporal.io/sdk/client"
	temporallog "go.temporal.io/sdk/log"

	"github.com/stepwise-run/stepwise/pkg/workerconfig"
)

// Dial connects to Temporal as the configuration says: TLS with the given
// authority, client certificate and server name, and an API key from the
// environment. Options set the rest, such as the metrics handler.
func Dial(ctx context.Context, e workerconfig.Engine, logger *slog.Logger, options ...func(*client.Options)) (client.Client, error) {
	opts := client.Options{HostPort: e.Address, Namespace: e.Namespace, Logger: temporallog.NewStructuredLogger(logger)}
	for _, o := range options {
		o(&opts)
	}
	if e.TLS != nil {
		tlsConfig, err := clientTLS(*e.TLS)
		if err != nil {
			return nil, err
		}
		opts.ConnectionOptions.TLS = tlsConfig
	}
	if e.APIKey != nil {
		key, err := e.APIKey.Lookup()
		if err != nil {
			return nil, fmt.Errorf("engine.apiKey: %w", err)
		}
		opts.Credentials = client.NewAPIKeyStaticCredentials(key)
	}
	c, err := client.DialContext(ctx, opts)
	if err != nil {
		return nil, fmt.Errorf("connecting to Temporal at %s, namespace %s: %w", e.Address, e.Namespace, err)
	}
	return c, nil
}

func clientTLS(t workerconfig.TLS) (*tls.Config, error) {
	cfg := &tls.Config{ServerName: t.ServerName, MinVersion: tls.VersionTLS12}
	if t.CAFile != "" {
		pem, err := os.ReadFile(t.CAFile)
		if err != nil {
			return nil, fmt.Errorf("engine.tls.caFile: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("engine.tls.caFile %s holds no PEM certificate", t.CAFile)
		}
		cfg.RootCAs = pool
	}
	if (t.CertFile == "") != (t.KeyFile == "") {
		return nil, errors.New("engine.tls needs both certFile and keyFile, or neither")
	}
	if t.CertFile != "" {
		cert, err := tls.LoadX509KeyPair(t.CertFile, t.KeyFile)
		if err != nil {
			return nil, fmt.Errorf("engine.tls client certificate: %w", err)
		}
		cfg.Certificates = []tls.Certificate{cert}
	}
	return cfg, nil
}
