package render

import (
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	agentsv1 "github.com/stepwise-run/stepwise/api/v1alpha1"
	"github.com/stepwise-run/stepwise/internal/flowclaim"
	"github.com/stepwise-run/stepwise/internal/rollout"
	"github.com/stepwise-run/stepwise/internal/tenancy"
)

// Keys of the Secret that carries a ClusterEngine's credentials to an
// Agent's workers, in the Agent's namespace.
const (
	EngineAPIKeyKey = "api-key"
)

// EngineSecretName is the Secret in an Agent's namespace that carries its
// ClusterEngine's credentials to its workers, owned by the Agent.
func EngineSecretName(agentName string) string { return agentName + "-engine" }

// EngineSource names where an Agent's engine comes from, for messages.
func EngineSource(agent *agentsv1.Agent, defaults Defaults) string {
	switch {
	case agent.Spec.Engine != nil:
		return "spec.engine"
	case agent.Spec.EngineRef != nil:
		return fmt.Sprintf("spec.engineRef (ClusterEngine %q)", agent.Spec.EngineRef.Name)
	}
	return fmt.Sprintf("the operator's default ClusterEngine %q", defaults.DefaultEngine)
}

// ClusterEngineName is the ClusterEngine an Agent uses: the one it names,
// or the operator's default; "" for an Agent with an engine of its own, or
// when there is neither.
func ClusterEngineName(agent *agentsv1.Agent, defaults Defaults) string {
	switch {
	case agent.Spec.Engine != nil:
		return ""
	case agent.Spec.EngineRef != nil:
		return agent.Spec.EngineRef.Name
	}
	return defaults.DefaultEngine
}

// NamespaceEngine is an Agent's spec.engine with its defaults filled, or
// false when it names none.
func NamespaceEngine(agent *agentsv1.Agent) (agentsv1.EngineSpec, bool) {
	if agent.Spec.Engine == nil {
		return agentsv1.EngineSpec{}, false
	}
	engine := *agent.Spec.Engine.DeepCopy()
	if engine.Namespace == "" {
		engine.Namespace = defaultEngineNamespace
	}
	return engine, true
}

// ClusterEngineSpecOf is a ClusterEngine as an engine spec, with its
// defaults filled; its Secrets are in the operator's namespace.
func ClusterEngineSpecOf(ce *agentsv1.ClusterEngine) agentsv1.EngineSpec {
	engine := agentsv1.EngineSpec{
		Address: ce.Spec.Address, Namespace: ce.Spec.Namespace,
		TLS: ce.Spec.TLS.DeepCopy(), APIKeySecretRef: ce.Spec.APIKeySecretRef.DeepCopy(),
	}
	if engine.Namespace == "" {
		engine.Namespace = defaultEngineNamespace
	}
	return engine
}

// EngineCredentials are the secret values an engine connection presents:
// an API key and a client certificate, and the authorities that verify
// the server. The operator reads them where their owner keeps them and
// never writes them into an object other than the Secret that carries them
// to the workers.
type EngineCredentials struct {
	APIKey              []byte
	CA, ClientCert, Key []byte
}

// secretData is the data of the Secret that carries them to the workers.
func (c EngineCredentials) secretData() map[string][]byte {
	data := map[string][]byte{}
	for key, v := range map[string][]byte{EngineAPIKeyKey: c.APIKey, TLSCAKey: c.CA, TLSCertKey: c.ClientCert, TLSPrivateKeyKey: c.Key} {
		if len(v) > 0 {
			data[key] = v
		}
	}
	return data
}

// EngineSecretUses lists the Secret keys an engine takes values from, with
// field naming the engine in messages.
func EngineSecretUses(field string, engine agentsv1.EngineSpec) []SecretUse {
	uses := keyUse(field+".apiKeySecretRef", engine.APIKeySecretRef)
	if engine.TLS != nil && engine.TLS.SecretRef != nil {
		uses = append(uses, SecretUse{Field: field + ".tls.secretRef", Secret: engine.TLS.SecretRef.Name,
			Optional: []string{TLSCAKey, TLSCertKey, TLSPrivateKeyKey}})
	}
	return uses
}

