// Package render turns an Agent, and what it references, into the objects
// that run its workers: the worker configuration document, its ConfigMap,
// the ServiceAccount, the Deployment, and the published session Flow graph.
// Everything here is pure: the controller reads the cluster, hands the
// result in, and applies what comes out.
package render

import (
	"time"

	"crypto/sha256"
	"crypto/x509"
	"encoding/hex"
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	agentsv1 "github.com/stepwise-run/stepwise/api/v1alpha1"
	"github.com/stepwise-run/stepwise/internal/hub"
	"github.com/stepwise-run/stepwise/internal/tenancy"
	"github.com/stepwise-run/stepwise/internal/version"
	"github.com/stepwise-run/stepwise/pkg/workerconfig"
)

// Defaults are the operator-wide settings an Agent falls back to.
type Defaults struct {
	// DefaultEngine names the ClusterEngine of Agents that name no engine;
	// empty when the operator has none.
	DefaultEngine string
	// AllowNamespaceEngines lets an Agent name an engine of its
	// namespace's own in spec.engine.
	AllowNamespaceEngines bool
	// WorkerImage is the stock worker image.
	WorkerImage string
	// WorkerEngineVersion is the engine version the stock image carries.
	WorkerEngineVersion string
	// MediaHostPathRoots are the host directories a localDirectory
	// MediaStore without a PersistentVolumeClaim may mount, clean absolute
	// paths outside the system directories (see ParseHostPathRoots). Empty
	// means no worker pod ever mounts a host directory.
	MediaHostPathRoots []string
	// EventHub is where every Agent's workers publish session events for
	// the gateway; nil keeps events in the workers.
	EventHub *EventHub
	// Tracing is the OTLP receiver of Agents whose spec.tracing names
	// none; nil traces only Agents that name one.
	Tracing *TracingEndpoint
	// WorkerNetworkPolicy, when set, gives each Agent's workers a
	// NetworkPolicy; nil makes none.
	WorkerNetworkPolicy *WorkerNetworkPolicy
}

// WorkerNetworkPolicy is what the workers' NetworkPolicy lets in.
type WorkerNetworkPolicy struct {
	// MetricsNamespace is the namespace whose pods may scrape the workers'
	// metrics; empty lets any pod.
	MetricsNamespace string
}

// TracingEndpoint is an OTLP receiver the workers export spans to.
type TracingEndpoint struct {
	// Endpoint is its URL, as workerconfig.CheckOTLPEndpoint accepts.
	Endpoint string
	// Protocol is grpc (empty) or http/protobuf.
	Protocol string
}

// EventHub is the event hub workers publish to, and the keys the operator
// signs each Agent's publish token with.
type EventHub struct {
	// URL is the hub's base URL as workers reach it.
	URL string
	// Keys returns the current publish keys.
	Keys func() *hub.PublishKeys
	// TokenLifetime is how long a publish token is valid.
	TokenLifetime time.Duration
}

// Observed is what the controller read from the API server for one Agent.
// A missing entry means the object does not exist.
type Observed struct {
	// ToolSources by name.
	ToolSources map[string]*agentsv1.ToolSource
	// MediaStore is the referenced MediaStore.
	MediaStore *agentsv1.MediaStore
	// Secrets by name, in the Agent's namespace.
	Secrets map[string]*corev1.Secret
	// ClusterEngine is the ClusterEngine the Agent uses, if it exists.
	ClusterEngine *agentsv1.ClusterEngine
	// EngineSecrets are the ClusterEngine's Secrets, by name, in the
	// operator's namespace.
	EngineSecrets map[string]*corev1.Secret
	// NamespaceLabels are the labels of the Agent's namespace.
	NamespaceLabels map[string]string
	// NamespaceEngineID is the engine's ID of the Temporal namespace that
	// the Agent's own spec.engine reaches, as the operator asked it; empty,
	// with NamespaceEngineError saying why, when it could not.
	NamespaceEngineID    string
	NamespaceEngineError string
}

// Blocker says why an Agent cannot be applied; Reason and Message go
// straight into the Ready condition.
type Blocker struct {
	Reason  string
	Message string
}

// Error makes a Blocker usable as an error.
func (b *Blocker) Error() string { return b.Reason + ": " + b.Message }

func blocked(reason, format string, args ...any) *Blocker {
	return &Blocker{Reason: reason, Message: fmt.Sprintf(format, args...)}
}

// SecretKeyDigest is the SHA-256 of one Secret value the workers receive.
// Its hash, never the value, enters the config digest, so a rotated value
// rolls the workers.
type SecretKeyDigest struct {
	Secret string
	Key    string
	SHA256 string
}

