// Package scheme builds the runtime scheme every client of this API needs:
// the built-in kinds and agents.stepwise.run. It lives apart from
// api/v1alpha1 so that what reads the API's types alone, such as the
// session client and the CLI, links none of client-go's kinds.
package scheme

import (
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"

	agentsv1 "github.com/stepwise-run/stepwise/api/v1alpha1"
)

// New returns a scheme with the built-in kinds and this API: the
// operator's, the gateway's, the commands' and the tests'.
func New() (*runtime.Scheme, error) {
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		return nil, err
	}
	if err := agentsv1.AddToScheme(scheme); err != nil {
		return nil, err
	}
	return scheme, nil
}
