// Package engineflags binds the command-line flags that name the default
// engine: the one Agents without spec.engine use. The operator and the
// gateway take the same flags, so an install sets them once for both.
package engineflags

import (
	"errors"
	"flag"
	"fmt"
	"strings"

	agentsv1 "github.com/stepwise-run/stepwise/api/v1alpha1"
	"github.com/stepwise-run/stepwise/internal/render"
)

// Flags hold the default engine's flags once parsed.
type Flags struct {
	Address, Namespace    string
	TLS                   bool
	TLSSecret, ServerName string
	APIKeySecret          string
}

// Bind registers the flags on fs.
func Bind(fs *flag.FlagSet) *Flags {
	f := &Flags{}
	fs.StringVar(&f.Address, "default-engine-address", "",
		"host:port of the Temporal frontend for Agents without spec.engine; empty means such Agents have no engine: the operator does not apply them and the gateway does not serve them.")
	fs.StringVar(&f.Namespace, "default-engine-namespace", "default", "Temporal namespace for Agents without spec.engine.")
	fs.BoolVar(&f.TLS, "default-engine-tls", false, "Use TLS to the default engine.")
	fs.StringVar(&f.TLSSecret, "default-engine-tls-secret", "",
		"Secret, in each Agent's namespace, with ca.crt and/or tls.crt and tls.key for the default engine; implies --default-engine-tls.")
	fs.StringVar(&f.ServerName, "default-engine-tls-server-name", "", "Name the default engine's certificate is checked against.")
	fs.StringVar(&f.APIKeySecret, "default-engine-api-key-secret", "",
		"NAME/KEY of a Secret, in each Agent's namespace, holding an API key for the default engine; needs TLS.")
	return f
}

// Engine builds the default engine from the flags, with the rules the API
// applies to spec.engine; nil when no address is set.
func (f *Flags) Engine() (*agentsv1.EngineSpec, error) {
	if f.Address == "" {
		return nil, nil
	}
	if err := render.CheckEngineAddress(f.Address); err != nil {
		return nil, fmt.Errorf("--default-engine-address: %w", err)
	}
	engine := &agentsv1.EngineSpec{Address: f.Address, Namespace: f.Namespace}
	if f.TLS || f.TLSSecret != "" || f.ServerName != "" {
		engine.TLS = &agentsv1.EngineTLS{ServerName: f.ServerName}
		if f.TLSSecret != "" {
			engine.TLS.SecretRef = &agentsv1.SecretReference{Name: f.TLSSecret}
		}
	}
	if f.APIKeySecret != "" {
		name, key, ok := strings.Cut(f.APIKeySecret, "/")
		if !ok || name == "" || key == "" {
			return nil, fmt.Errorf("--default-engine-api-key-secret is %q; want NAME/KEY", f.APIKeySecret)
		}
		if engine.TLS == nil {
			return nil, errors.New("--default-engine-api-key-secret needs --default-engine-tls: the API key must not travel in clear text")
		}
		engine.APIKeySecretRef = &agentsv1.SecretKeyReference{Name: name, Key: key}
	}
	return engine, nil
}