// ReadEngineCredentials reads an engine's credentials from the Secrets its
// spec names, or says what is missing, naming the field, the Secret and
// the key, never a value.
func ReadEngineCredentials(field string, engine agentsv1.EngineSpec, secrets map[string]*corev1.Secret) (EngineCredentials, *Blocker) {
	var out EngineCredentials
	if b := CheckSecrets(EngineSecretUses(field, engine), secrets); b != nil {
		return out, b
	}
	if ref := engine.APIKeySecretRef; ref != nil {
		out.APIKey, _ = SecretValue(secrets[ref.Name], ref.Key)
	}
	tls := engine.TLS
	if tls == nil || tls.SecretRef == nil {
		return out, nil
	}
	secret, ok := secrets[tls.SecretRef.Name]
	if !ok {
		return out, blocked(agentsv1.ReasonSecretNotFound, "%s.tls.secretRef: Secret %q does not exist", field, tls.SecretRef.Name)
	}
	out.CA, _ = SecretValue(secret, TLSCAKey)
	out.ClientCert, _ = SecretValue(secret, TLSCertKey)
	out.Key, _ = SecretValue(secret, TLSPrivateKeyKey)
	switch {
	case (len(out.ClientCert) == 0) != (len(out.Key) == 0):
		return out, blocked(agentsv1.ReasonSecretKeyNotFound,
			"%s.tls.secretRef: Secret %q must have both %s and %s for a client certificate, or neither",
			field, tls.SecretRef.Name, TLSCertKey, TLSPrivateKeyKey)
	case len(out.CA) == 0 && len(out.ClientCert) == 0:
		return out, blocked(agentsv1.ReasonSecretKeyNotFound,
			"%s.tls.secretRef: Secret %q has none of %s, %s and %s", field, tls.SecretRef.Name, TLSCAKey, TLSCertKey, TLSPrivateKeyKey)
	}
	return out, nil
}

// CheckCredentialAddresses refuses a namespace engine whose Secrets of
// credentials (an API key, a client certificate) do not name its address
// in their agents.stepwise.run/engine-addresses annotation: whoever may
// write an Agent but not the Secret must not be able to have the Secret's
// value presented to an address of their choosing. Authorities alone are
// no secret and need no annotation.
func CheckCredentialAddresses(field string, engine agentsv1.EngineSpec, secrets map[string]*corev1.Secret) *Blocker {
	var credentials []string
	if ref := engine.APIKeySecretRef; ref != nil {
		credentials = append(credentials, ref.Name)
	}
	if tls := engine.TLS; tls != nil && tls.SecretRef != nil {
		if _, cert := SecretValue(secrets[tls.SecretRef.Name], TLSCertKey); cert {
			credentials = append(credentials, tls.SecretRef.Name)
		}
	}
	want := CanonicalEngineAddress(engine.Address)
	for _, name := range credentials {
		secret := secrets[name]
		if secret == nil {
			continue // CheckSecrets names it
		}
		allowed := false
		for _, a := range strings.Split(secret.Annotations[agentsv1.EngineAddressesAnnotation], ",") {
			if a = strings.TrimSpace(a); a != "" && CanonicalEngineAddress(a) == want {
				allowed = true
			}
		}
		if !allowed {
			return blocked(agentsv1.ReasonEngineCredentialNotAllowed,
				"%s: Secret %q holds an engine credential but does not name %s in its %s annotation; whoever writes the Secret adds the address there for the credential to be sent to it",
				field, name, want, agentsv1.EngineAddressesAnnotation)
		}
	}
	return nil
}

// ResolveEngine checks the Agent's engine alone, as Resolve does first: a
// ClusterEngine the namespace may use, or, where the administrator allows
// it, one of the namespace's own. The gateway, which reaches sessions but
// runs no workers, needs no more.
func ResolveEngine(agent *agentsv1.Agent, observed Observed, defaults Defaults) (*Resolved, *Blocker) {
	r := &resolver{agent: agent, observed: observed, out: &Resolved{Agent: agent}}
	if b := r.engine(defaults); b != nil {
		return nil, b
	}
	return r.out, nil
}

// engine resolves the Agent's engine: a ClusterEngine the namespace may
// use, or, where the administrator allows it, one of the namespace's own.
func (r *resolver) engine(defaults Defaults) *Blocker {
	if own, ok := NamespaceEngine(r.agent); ok {
		return r.namespaceEngine(own, defaults)
	}
	name := ClusterEngineName(r.agent, defaults)
	source := EngineSource(r.agent, defaults)
	if name == "" {
		return blocked(agentsv1.ReasonEngineNotConfigured,
			"the Agent names no engine (spec.engineRef) and the operator has no default ClusterEngine (--default-engine)")
	}
	ce := r.observed.ClusterEngine
	if ce == nil || ce.Name != name {
		return blocked(agentsv1.ReasonEngineNotFound, "%s: ClusterEngine %q does not exist", source, name)
	}
	if b := checkNamespaceSelected(ce, r.agent.Namespace, r.observed.NamespaceLabels); b != nil {
		return b
	}
	ready := meta.FindStatusCondition(ce.Status.Conditions, agentsv1.ConditionReady)
	if ready == nil || ready.Status != metav1.ConditionTrue || ce.Status.ObservedGeneration != ce.Generation || ce.Status.NamespaceID == "" {
		return blocked(agentsv1.ReasonEngineNotReady, "%s: ClusterEngine %q is not Ready yet", source, name)
	}
	spec := ClusterEngineSpecOf(ce)
	creds, b := ReadEngineCredentials(fmt.Sprintf("ClusterEngine %q spec", name), spec, r.observed.EngineSecrets)
	if b != nil {
		// The administrator's Secrets are not the tenant's to see named.
		return blocked(agentsv1.ReasonEngineNotReady, "%s: ClusterEngine %q is not usable: its credentials are incomplete", source, name)
	}
	r.out.ClusterEngine = name
	r.out.EngineID = ce.Status.NamespaceID
	r.out.EngineCredentials = creds
	// The workers read the credentials from a Secret of the Agent's own.
	workerEngine := agentsv1.EngineSpec{Address: spec.Address, Namespace: spec.Namespace}
	if spec.TLS != nil {
		workerEngine.TLS = &agentsv1.EngineTLS{ServerName: spec.TLS.ServerName}
		if len(creds.CA) > 0 || len(creds.ClientCert) > 0 {
			workerEngine.TLS.SecretRef = &agentsv1.SecretReference{Name: EngineSecretName(r.agent.Name)}
			r.out.EngineTLS = TLSFiles{CA: len(creds.CA) > 0, ClientCert: len(creds.ClientCert) > 0}
		}
	}
	if len(creds.APIKey) > 0 {
		workerEngine.APIKeySecretRef = &agentsv1.SecretKeyReference{Name: EngineSecretName(r.agent.Name), Key: EngineAPIKeyKey}
	}
	r.out.Engine = workerEngine
	return nil
}

