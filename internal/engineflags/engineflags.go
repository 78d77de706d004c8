// Package engineflags binds the command-line flags that say which engines
// Agents may run on: the default ClusterEngine, whether a namespace may
// name an engine of its own, and where the ClusterEngines' Secrets are.
// The operator and the gateway take the same flags, so an install sets
// them once for both.
package engineflags

import (
	"errors"
	"flag"
	"os"

	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/stepwise-run/stepwise/internal/render"
)

// Flags hold the flags once parsed.
type Flags struct {
	// DefaultEngine names the ClusterEngine of Agents that name none.
	DefaultEngine string
	// AllowNamespaceEngines lets Agents name an engine of their
	// namespace's own in spec.engine.
	AllowNamespaceEngines bool
	// OperatorNamespace is where the ClusterEngines' Secrets are.
	OperatorNamespace string
}

// Bind registers the flags on fs.
func Bind(fs *flag.FlagSet) *Flags {
	f := &Flags{}
	fs.StringVar(&f.DefaultEngine, "default-engine", "",
		"The ClusterEngine of Agents that name none (spec.engineRef); empty means such Agents have no engine: the operator does not apply them and the gateway does not serve them.")
	fs.BoolVar(&f.AllowNamespaceEngines, "allow-namespace-engines", false,
		"Let an Agent name an engine of its namespace's own in spec.engine, with credentials from its namespace's Secrets, each annotated with the addresses it may be sent to. "+
			"Off, Agents run only on the ClusterEngines an administrator made.")
	fs.StringVar(&f.OperatorNamespace, "operator-namespace", os.Getenv("POD_NAMESPACE"),
		"The namespace of the ClusterEngines' Secrets: the operator's own (POD_NAMESPACE).")
	return f
}

// Apply checks the flags and sets what they say in defaults.
func (f *Flags) Apply(defaults *render.Defaults) error {
	if f.DefaultEngine != "" {
		if errs := validation.IsDNS1123Subdomain(f.DefaultEngine); len(errs) > 0 {
			return errors.New("--default-engine " + f.DefaultEngine + " is not a ClusterEngine name: " + errs[0])
		}
	}
	if errs := validation.IsDNS1123Label(f.OperatorNamespace); f.OperatorNamespace == "" || len(errs) > 0 {
		return errors.New("--operator-namespace (or POD_NAMESPACE) must name the operator's namespace, where the ClusterEngines' Secrets are")
	}
	defaults.DefaultEngine = f.DefaultEngine
	defaults.AllowNamespaceEngines = f.AllowNamespaceEngines
	return nil
}