// Resolved is an Agent with every reference looked up and checked: all a
// builder needs.
type Resolved struct {
	Agent *agentsv1.Agent
	// Engine is the engine as the workers reach it, with defaults filled:
	// spec.engine, or the ClusterEngine with its credentials in the
	// Secret EngineSecretName names.
	Engine agentsv1.EngineSpec
	// EngineTLS says which files the engine TLS Secret provides.
	EngineTLS TLSFiles
	// ClusterEngine names the Agent's ClusterEngine; empty for an engine
	// of the namespace's own.
	ClusterEngine string
	// EngineCredentials are what the engine connection presents.
	EngineCredentials EngineCredentials
	// EngineID is the engine's ID of its Temporal namespace, which claims
	// are keyed by.
	EngineID string
	// Names are the names the workers keep the Agent's sessions under.
	Names tenancy.Names
	// SharedTaskQueue is the shared task queue the workers also poll, to
	// move the Agent's sessions from it to its own names; empty when none
	// is left there.
	SharedTaskQueue string
	// ToolSources in spec order, with their effective source names.
	ToolSources []ResolvedToolSource
	// MediaStore is nil when the Agent references none.
	MediaStore *agentsv1.MediaStore
	// MediaHostPathRoots are the host directories the operator allows a
	// hostPath media volume under; Worker refuses any other.
	MediaHostPathRoots []string
	// S3SessionToken is true when the S3 credentials Secret has a session
	// token.
	S3SessionToken bool
	// StockWorkerImage is the operator's stock worker image, which runs the
	// checks the operator needs inside a worker pod whatever its image.
	StockWorkerImage string
	// WorkerImage and EngineVersion are what the workers run.
	WorkerImage   string
	EngineVersion string
	// SecretDigests covers every Secret value the workers receive, sorted.
	SecretDigests []SecretKeyDigest
	// EventHub is the operator's event hub, nil when it has none.
	EventHub *EventHub
	// WorkerNetworkPolicy is the operator's, nil when it makes none.
	WorkerNetworkPolicy *WorkerNetworkPolicy
	// EventHubToken is the Agent's publish token for EventHub, which the
	// controller signs or keeps: render itself reads no clock.
	EventHubToken string
	// Tracing is the operator's default OTLP receiver, nil when it has
	// none.
	Tracing *TracingEndpoint
}

// ResolvedToolSource is a ToolSource with its effective source name.
type ResolvedToolSource struct {
	*agentsv1.ToolSource
	SourceName string
}

// TLSFiles says which files a TLS Secret provides.
type TLSFiles struct {
	CA         bool
	ClientCert bool
}

// Secret keys the operator reads by convention.
const (
	TLSCAKey               = "ca.crt"
	TLSCertKey             = corev1.TLSCertKey
	TLSPrivateKeyKey       = corev1.TLSPrivateKeyKey
	S3AccessKeyIDKey       = "AWS_ACCESS_KEY_ID"
	S3SecretAccessKeyKey   = "AWS_SECRET_ACCESS_KEY"
	S3SessionTokenKey      = "AWS_SESSION_TOKEN"
	defaultEngineNamespace = "default"
)

// EffectiveSourceName is spec.sourceName, or the ToolSource's name.
func EffectiveSourceName(ts *agentsv1.ToolSource) string {
	if ts.Spec.SourceName != "" {
		return ts.Spec.SourceName
	}
	return ts.Name
}

// Resolve checks an Agent's references against what the controller observed
// and returns the builders' input, or the first reason the Agent cannot be
// applied.
func Resolve(agent *agentsv1.Agent, observed Observed, defaults Defaults) (*Resolved, *Blocker) {
	r := &resolver{agent: agent, observed: observed, out: &Resolved{Agent: agent, MediaHostPathRoots: defaults.MediaHostPathRoots, EventHub: defaults.EventHub, Tracing: defaults.Tracing,
		WorkerNetworkPolicy: defaults.WorkerNetworkPolicy}}
	for _, check := range []func() *Blocker{
		func() *Blocker { return r.engine(defaults) },
		r.toolSources,
		r.mediaStore,
		r.secrets,
	} {
		if b := check(); b != nil {
			return nil, b
		}
	}
	r.out.StockWorkerImage = defaults.WorkerImage
	r.out.WorkerImage, r.out.EngineVersion = defaults.WorkerImage, defaults.WorkerEngineVersion
	if w := agent.Spec.Workers; w != nil && w.Image != "" {
		r.out.WorkerImage, r.out.EngineVersion = w.Image, w.EngineVersion
	}
	if !slices.Contains(version.EngineVersions, r.out.EngineVersion) {
		return nil, blocked(agentsv1.ReasonUnknownEngineVersion,
			"spec.workers.engineVersion %q is not an engine version this operator knows (%s); upgrade the operator before workers of a newer engine",
			r.out.EngineVersion, strings.Join(version.EngineVersions, ", "))
	}
	if b := r.names(); b != nil {
		return nil, b
	}
	return r.out, nil
}