// namespaceEngine resolves an engine of the namespace's own: only where
// the administrator allows them, with credentials whose Secrets name its
// address, and once the operator learnt who the engine is.
func (r *resolver) namespaceEngine(engine agentsv1.EngineSpec, defaults Defaults) *Blocker {
	if !defaults.AllowNamespaceEngines {
		return blocked(agentsv1.ReasonEngineNotAllowed,
			"spec.engine names an engine of the namespace's own, which this operator does not allow (--allow-namespace-engines); name a ClusterEngine in spec.engineRef, or leave both out for the default")
	}
	r.out.Engine = engine
	creds, b := ReadEngineCredentials("spec.engine", engine, r.observed.Secrets)
	if b != nil {
		return b
	}
	if b := CheckCredentialAddresses("spec.engine", engine, r.observed.Secrets); b != nil {
		return b
	}
	r.out.EngineCredentials = creds
	if tls := engine.TLS; tls != nil && tls.SecretRef != nil {
		r.out.EngineTLS = TLSFiles{CA: len(creds.CA) > 0, ClientCert: len(creds.ClientCert) > 0}
	}
	if r.observed.NamespaceEngineID == "" {
		why := r.observed.NamespaceEngineError
		if why == "" {
			why = "it has not answered yet"
		}
		return blocked(agentsv1.ReasonEngineUnavailable, "spec.engine: the operator could not ask the engine at %s who it is: %s", engine.Address, why)
	}
	r.out.EngineID = r.observed.NamespaceEngineID
	return nil
}

// checkNamespaceSelected refuses a namespace the ClusterEngine's selector
// leaves out.
func checkNamespaceSelected(ce *agentsv1.ClusterEngine, namespace string, nsLabels map[string]string) *Blocker {
	selector, err := metav1.LabelSelectorAsSelector(ce.Spec.NamespaceSelector)
	if err != nil || ce.Spec.NamespaceSelector == nil {
		return blocked(agentsv1.ReasonEngineNotAllowed, "ClusterEngine %q has no usable namespaceSelector", ce.Name)
	}
	if !selector.Matches(labels.Set(nsLabels)) {
		return blocked(agentsv1.ReasonEngineNotAllowed, "ClusterEngine %q does not let namespace %q use it (its namespaceSelector)", ce.Name, namespace)
	}
	return nil
}

// Claims are the Flow type claims the resolved Agent's workers make: its
// names on its engine, and the shared names as well while they move the
// Agent's sessions from them.
func (r *Resolved) Claims() []flowclaim.Claim {
	return flowclaim.OfWorkers(r.EngineID, r.Names, r.SharedTaskQueue != "")
}

// names resolves the names the Agent's workers keep its sessions under:
// its own, unless its sessions already run under the shared names and its
// workers, of engine 0.7.0 or earlier, know no other. Workers of engine
// 0.8.0 and later move such sessions to the Agent's own names. Workers of
// an earlier engine take the names the operator gives them, but count an
// agent budget in one spend counter per Flow type for the whole Temporal
// namespace, which another namespace's Agent would share: an Agent on its
// own names may have none with them.
func (r *resolver) names() *Blocker {
	flowType := r.agent.Spec.FlowType
	own, shared := tenancy.Tenant(r.agent.Namespace, flowType), tenancy.Shared(flowType)
	keeps := flowclaim.KeepsSharedNames(r.agent)
	switch {
	case rollout.OwnNamesIn(r.out.EngineVersion):
		r.out.Names = own
		if keeps {
			r.out.SharedTaskQueue = shared.TaskQueue()
		}
	case keeps:
		r.out.Names = shared
	case r.agent.Spec.SpendLimit.HasAgentBudget():
		return blocked(agentsv1.ReasonAgentBudgetNeedsEngine,
			"spec.spendLimit.agent needs workers of engine 0.8.0 or later: workers of engine %s keep one spend counter per Flow type for the whole Temporal namespace, which another namespace's Agent of Flow type %q would share",
			r.out.EngineVersion, flowType)
	default:
		r.out.Names = own
	}
	return nil
}
