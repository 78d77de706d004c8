// Package render turns an Agent, and what it references, into the objects
// that run its workers: the worker configuration document, its ConfigMap,
// the ServiceAccount, the Deployment, and the published session Flow graph.
// Everything here is pure: the controller reads the cluster, hands the
// result in, and applies what comes out.
package render

import (
	"time"

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