type resolver struct {
	agent    *agentsv1.Agent
	observed Observed
	out      *Resolved
}

func (r *resolver) toolSources() *Blocker {
	bySourceName := map[string]string{}
	resourceTools := ""
	for i, ref := range r.agent.Spec.ToolSources {
		field := fmt.Sprintf("spec.toolSources[%d]", i)
		ts, ok := r.observed.ToolSources[ref.Name]
		if !ok {
			return blocked(agentsv1.ReasonToolSourceNotFound, "%s: ToolSource %q does not exist", field, ref.Name)
		}
		if why := notReady(ts.DeletionTimestamp != nil, ts.Generation, ts.Status.ObservedGeneration, ts.Status.Conditions); why != "" {
			return blocked(agentsv1.ReasonToolSourceNotReady, "%s: ToolSource %q %s", field, ref.Name, why)
		}
		name := EffectiveSourceName(ts)
		if other, dup := bySourceName[name]; dup {
			return blocked(agentsv1.ReasonToolSourceConflict,
				"%s: ToolSources %q and %q both have source name %q; source names must be unique per Agent", field, other, ref.Name, name)
		}
		bySourceName[name] = ref.Name
		if ts.Spec.ResourceAndPromptTools {
			if resourceTools != "" {
				return blocked(agentsv1.ReasonToolSourceConflict,
					"%s: ToolSources %q and %q both enable resourceAndPromptTools; enable them on one ToolSource of an Agent", field, resourceTools, ref.Name)
			}
			resourceTools = ref.Name
		}
		r.out.ToolSources = append(r.out.ToolSources, ResolvedToolSource{ToolSource: ts, SourceName: name})
	}
	return nil
}

func (r *resolver) mediaStore() *Blocker {
	ref := r.agent.Spec.MediaStore
	if ref == nil {
		return nil
	}
	ms := r.observed.MediaStore
	if ms == nil || ms.Name != ref.Name {
		return blocked(agentsv1.ReasonMediaStoreNotFound, "spec.mediaStore: MediaStore %q does not exist", ref.Name)
	}
	if why := notReady(ms.DeletionTimestamp != nil, ms.Generation, ms.Status.ObservedGeneration, ms.Status.Conditions); why != "" {
		return blocked(agentsv1.ReasonMediaStoreNotReady, "spec.mediaStore: MediaStore %q %s", ref.Name, why)
	}
	// The store's Ready may predate the operator's current host path roots.
	if b := CheckMediaStore(ms, r.out.MediaHostPathRoots); b != nil {
		return blocked(agentsv1.ReasonMediaStoreNotReady, "spec.mediaStore: MediaStore %q is not usable (%s: %s)", ref.Name, b.Reason, b.Message)
	}
	r.out.MediaStore = ms
	return nil
}

// notReady explains why a referenced object cannot be used yet, or returns
// "".
func notReady(deleting bool, generation, observedGeneration int64, conditions []metav1.Condition) string {
	if deleting {
		return "is being deleted"
	}
	ready := meta.FindStatusCondition(conditions, agentsv1.ConditionReady)
	switch {
	case ready == nil || observedGeneration != generation:
		return "has not been reconciled yet"
	case ready.Status != "True":
		return fmt.Sprintf("is not Ready (%s: %s)", ready.Reason, ready.Message)
	}
	return ""
}

// SecretUse is one place a spec takes values from a Secret: the field, the
// Secret, and the keys it must and may have.
type SecretUse struct {
	Field    string
	Secret   string
	Required []string
	Optional []string
	// ValueProblem, when set, says why a value of a required key can never
	// work where it goes (a header, an environment variable), or "".
	ValueProblem func(string) string
}

func keyUse(field string, ref *agentsv1.SecretKeyReference) []SecretUse {
	if ref == nil {
		return nil
	}
	return []SecretUse{{Field: field, Secret: ref.Name, Required: []string{ref.Key}}}
}

