package controller

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	agentsv1 "github.com/stepwise-run/stepwise/api/v1alpha1"
	"github.com/stepwise-run/stepwise/internal/engineadmin"
	"github.com/stepwise-run/stepwise/internal/render"
)

// EngineIdentities asks an engine who it is, for the claims of Agents that
// name an engine of their namespace's own; a ClusterEngine's status says
// it for the Agents on it.
type EngineIdentities interface {
	Identity(ctx context.Context, conn engineadmin.Connection) (engineadmin.Identity, error)
}

// observeEngine reads what the Agent's engine takes: its ClusterEngine, that
// engine's Secrets in the operator's namespace and the labels of the
// Agent's namespace; or, for an engine of the namespace's own that the
// operator may use, who the engine is. It dials an engine of the
// namespace's own only once the engine is allowed and its credentials'
// Secrets name its address, so no credential is presented where its owner
// did not say.
func (r *AgentReconciler) observeEngine(ctx context.Context, agent *agentsv1.Agent, observed *render.Observed) error {
	if own, ok := render.NamespaceEngine(agent); ok {
		if !r.Defaults.AllowNamespaceEngines || render.CheckCredentialAddresses("spec.engine", own, observed.Secrets) != nil {
			return nil // Resolve says why
		}
		creds, b := render.ReadEngineCredentials("spec.engine", own, observed.Secrets)
		if b != nil {
			return nil
		}
		if r.Identities == nil {
			observed.NamespaceEngineError = "the operator has no connection to engines"
			return nil
		}
		conn, err := engineadmin.ConnectionOf(own, creds)
		if err == nil {
			var id engineadmin.Identity
			if id, err = r.Identities.Identity(ctx, conn); err == nil {
				observed.NamespaceEngineID = id.NamespaceID
			}
		}
		if err != nil {
			observed.NamespaceEngineError = err.Error()
		}
		return nil
	}
	name := render.ClusterEngineName(agent, r.Defaults)
	if name == "" {
		return nil
	}
	ce := &agentsv1.ClusterEngine{}
	if err := r.Get(ctx, client.ObjectKey{Name: name}, ce); err != nil {
		if apierrors.IsNotFound(err) {
			return nil
		}
		return fmt.Errorf("reading ClusterEngine %s: %w", name, err)
	}
	observed.ClusterEngine = ce
	secrets, err := secretsByName(ctx, r.APIReader, r.OperatorNamespace, secretNames(render.EngineSecretUses("", render.ClusterEngineSpecOf(ce))))
	if err != nil {
		return err
	}
	observed.EngineSecrets = secrets
	ns := &metav1.PartialObjectMetadata{}
	ns.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("Namespace"))
	if err := r.Get(ctx, client.ObjectKey{Name: agent.Namespace}, ns); err != nil {
		return fmt.Errorf("reading the labels of namespace %s: %w", agent.Namespace, err)
	}
	observed.NamespaceLabels = ns.Labels
	return nil
}

// Identity implements EngineIdentities. An engine's identity changes only
// when its namespace is made anew, so an answer is kept for identityTTL,
// and a failure for identityFailureTTL, so that an engine that never
// answers costs one dial a while, not one per pass.
func (e *Engines) Identity(ctx context.Context, conn engineadmin.Connection) (engineadmin.Identity, error) {
	key := conn.Key()
	e.mu.Lock()
	answer, ok := e.identities[key]
	e.mu.Unlock()
	if ok && (answer.err == nil && time.Since(answer.at) < identityTTL || answer.err != nil && time.Since(answer.at) < identityFailureTTL) {
		return answer.identity, answer.err
	}
	id, err := e.Client.Identity(ctx, conn)
	e.mu.Lock()
	if e.identities == nil {
		e.identities = map[string]identityAnswer{}
	}
	e.identities[key] = identityAnswer{identity: id, err: err, at: time.Now()}
	e.mu.Unlock()
	return id, err
}

// identityAnswer is what an engine last said of itself.
type identityAnswer struct {
	identity engineadmin.Identity
	err      error
	at       time.Time
}

const (
	identityTTL        = 10 * time.Minute
	identityFailureTTL = 30 * time.Second
)