func checkedKeyUse(field string, ref *agentsv1.SecretKeyReference, problem func(string) string) SecretUse {
	return SecretUse{Field: field, Secret: ref.Name, Required: []string{ref.Key}, ValueProblem: problem}
}

// pemProblem says why a value holds no PEM certificate, or returns "".
func pemProblem(v string) string {
	if !x509.NewCertPool().AppendCertsFromPEM([]byte(v)) {
		return "holds no PEM certificate"
	}
	return ""
}

// ToolSourceSecretUses lists the Secret keys a ToolSource takes values from.
// fieldPrefix starts each field, such as `ToolSource "x" ` for an Agent's
// messages.
func ToolSourceSecretUses(ts *agentsv1.ToolSource, fieldPrefix string) []SecretUse {
	var uses []SecretUse
	if s := ts.Spec.MCP.Stdio; s != nil {
		for _, v := range s.Env {
			if v.ValueFrom != nil {
				uses = append(uses, checkedKeyUse(fmt.Sprintf("%sspec.mcp.stdio.env[%s].valueFrom.secretKeyRef", fieldPrefix, v.Name),
					&v.ValueFrom.SecretKeyRef, workerconfig.EnvValueProblem))
			}
		}
	}
	if h := ts.Spec.MCP.StreamableHTTP; h != nil {
		for _, v := range h.Headers {
			if v.ValueFrom != nil {
				uses = append(uses, checkedKeyUse(fmt.Sprintf("%sspec.mcp.streamableHTTP.headers[%s].valueFrom.secretKeyRef", fieldPrefix, v.Name),
					&v.ValueFrom.SecretKeyRef, workerconfig.HeaderValueProblem))
			}
		}
	}
	return uses
}

// MediaStoreSecretUses lists the Secret keys a MediaStore takes values from.
func MediaStoreSecretUses(ms *agentsv1.MediaStore, fieldPrefix string) []SecretUse {
	if ms.Spec.S3 == nil || ms.Spec.S3.CredentialsSecretRef == nil {
		return nil
	}
	return []SecretUse{{
		Field:    fieldPrefix + "spec.s3.credentialsSecretRef",
		Secret:   ms.Spec.S3.CredentialsSecretRef.Name,
		Required: []string{S3AccessKeyIDKey, S3SecretAccessKeyKey},
		Optional: []string{S3SessionTokenKey},
	}}
}

// AgentSecretUses lists the Secret keys of the Agent's namespace it takes
// values from through its own spec: spec.engine among them. A
// ClusterEngine's Secrets are in the operator's namespace and are not
// listed.
func AgentSecretUses(agent *agentsv1.Agent) []SecretUse {
	spec := agent.Spec
	uses := keyUse("spec.model.apiKeySecretRef", spec.Model.APIKeySecretRef)
	for _, mc := range spec.ModelChoices {
		uses = append(uses, keyUse(fmt.Sprintf("spec.modelChoices[%s].model.apiKeySecretRef", mc.Choice), mc.Model.APIKeySecretRef)...)
	}
	if engine, ok := NamespaceEngine(agent); ok {
		uses = append(uses, EngineSecretUses("spec.engine", engine)...)
	}
	if t := spec.Tracing; t != nil {
		if ref := t.CASecretRef; ref != nil {
			uses = append(uses, checkedKeyUse("spec.tracing.caSecretRef", ref, pemProblem))
		}
		for _, h := range t.Headers {
			if h.ValueFrom != nil {
				uses = append(uses, checkedKeyUse(fmt.Sprintf("spec.tracing.headers[%s].valueFrom.secretKeyRef", h.Name),
					&h.ValueFrom.SecretKeyRef, workerconfig.HeaderValueProblem))
			}
		}
	}
	if spec.Workers != nil {
		for _, env := range spec.Workers.Env {
			if env.ValueFrom == nil || env.ValueFrom.SecretKeyRef == nil {
				continue
			}
			sel := env.ValueFrom.SecretKeyRef
			use := SecretUse{Field: fmt.Sprintf("spec.workers.env[%s].valueFrom.secretKeyRef", env.Name), Secret: sel.Name}
			if sel.Optional != nil && *sel.Optional {
				use.Optional = []string{sel.Key}
			} else {
				use.Required = []string{sel.Key}
			}
			uses = append(uses, use)
		}
	}
	return uses
}

// allSecretUses lists every Secret key the Agent's workers receive, its
// resolved ToolSources' and MediaStore's included.
func (r *resolver) allSecretUses() []SecretUse {
	uses := AgentSecretUses(r.agent)
	for _, ts := range r.out.ToolSources {
		uses = append(uses, ToolSourceSecretUses(ts.ToolSource, fmt.Sprintf("ToolSource %q ", ts.Name))...)
	}
	if ms := r.out.MediaStore; ms != nil {
		uses = append(uses, MediaStoreSecretUses(ms, fmt.Sprintf("MediaStore %q ", ms.Name))...)
	}
	return uses
}

// CheckSecrets returns the first use whose Secret or required key is
// missing, or whose value can never work where it goes. A use with no
// required keys may name a missing Secret. Messages name the field, the
// Secret and the key, never a value.
func CheckSecrets(uses []SecretUse, secrets map[string]*corev1.Secret) *Blocker {
	for _, use := range uses {
		secret, ok := secrets[use.Secret]
		if !ok {
			if len(use.Required) == 0 {
				continue
			}
			return blocked(agentsv1.ReasonSecretNotFound, "%s: Secret %q does not exist", use.Field, use.Secret)
		}
		if operatorCopy(secret) {
			// An engine's credentials and hub tokens are copied here for
			// workers alone: referenced elsewhere, a tenant who may not read
			// them could send them to a model or tool address of its choice.
			return blocked(agentsv1.ReasonSecretValueInvalid,
				"%s: Secret %q holds credentials the operator copied for Agent %q's workers; no Agent, ToolSource or MediaStore may reference it",
				use.Field, use.Secret, secret.Labels[LabelAgent])
		}
		for _, k := range use.Required {
			value, ok := SecretValue(secret, k)
			if !ok {
				return blocked(agentsv1.ReasonSecretKeyNotFound, "%s: Secret %q has no key %q", use.Field, use.Secret, k)
			}
			if use.ValueProblem == nil {
				continue
			}
			if problem := use.ValueProblem(string(value)); problem != "" {
				return blocked(agentsv1.ReasonSecretValueInvalid, "%s: the value of key %q in Secret %q %s", use.Field, k, use.Secret, problem)
			}
		}
	}
	return nil
}

// operatorCopy reports whether the operator wrote secret for an Agent's
// workers: an engine's credentials or an event hub token.
func operatorCopy(secret *corev1.Secret) bool {
	c := secret.Labels[LabelComponent]
	return secret.Labels[LabelManagedBy] == ManagedBy && (c == componentEngineCredentials || c == componentEventHubToken)
}

func (r *resolver) secrets() *Blocker {
	uses := r.allSecretUses()
	if b := CheckSecrets(uses, r.observed.Secrets); b != nil {
		return b
	}
	digests := map[string]SecretKeyDigest{}
	if r.out.ClusterEngine != "" {
		// The copy the workers read changes with its source.
		for key, value := range r.out.EngineCredentials.secretData() {
			sum := sha256.Sum256(value)
			name := EngineSecretName(r.agent.Name)
			digests[name+"\x00"+key] = SecretKeyDigest{Secret: name, Key: key, SHA256: hex.EncodeToString(sum[:])}
		}
	}
	for _, use := range uses {
		secret := r.observed.Secrets[use.Secret]
		for _, k := range slices.Concat(use.Required, use.Optional) {
			if value, ok := SecretValue(secret, k); ok {
				sum := sha256.Sum256(value)
				digests[use.Secret+"\x00"+k] = SecretKeyDigest{Secret: use.Secret, Key: k, SHA256: hex.EncodeToString(sum[:])}
			}
		}
	}
	for _, d := range digests {
		r.out.SecretDigests = append(r.out.SecretDigests, d)
	}
	slices.SortFunc(r.out.SecretDigests, func(a, b SecretKeyDigest) int {
		return strings.Compare(a.Secret+"\x00"+a.Key, b.Secret+"\x00"+b.Key)
	})
	if ms := r.out.MediaStore; ms != nil && ms.Spec.S3 != nil && ms.Spec.S3.CredentialsSecretRef != nil {
		_, r.out.S3SessionToken = SecretValue(r.observed.Secrets[ms.Spec.S3.CredentialsSecretRef.Name], S3SessionTokenKey)
	}
	return nil
}

// SecretValue reads a key from data, or from stringData of a Secret that has
// not been through the API server, as in tests. The operator's engine
// client reads the same Secrets the same way.
func SecretValue(secret *corev1.Secret, key string) ([]byte, bool) {
	if secret == nil {
		return nil, false
	}
	if v, ok := secret.Data[key]; ok {
		return v, true
	}
	if v, ok := secret.StringData[key]; ok {
		return []byte(v), true
	}
	return nil, false
}
