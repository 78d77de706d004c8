package render

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"path"
	"slices"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	appsv1ac "k8s.io/client-go/applyconfigurations/apps/v1"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"
	metav1ac "k8s.io/client-go/applyconfigurations/meta/v1"
	networkingv1ac "k8s.io/client-go/applyconfigurations/networking/v1"
	policyv1ac "k8s.io/client-go/applyconfigurations/policy/v1"

	agentsv1 "github.com/stepwise-run/stepwise/api/v1alpha1"
	"github.com/stepwise-run/stepwise/internal/media"
	"github.com/stepwise-run/stepwise/internal/session"
	"github.com/stepwise-run/stepwise/internal/spend"
	"github.com/stepwise-run/stepwise/internal/tenancy"
	"github.com/stepwise-run/stepwise/pkg/workerconfig"
)

// Labels and annotations on the objects the operator owns.
const (
	// LabelAgent names the Agent that owns an object; with LabelName it
	// selects the Agent's worker pods.
	LabelAgent = "agents.stepwise.run/agent"
	// LabelEngineVersion is the session engine version of a worker pod.
	LabelEngineVersion = "agents.stepwise.run/engine-version"
	// LabelName, LabelInstance and LabelManagedBy are the recommended labels.
	LabelName      = "app.kubernetes.io/name"
	LabelInstance  = "app.kubernetes.io/instance"
	LabelManagedBy = "app.kubernetes.io/managed-by"
	// LabelFlowClaim marks an Agent's worker Deployment with the claim of
	// the names its workers serve; see FlowClaim. It finds a claim's
	// holders; what it says is checked against the Agent that owns the
	// Deployment, never believed alone.
	LabelFlowClaim = "agents.stepwise.run/flow-claim"
	// LabelSharedFlowClaim marks a worker Deployment whose workers also
	// serve the shared names, moving the Agent's sessions from them.
	LabelSharedFlowClaim = "agents.stepwise.run/shared-flow-claim"
	// LabelMediaStore marks an Agent's worker Deployment with the
	// MediaStore its workers use, so the store is kept while they do.
	LabelMediaStore = "agents.stepwise.run/media-store"
	// LabelComponent says which part of an Agent's workers an object is.
	LabelComponent = "app.kubernetes.io/component"
	// ComponentWorkerConfig is the LabelComponent value of worker
	// configuration ConfigMaps.
	ComponentWorkerConfig = "worker-config"
	// MetricsPortName names the worker container's metrics port, which the
	// chart's PodMonitor scrapes.
	MetricsPortName = "metrics"
	// ComponentWorker is the LabelComponent value of worker Deployments
	// and pods; the chart's PodMonitor selects pods by it.
	ComponentWorker = "worker"
	// AnnotationConfigDigest is the config digest a pod template was rendered
	// with; a new digest rolls the workers.
	AnnotationConfigDigest = "agents.stepwise.run/config-digest"
	// AnnotationGraphDigest is the digest of a published Flow graph.
	AnnotationGraphDigest = "agents.stepwise.run/graph-digest"

	// FieldOwner is the field manager of every object the operator applies.
	FieldOwner = "stepwise-operator"

	// ManagedBy is the value of LabelManagedBy on every owned object; the
	// operator caches only objects that carry it.
	ManagedBy = "stepwise-operator"

	workerAppName          = "agent-worker"
	configVolume           = "config"
	componentSessionGraph  = "session-graph"
	componentEventHubToken = "event-hub-token"
	// componentEngineCredentials labels the Secret that carries a
	// ClusterEngine's credentials to an Agent's workers.
	componentEngineCredentials = "engine-credentials"
)

// Paths and ports inside a worker pod.
const (
	ConfigDir    = "/etc/stepwise/worker"
	EngineTLSDir = "/etc/stepwise/engine-tls"
	// TracingCAFile is where a worker reads the CA certificates of the
	// Agent's OTLP endpoint.
	TracingCAFile = "/etc/stepwise/tracing-ca/ca.crt"
	HealthPort    = 8080
	healthAddress = ":8080"
	// MetricsPort serves /metrics for Prometheus, apart from the probes.
	MetricsPort    = 9090
	metricsAddress = ":9090"
	// debugAddress serves one session's recent events inside the pod
	// only; `kubectl port-forward` reaches it for those Kubernetes allows.
	debugAddress = "127.0.0.1:8081"

	// EnvPodName carries the pod's name, the worker's identity on the engine.
	EnvPodName = "STEPWISE_POD_NAME"
	// secretEnvPrefix starts the names of variables that carry Secret values.
	secretEnvPrefix = "STEPWISE_SECRET_"

	// maxConfigBytes keeps the config document well under a ConfigMap's
	// 1 MiB limit.
	maxConfigBytes = 900 * 1024

	// maxStopTimeout caps how long a stopping worker waits for its running
	// Steps: the longest tool attempt. A Step still running after it is
	// retried or recorded outcome_unknown by its effect class.
	maxStopTimeout = session.ToolAttemptTimeout
	// stopMargin is what the kubelet allows beyond the worker's own stop
	// timeout, for the worker to leave its polls and exit.
	stopMargin = 15 * time.Second
)

// StopTimeout is how long a stopping worker lets its running Steps finish:
// the longest Step attempt the Agent allows, capped at an hour. A model
// call may take ModelAttemptTimeout; an MCP tool call its source's request
// timeout, and a stdio task poll its task wait besides; a worker image of
// the team's own may hold function tools, which may take ToolAttemptTimeout.
// The pod's grace period is this plus a margin, so a drain or a rollout
// never kills a Step the Agent lets run.
func StopTimeout(r *Resolved) time.Duration {
	longest := session.ModelAttemptTimeout
	if w := workers(r.Agent); w.Image != "" {
		longest = max(longest, session.ToolAttemptTimeout)
	}
	for _, ts := range r.ToolSources {
		d := durationOr(ts.Spec.RequestTimeout, fallbackRequestTimeout).Duration
		if ts.Spec.MCP.Stdio != nil {
			d += durationOr(ts.Spec.TaskWaitTimeout, fallbackTaskWaitTimeout).Duration
		}
		longest = max(longest, d)
	}
	return min(longest, maxStopTimeout)
}

// Fallbacks for fields the API server defaults. They matter only for objects
// built in code that never passed through the API server.
const (
	fallbackMaxModelCallsPerTurn = 100
	fallbackMaxDurableWait       = 365 * 24 * time.Hour
	fallbackEventStreamCapacity  = 10 << 20
	fallbackTaskSlots            = 100
	fallbackTriggerRatio         = 0.85
	fallbackKeepRatio            = 0.3
	fallbackRetainedMessages     = 1000
	fallbackListingTTL           = 5 * time.Minute
	fallbackConnectionTimeout    = 30 * time.Second
	fallbackRequestTimeout       = 10 * time.Minute
	fallbackTaskWaitTimeout      = 10 * time.Minute
)

// WorkerName is the name of an Agent's Deployment and ServiceAccount.
func WorkerName(agentName string) string { return agentName + "-worker" }

// ConfigMapName is the name of the immutable worker configuration ConfigMap
// with a config digest. Each configuration gets its own, so pods of an
// earlier rollout, and a rollback, keep reading the configuration their
// template names.
func ConfigMapName(agentName, configDigest string) string {
	sum := strings.TrimPrefix(configDigest, "sha256:")
	return agentName + "-worker-config-" + sum[:min(10, len(sum))]
}

// GraphConfigMapName is the name of an Agent's session Flow graph ConfigMap.
func GraphConfigMapName(agentName string) string { return agentName + "-session-graph" }

// GraphFileName is the key of the graph document in its ConfigMap.
const GraphFileName = "graph.json"

// ConfigMapOf names the worker configuration ConfigMap a pod template
// mounts, or "".
func ConfigMapOf(template *corev1.PodTemplateSpec) string {
	for _, v := range template.Spec.Volumes {
		if v.Name == configVolume && v.ConfigMap != nil {
			return v.ConfigMap.Name
		}
	}
	return ""
}

// SelectorLabels select an Agent's worker pods. They never change, because
// a Deployment's selector cannot.
func SelectorLabels(agentName string) map[string]string {
	return map[string]string{LabelName: workerAppName, LabelAgent: agentName}
}

// Selector is SelectorLabels as the text the scale subresource reports.
func Selector(agentName string) string {
	return LabelAgent + "=" + agentName + "," + LabelName + "=" + workerAppName
}

// EventHubSecretName is the Secret holding an Agent's event hub publish
// token, under EventHubTokenKey.
func EventHubSecretName(agentName string) string { return agentName + "-event-hub" }

// EventHubTokenKey is the key of the publish token in its Secret.
const EventHubTokenKey = "token"

// SecretEnvName is the environment variable that carries one Secret key. It
// is derived from the Secret and key, so the same key always has the same
// variable and no value ever appears in its name.
func SecretEnvName(secret, key string) string {
	sum := sha256.Sum256([]byte(secret + "\x00" + key))
	return secretEnvPrefix + strings.ToUpper(hex.EncodeToString(sum[:6]))
}

// WorkerObjects is everything the operator applies for one Agent's workers.
type WorkerObjects struct {
	Config         workerconfig.Config
	ConfigDocument []byte
	// ConfigDigest covers the config document and the hashes of the Secret
	// values the workers receive.
	ConfigDigest   string
	ConfigMap      *corev1ac.ConfigMapApplyConfiguration
	ServiceAccount *corev1ac.ServiceAccountApplyConfiguration // nil when the Agent names its own
	Deployment     *appsv1ac.DeploymentApplyConfiguration
	// DisruptionBudget lets a node drain evict one worker at a time, so the
	// others keep their task slots while it stops.
	DisruptionBudget *policyv1ac.PodDisruptionBudgetApplyConfiguration
	// NetworkPolicy opens the workers' probe port to all and their metrics
	// port to the metrics namespace only; nil when the operator makes no
	// NetworkPolicies.
	NetworkPolicy *networkingv1ac.NetworkPolicyApplyConfiguration
	// EventHubSecret holds the Agent's publish token; nil when the operator
	// has no event hub.
	EventHubSecret *corev1ac.SecretApplyConfiguration
	// EngineSecret carries the ClusterEngine's credentials to the workers;
	// nil for an engine of the namespace's own, or one that takes none.
	EngineSecret *corev1ac.SecretApplyConfiguration
}

// PublishedGraph is the session Flow graph of one Agent, as published.
type PublishedGraph struct {
	Digest    string
	ConfigMap *corev1ac.ConfigMapApplyConfiguration
}

// Worker builds the worker objects of a resolved Agent.
func Worker(r *Resolved) (*WorkerObjects, error) {
	if b := checkMediaVolume(r); b != nil {
		return nil, b
	}
	envs := secretEnvs{}
	cfg, err := workerConfig(r, envs)
	if err != nil {
		return nil, err
	}
	secretDigests := r.SecretDigests
	var hubSecret *corev1ac.SecretApplyConfiguration
	if hub := r.EventHub; hub != nil {
		token := r.EventHubToken
		if token == "" {
			return nil, errors.New("the Agent has an event hub but no publish token was signed for it")
		}
		name := EventHubSecretName(r.Agent.Name)
		cfg.EventHub = &workerconfig.EventHub{URL: hub.URL, Token: *envs.ref(name, EventHubTokenKey)}
		hubSecret = corev1ac.Secret(name, r.Agent.Namespace).
			WithLabels(objectLabels(r.Agent.Name, componentEventHubToken)).
			WithOwnerReferences(ownerReference(r.Agent)).
			WithType(corev1.SecretTypeOpaque).
			WithData(map[string][]byte{EventHubTokenKey: []byte(token)})
		// A new token rolls the workers, which read it at start.
		sum := sha256.Sum256([]byte(token))
		secretDigests = append(slices.Clip(secretDigests), SecretKeyDigest{Secret: name, Key: EventHubTokenKey, SHA256: hex.EncodeToString(sum[:])})
	}
	doc, err := cfg.Encode()
	if err != nil {
		return nil, err
	}
	if len(doc) > maxConfigBytes {
		return nil, &Blocker{Reason: agentsv1.ReasonInvalidSpec, Message: fmt.Sprintf(
			"the rendered worker configuration is %d bytes, over the limit of %d; shorten spec.instructions or the tool sources", len(doc), maxConfigBytes)}
	}
	digest := configDigest(doc, secretDigests)
	agent := r.Agent
	w := &WorkerObjects{Config: cfg, ConfigDocument: doc, ConfigDigest: digest, EventHubSecret: hubSecret}
	if data := r.EngineCredentials.secretData(); r.ClusterEngine != "" && len(data) > 0 {
		w.EngineSecret = corev1ac.Secret(EngineSecretName(r.Agent.Name), r.Agent.Namespace).
			WithLabels(objectLabels(r.Agent.Name, componentEngineCredentials)).
			WithOwnerReferences(ownerReference(r.Agent)).
			WithType(corev1.SecretTypeOpaque).
			WithData(data)
	}

	w.ConfigMap = corev1ac.ConfigMap(ConfigMapName(agent.Name, digest), agent.Namespace).
		WithLabels(objectLabels(agent.Name, ComponentWorkerConfig)).
		WithAnnotations(map[string]string{AnnotationConfigDigest: digest}).
		WithOwnerReferences(ownerReference(agent)).
		WithImmutable(true).
		WithData(map[string]string{workerconfig.FileName: string(doc)})

	serviceAccount := workers(agent).ServiceAccountName
	if serviceAccount == "" {
		serviceAccount = WorkerName(agent.Name)
		w.ServiceAccount = corev1ac.ServiceAccount(serviceAccount, agent.Namespace).
			WithLabels(objectLabels(agent.Name, ComponentWorker)).
			WithOwnerReferences(ownerReference(agent))
	}
	w.Deployment = deployment(r, envs, serviceAccount, digest)
	w.DisruptionBudget = disruptionBudget(r.Agent)
	if r.WorkerNetworkPolicy != nil {
		w.NetworkPolicy = networkPolicy(r.Agent, *r.WorkerNetworkPolicy)
	}
	return w, nil
}

// Graph builds the published session Flow graph of an Agent: the graph of
// the engine version its workers run, which may be older than the
// operator's own.
func Graph(agent *agentsv1.Agent, engineVersion string) (*PublishedGraph, error) {
	graph, err := session.Graph(agent.Spec.FlowType, engineVersion)
	if err != nil {
		return nil, err
	}
	doc, digest, err := graph.Document()
	if err != nil {
		return nil, err
	}
	cm := corev1ac.ConfigMap(GraphConfigMapName(agent.Name), agent.Namespace).
		WithLabels(objectLabels(agent.Name, componentSessionGraph)).
		WithAnnotations(map[string]string{AnnotationGraphDigest: digest}).
		WithOwnerReferences(ownerReference(agent)).
		WithData(map[string]string{GraphFileName: string(doc)})
	return &PublishedGraph{Digest: digest, ConfigMap: cm}, nil
}

func configDigest(doc []byte, secrets []SecretKeyDigest) string {
	h := sha256.New()
	h.Write(doc)
	for _, s := range secrets {
		fmt.Fprintf(h, "\nsecret %s %s %s", s.Secret, s.Key, s.SHA256)
	}
	return "sha256:" + hex.EncodeToString(h.Sum(nil))
}

// secretEnvs collects the Secret keys the config names, one variable each.
type secretEnvs map[string]workerconfig.SecretEnv

func (s secretEnvs) ref(secret, key string) *workerconfig.SecretEnv {
	env := workerconfig.SecretEnv{Env: SecretEnvName(secret, key), Secret: secret, Key: key}
	s[env.Env] = env
	return &env
}

func (s secretEnvs) keyRef(ref *agentsv1.SecretKeyReference) *workerconfig.SecretEnv {
	if ref == nil {
		return nil
	}
	return s.ref(ref.Name, ref.Key)
}

// envVars lists the variables in name order, so the pod template is stable.
func (s secretEnvs) envVars() []*corev1ac.EnvVarApplyConfiguration {
	names := make([]string, 0, len(s))
	for name := range s {
		names = append(names, name)
	}
	slices.Sort(names)
	out := make([]*corev1ac.EnvVarApplyConfiguration, 0, len(names))
	for _, name := range names {
		env := s[name]
		out = append(out, corev1ac.EnvVar().WithName(name).WithValueFrom(
			corev1ac.EnvVarSource().WithSecretKeyRef(corev1ac.SecretKeySelector().WithName(env.Secret).WithKey(env.Key))))
	}
	return out
}

func workers(agent *agentsv1.Agent) agentsv1.WorkersSpec {
	if agent.Spec.Workers == nil {
		return agentsv1.WorkersSpec{}
	}
	return *agent.Spec.Workers
}

func workerConfig(r *Resolved, envs secretEnvs) (workerconfig.Config, error) {
	agent := r.Agent
	spec := agent.Spec
	cfg := workerconfig.Config{
		APIVersion:    workerconfig.APIVersion,
		Kind:          workerconfig.Kind,
		Agent:         workerconfig.AgentRef{Namespace: agent.Namespace, Name: agent.Name, UID: string(agent.UID)},
		FlowType:      spec.FlowType,
		EngineVersion: r.EngineVersion,
		Engine: workerconfig.Engine{
			Address:         r.Engine.Address,
			Namespace:       r.Engine.Namespace,
			TaskQueue:       r.Names.TaskQueue(),
			SharedTaskQueue: r.SharedTaskQueue,
			APIKey:          envs.keyRef(r.Engine.APIKeySecretRef),
		},
		TaskSlots:      orDefault(workers(agent).TaskSlots, fallbackTaskSlots),
		HealthAddress:  healthAddress,
		MetricsAddress: metricsAddress,
		DebugAddress:   debugAddress,
		Definition: workerconfig.Definition{
			Name:              agent.Name,
			Instructions:      spec.Instructions,
			Model:             model(spec.Model, envs),
			DefaultToolEffect: string(orDefault(spec.DefaultToolEffect, agentsv1.ToolEffectUnclassified)),
			Limits:            limits(spec.Limits),
		},
	}
	var err error
	if cfg.SpendLimit, err = spendLimit(spec.SpendLimit); err != nil {
		return workerconfig.Config{}, err
	}
	cfg.Tracing = tracing(spec.Tracing, r.Tracing, envs)
	if tls := r.Engine.TLS; tls != nil {
		cfg.Engine.TLS = &workerconfig.TLS{ServerName: tls.ServerName}
		if r.EngineTLS.CA {
			cfg.Engine.TLS.CAFile = EngineTLSDir + "/" + TLSCAKey
		}
		if r.EngineTLS.ClientCert {
			cfg.Engine.TLS.CertFile = EngineTLSDir + "/" + TLSCertKey
			cfg.Engine.TLS.KeyFile = EngineTLSDir + "/" + TLSPrivateKeyKey
		}
	}
	for _, mc := range spec.ModelChoices {
		cfg.Definition.ModelChoices = append(cfg.Definition.ModelChoices,
			workerconfig.ModelChoice{Choice: mc.Choice, Model: model(mc.Model, envs)})
	}
	for _, p := range spec.ToolPolicies {
		cfg.Definition.ToolPolicies = append(cfg.Definition.ToolPolicies,
			workerconfig.ToolPolicy{Name: p.Name, Effect: string(p.Effect), RequiresApproval: p.RequiresApproval})
	}
	for _, t := range spec.BuiltInTools {
		cfg.Definition.BuiltInTools = append(cfg.Definition.BuiltInTools, string(t))
	}
	slices.Sort(cfg.Definition.BuiltInTools)
	if pm := spec.PlanMode; pm != nil && pm.Enabled {
		cfg.Definition.PlanMode = &workerconfig.PlanMode{
			PlanningToolChoice: string(orDefault(pm.PlanningToolChoice, "auto")),
		}
	}
	if c := spec.Compaction; c != nil {
		retained := int32(fallbackRetainedMessages)
		if c.RetainedMessageLimit != nil {
			retained = *c.RetainedMessageLimit
		}
		cfg.Definition.Compaction = &workerconfig.Compaction{
			ContextWindowTokens:  c.ContextWindowTokens,
			TriggerRatio:         orDefault(c.TriggerRatio, fallbackTriggerRatio),
			KeepRatio:            orDefault(c.KeepRatio, fallbackKeepRatio),
			RetainedMessageLimit: retained,
		}
	}
	for _, ts := range r.ToolSources {
		cfg.ToolSources = append(cfg.ToolSources, toolSource(ts, envs))
	}
	if ms := r.MediaStore; ms != nil {
		cfg.MediaStore = mediaStore(ms, r.S3SessionToken, envs)
	}
	return cfg, nil
}

func model(m agentsv1.ModelSpec, envs secretEnvs) workerconfig.Model {
	out := workerconfig.Model{
		Provider: string(m.Provider),
		Name:     m.Name,
		BaseURL:  m.BaseURL,
		APIKey:   envs.keyRef(m.APIKeySecretRef),
	}
	if s := m.Settings; s != nil {
		out.MaxOutputTokens = s.MaxOutputTokens
		out.ReasoningEffort = string(s.ReasoningEffort)
	}
	return out
}

// tracing renders where the workers export spans: the Agent's endpoint,
// or else the operator's default; nil traces nothing.
func tracing(t *agentsv1.TracingSpec, fallback *TracingEndpoint, envs secretEnvs) *workerconfig.Tracing {
	if !t.TracingEnabled() {
		return nil
	}
	out := &workerconfig.Tracing{}
	if t != nil && t.Endpoint != "" {
		out.Endpoint, out.Protocol = t.Endpoint, t.Protocol
	} else if fallback != nil {
		out.Endpoint, out.Protocol = fallback.Endpoint, fallback.Protocol
	} else {
		return nil
	}
	if t == nil {
		return out
	}
	for _, h := range t.Headers {
		out.Headers = append(out.Headers, value(h.Name, h.Value, h.ValueFrom, envs))
	}
	if tracingCA(t) != nil {
		out.CAFile = TracingCAFile
	}
	out.SamplePercent = t.SamplePercent
	out.AgentName = t.AgentName
	out.CaptureMessageContent = t.CaptureMessageContent
	out.SemanticConventions = t.SemanticConventions
	return out
}

// tracingCA is the Secret key of the CA certificates the workers trust
// for the Agent's own https endpoint, when they export there.
func tracingCA(t *agentsv1.TracingSpec) *agentsv1.SecretKeyReference {
	if t == nil || !t.TracingEnabled() || t.Endpoint == "" {
		return nil
	}
	return t.CASecretRef
}

// spendLimit renders the budget with costs in millionths, so the workers'
// sums are exact. The API server checked every decimal's form.
func spendLimit(l *agentsv1.SpendLimitSpec) (*workerconfig.SpendLimit, error) {
	if l == nil {
		return nil, nil
	}
	out := &workerconfig.SpendLimit{Window: metav1.Duration{Duration: l.WindowLength()}}
	var errs []error
	micro := func(field string, v *string) int64 {
		if v == nil {
			return 0
		}
		n, err := spend.ParseMicro(*v)
		if err != nil {
			errs = append(errs, fmt.Errorf("spec.spendLimit.%s: %w", field, err))
		}
		return n
	}
	if a := l.Agent; a != nil {
		if a.Tokens != nil {
			out.AgentTokens = *a.Tokens
		}
		out.AgentMicroCost = micro("agent.cost", a.Cost)
	}
	if l.Session != nil {
		out.SessionTokens = l.Session.Tokens
	}
	for i, p := range l.Prices {
		field := fmt.Sprintf("prices[%d].", i)
		out.Prices = append(out.Prices, workerconfig.ModelPrice{
			Model:                      p.Model,
			InputMicroPerMillion:       micro(field+"inputPerMillion", &p.InputPerMillion),
			CachedInputMicroPerMillion: micro(field+"cachedInputPerMillion", p.CachedInputPerMillion),
			OutputMicroPerMillion:      micro(field+"outputPerMillion", &p.OutputPerMillion),
		})
	}
	return out, errors.Join(errs...)
}

func limits(l *agentsv1.LimitsSpec) workerconfig.Limits {
	out := workerconfig.Limits{
		MaxModelCallsPerTurn:     fallbackMaxModelCallsPerTurn,
		MaxDurableWait:           metav1.Duration{Duration: fallbackMaxDurableWait},
		EventStreamCapacityBytes: fallbackEventStreamCapacity,
	}
	if l == nil {
		return out
	}
	out.MaxModelCallsPerTurn = orDefault(l.MaxModelCallsPerTurn, out.MaxModelCallsPerTurn)
	if l.InterruptDeadline != nil {
		out.InterruptDeadline = *l.InterruptDeadline
	}
	if l.MaxDurableWait != nil {
		out.MaxDurableWait = *l.MaxDurableWait
	}
	if l.EventStreamCapacity != nil {
		out.EventStreamCapacityBytes = l.EventStreamCapacity.Value()
	}
	return out
}

func toolSource(ts ResolvedToolSource, envs secretEnvs) workerconfig.ToolSource {
	spec := ts.Spec
	out := workerconfig.ToolSource{
		SourceName:             ts.SourceName,
		TrustToolAnnotations:   spec.TrustToolAnnotations != nil && *spec.TrustToolAnnotations,
		ListingTTL:             durationOr(spec.ListingTTL, fallbackListingTTL),
		ConnectionTimeout:      durationOr(spec.ConnectionTimeout, fallbackConnectionTimeout),
		RequestTimeout:         durationOr(spec.RequestTimeout, fallbackRequestTimeout),
		TaskWaitTimeout:        durationOr(spec.TaskWaitTimeout, fallbackTaskWaitTimeout),
		ResourceAndPromptTools: spec.ResourceAndPromptTools,
	}
	if s := spec.MCP.Stdio; s != nil {
		out.Stdio = &workerconfig.Stdio{Command: s.Command, Args: slices.Clone(s.Args)}
		for _, v := range s.Env {
			out.Stdio.Env = append(out.Stdio.Env, value(v.Name, v.Value, v.ValueFrom, envs))
		}
	}
	if h := spec.MCP.StreamableHTTP; h != nil {
		out.StreamableHTTP = &workerconfig.StreamableHTTP{URL: h.URL}
		for _, v := range h.Headers {
			out.StreamableHTTP.Headers = append(out.StreamableHTTP.Headers, value(v.Name, v.Value, v.ValueFrom, envs))
		}
	}
	return out
}

func value(name string, inline *string, from *agentsv1.SecretValueSource, envs secretEnvs) workerconfig.Value {
	out := workerconfig.Value{Name: name}
	if from != nil {
		out.FromEnv = envs.keyRef(&from.SecretKeyRef)
	} else if inline != nil {
		out.Value = *inline
	}
	return out
}

func mediaStore(ms *agentsv1.MediaStore, sessionToken bool, envs secretEnvs) *workerconfig.MediaStore {
	out := &workerconfig.MediaStore{StoreURI: StoreURI(ms)}
	if s3 := ms.Spec.S3; s3 != nil {
		out.S3 = &workerconfig.S3MediaStore{
			Bucket: s3.Bucket, Prefix: s3.Prefix, Endpoint: s3.Endpoint, Region: s3.Region, ForcePathStyle: s3.ForcePathStyle,
		}
		if ref := s3.CredentialsSecretRef; ref != nil {
			out.S3.AccessKeyID = envs.ref(ref.Name, S3AccessKeyIDKey)
			out.S3.SecretAccessKey = envs.ref(ref.Name, S3SecretAccessKeyKey)
			if sessionToken {
				out.S3.SessionToken = envs.ref(ref.Name, S3SessionTokenKey)
			}
		}
	}
	if local := ms.Spec.LocalDirectory; local != nil {
		out.LocalDirectory = &workerconfig.LocalDirectoryMediaStore{Root: local.Root}
	}
	return out
}

// checkMediaVolume refuses, whatever Resolve decided, a local directory
// store whose root is a system path, or whose hostPath volume the
// operator's host path roots do not cover: no rendered pod ever mounts one.
func checkMediaVolume(r *Resolved) *Blocker {
	if r.MediaStore == nil || r.MediaStore.Spec.LocalDirectory == nil {
		return nil
	}
	local := r.MediaStore.Spec.LocalDirectory
	if !media.IsCleanAbsolutePath(local.Root) || media.IsSystemPath(local.Root) {
		return blocked(agentsv1.ReasonMediaStoreNotReady,
			"spec.mediaStore: MediaStore %q: spec.localDirectory.root %s is not a clean absolute path outside the system directories", r.MediaStore.Name, local.Root)
	}
	if b := CheckMediaStore(r.MediaStore, r.MediaHostPathRoots); b != nil {
		return blocked(agentsv1.ReasonMediaStoreNotReady, "spec.mediaStore: MediaStore %q is not usable (%s: %s)", r.MediaStore.Name, b.Reason, b.Message)
	}
	return nil
}

// StoreURI is where every image URI of a MediaStore starts.
func StoreURI(ms *agentsv1.MediaStore) string {
	switch {
	case ms.Spec.S3 != nil:
		return media.S3StoreURI(ms.Spec.S3.Bucket, ms.Spec.S3.Prefix)
	case ms.Spec.LocalDirectory != nil:
		return media.LocalStoreURI(ms.Spec.LocalDirectory.Root)
	}
	return ""
}

// DesiredReplicas is how many workers an Agent asks for.
func DesiredReplicas(agent *agentsv1.Agent) int32 {
	if w := workers(agent); w.Replicas != nil {
		return *w.Replicas
	}
	return 1
}

// WorkerOf reads the engine version and image a worker pod, or a pod
// template, runs.
func WorkerOf(labels map[string]string, spec *corev1.PodSpec) (engineVersion, image string) {
	for _, c := range spec.Containers {
		if c.Name == workerAppName {
			image = c.Image
		}
	}
	return labels[LabelEngineVersion], image
}

func deployment(r *Resolved, envs secretEnvs, serviceAccount, digest string) *appsv1ac.DeploymentApplyConfiguration {
	agent := r.Agent
	w := workers(agent)
	replicas := DesiredReplicas(agent)
	stopTimeout := StopTimeout(r)

	podLabels := objectLabels(agent.Name, ComponentWorker)
	podLabels[LabelEngineVersion] = r.EngineVersion
	deploymentLabels := objectLabels(agent.Name, ComponentWorker)
	deploymentLabels[LabelFlowClaim] = FlowClaim(r.EngineID, r.Names)
	if r.SharedTaskQueue != "" {
		deploymentLabels[LabelSharedFlowClaim] = FlowClaim(r.EngineID, tenancy.Shared(agent.Spec.FlowType))
	}
	if r.MediaStore != nil {
		deploymentLabels[LabelMediaStore] = r.MediaStore.Name
	}

	// The field reference is spelled as the API server stores it; see envVar.
	env := []*corev1ac.EnvVarApplyConfiguration{
		corev1ac.EnvVar().WithName(EnvPodName).WithValueFrom(
			corev1ac.EnvVarSource().WithFieldRef(corev1ac.ObjectFieldSelector().WithAPIVersion("v1").WithFieldPath("metadata.name"))),
	}
	env = append(env, envs.envVars()...)
	for i := range w.Env {
		env = append(env, envVar(&w.Env[i]))
	}

	var initContainers []*corev1ac.ContainerApplyConfiguration
	volumes := []*corev1ac.VolumeApplyConfiguration{
		corev1ac.Volume().WithName(configVolume).WithConfigMap(
			corev1ac.ConfigMapVolumeSource().WithName(ConfigMapName(agent.Name, digest))),
		corev1ac.Volume().WithName("tmp").WithEmptyDir(corev1ac.EmptyDirVolumeSource()),
	}
	mounts := []*corev1ac.VolumeMountApplyConfiguration{
		corev1ac.VolumeMount().WithName(configVolume).WithMountPath(ConfigDir).WithReadOnly(true),
		corev1ac.VolumeMount().WithName("tmp").WithMountPath("/tmp"),
	}
	if ref := tracingCA(agent.Spec.Tracing); ref != nil {
		volumes = append(volumes, corev1ac.Volume().WithName("tracing-ca").WithSecret(
			corev1ac.SecretVolumeSource().WithSecretName(ref.Name).WithDefaultMode(0o440).
				WithItems(corev1ac.KeyToPath().WithKey(ref.Key).WithPath(path.Base(TracingCAFile)))))
		mounts = append(mounts, corev1ac.VolumeMount().WithName("tracing-ca").WithMountPath(path.Dir(TracingCAFile)).WithReadOnly(true))
	}
	if tls := r.Engine.TLS; tls != nil && tls.SecretRef != nil {
		volumes = append(volumes, corev1ac.Volume().WithName("engine-tls").WithSecret(
			corev1ac.SecretVolumeSource().WithSecretName(tls.SecretRef.Name).WithDefaultMode(0o440)))
		mounts = append(mounts, corev1ac.VolumeMount().WithName("engine-tls").WithMountPath(EngineTLSDir).WithReadOnly(true))
	}
	if ms := r.MediaStore; ms != nil && ms.Spec.LocalDirectory != nil {
		// checkMediaVolume let only a root outside the system directories
		// through, and a hostPath only under an allowed host directory. The
		// volume is exactly the store: the whole claim, or the node's
		// directory root and nothing above it. Workers write images, so it
		// is mounted read-write, at root, where image URIs point.
		local := ms.Spec.LocalDirectory
		media := corev1ac.Volume().WithName("media")
		if local.PersistentVolumeClaimName != "" {
			media.WithPersistentVolumeClaim(corev1ac.PersistentVolumeClaimVolumeSource().WithClaimName(local.PersistentVolumeClaimName))
		} else {
			// Single-node use: every worker on the node shares the directory.
			// It must exist: the kubelet would create a missing one owned by
			// root, which the workers, never root, could not write to.
			media.WithHostPath(corev1ac.HostPathVolumeSource().WithPath(local.Root).WithType(corev1.HostPathDirectory))
			// The kubelet follows symbolic links on the node, which a
			// lexical check of the root cannot see.
			base, _ := HostPathBase(local.Root, agent.Namespace, r.MediaHostPathRoots)
			volumes = append(volumes, corev1ac.Volume().WithName("media-base").WithHostPath(
				corev1ac.HostPathVolumeSource().WithPath(base).WithType(corev1.HostPathDirectory)))
			initContainers = append(initContainers, mediaRootCheck(r.StockWorkerImage, base, local.Root))
		}
		volumes = append(volumes, media)
		mounts = append(mounts, corev1ac.VolumeMount().WithName("media").WithMountPath(local.Root))
	}

	probe := func(path string) *corev1ac.ProbeApplyConfiguration {
		return corev1ac.Probe().WithHTTPGet(corev1ac.HTTPGetAction().WithPath(path).WithPort(intstr.FromString("health"))).
			WithPeriodSeconds(10).WithFailureThreshold(3)
	}

	container := corev1ac.Container().
		WithName(workerAppName).
		WithImage(r.WorkerImage).
		WithArgs("--config="+ConfigDir+"/"+workerconfig.FileName, "--stop-timeout="+stopTimeout.String()).
		WithPorts(corev1ac.ContainerPort().WithName("health").WithContainerPort(HealthPort).WithProtocol(corev1.ProtocolTCP),
			corev1ac.ContainerPort().WithName(MetricsPortName).WithContainerPort(MetricsPort).WithProtocol(corev1.ProtocolTCP)).
		WithEnv(env...).
		WithVolumeMounts(mounts...).
		WithLivenessProbe(probe("/healthz")).
		WithReadinessProbe(probe("/readyz")).
		WithSecurityContext(corev1ac.SecurityContext().
			WithAllowPrivilegeEscalation(false).
			WithReadOnlyRootFilesystem(true).
			WithCapabilities(corev1ac.Capabilities().WithDrop("ALL")))
	container.WithResources(resources(w.Resources))

	pod := corev1ac.PodSpec().
		WithServiceAccountName(serviceAccount).
		// Workers never call the Kubernetes API.
		WithAutomountServiceAccountToken(false).
		WithTerminationGracePeriodSeconds(int64((stopTimeout + stopMargin) / time.Second)).
		WithSecurityContext(corev1ac.PodSecurityContext().
			WithRunAsNonRoot(true).
			WithSeccompProfile(corev1ac.SeccompProfile().WithType(corev1.SeccompProfileTypeRuntimeDefault))).
		WithInitContainers(initContainers...).
		WithContainers(container).
		WithVolumes(volumes...)
	if len(w.NodeSelector) > 0 {
		pod.WithNodeSelector(w.NodeSelector)
	}
	for i := range w.Tolerations {
		pod.WithTolerations(toleration(&w.Tolerations[i]))
	}
	for _, s := range w.ImagePullSecrets {
		pod.WithImagePullSecrets(corev1ac.LocalObjectReference().WithName(s.Name))
	}

	maxSurge, maxUnavailable := intstr.FromString("25%"), intstr.FromInt32(0)
	return appsv1ac.Deployment(WorkerName(agent.Name), agent.Namespace).
		WithLabels(deploymentLabels).
		WithOwnerReferences(ownerReference(agent)).
		WithSpec(appsv1ac.DeploymentSpec().
			WithReplicas(replicas).
			WithSelector(metav1ac.LabelSelector().WithMatchLabels(SelectorLabels(agent.Name))).
			WithStrategy(appsv1ac.DeploymentStrategy().
				WithType(appsv1.RollingUpdateDeploymentStrategyType).
				WithRollingUpdate(appsv1ac.RollingUpdateDeployment().WithMaxSurge(maxSurge).WithMaxUnavailable(maxUnavailable))).
			WithTemplate(corev1ac.PodTemplateSpec().
				WithLabels(podLabels).
				WithAnnotations(map[string]string{AnnotationConfigDigest: digest}).
				WithSpec(pod)))
}

// MediaRootCheckCommand is the stock worker's command that checks a
// hostPath MediaStore's root before a worker pod starts.
const MediaRootCheckCommand = "check-media-root"

// Where the media root check sees the allowed directory and the store.
const (
	mediaBaseDir  = "/stepwise/media-base"
	mediaStoreDir = "/stepwise/media-store"
)

// mediaRootCheck is the init container that refuses to start a worker whose
// hostPath store the kubelet mounted through a symbolic link: from the
// allowed directory down to the store's root, no component may be one, and
// the directory mounted must be the one the path names. It runs the stock
// worker image, which the operator chose, whatever image the Agent names,
// and sees the allowed directory read-only.
func mediaRootCheck(image, base, root string) *corev1ac.ContainerApplyConfiguration {
	rel := strings.TrimPrefix(strings.TrimPrefix(root, base), "/")
	return corev1ac.Container().
		WithName("media-root-check").
		WithImage(image).
		WithArgs(MediaRootCheckCommand, "--base="+mediaBaseDir, "--store="+mediaStoreDir, "--path="+rel).
		WithVolumeMounts(
			corev1ac.VolumeMount().WithName("media-base").WithMountPath(mediaBaseDir).WithReadOnly(true),
			corev1ac.VolumeMount().WithName("media").WithMountPath(mediaStoreDir).WithReadOnly(true)).
		WithResources(corev1ac.ResourceRequirements().
			WithRequests(corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("10m"), corev1.ResourceMemory: resource.MustParse("16Mi")}).
			WithLimits(corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("64Mi")})).
		WithSecurityContext(corev1ac.SecurityContext().
			WithAllowPrivilegeEscalation(false).
			WithReadOnlyRootFilesystem(true).
			WithCapabilities(corev1ac.Capabilities().WithDrop("ALL")))
}

// DisruptionBudgetName is the name of an Agent's worker PodDisruptionBudget.
func DisruptionBudgetName(agentName string) string { return WorkerName(agentName) }

// disruptionBudget allows one voluntary eviction at a time across every
// worker version. A worker that is not ready may always be evicted: it
// holds no Step, and a crash-looping pod must not block a node drain.
func disruptionBudget(agent *agentsv1.Agent) *policyv1ac.PodDisruptionBudgetApplyConfiguration {
	return policyv1ac.PodDisruptionBudget(DisruptionBudgetName(agent.Name), agent.Namespace).
		WithLabels(objectLabels(agent.Name, ComponentWorker)).
		WithOwnerReferences(ownerReference(agent)).
		WithSpec(policyv1ac.PodDisruptionBudgetSpec().
			WithMaxUnavailable(intstr.FromInt32(1)).
			WithSelector(metav1ac.LabelSelector().WithMatchLabels(SelectorLabels(agent.Name))).
			WithUnhealthyPodEvictionPolicy(policyv1.AlwaysAllow))
}

// NetworkPolicyName is the name of an Agent's worker NetworkPolicy.
func NetworkPolicyName(agentName string) string { return WorkerName(agentName) }

// networkPolicy lets into the workers only the kubelet's probes and the
// metrics scrapers: the workers call out, to the engine, models, tools and
// the event hub, and serve nothing else; their debug events listen on
// loopback alone.
func networkPolicy(agent *agentsv1.Agent, p WorkerNetworkPolicy) *networkingv1ac.NetworkPolicyApplyConfiguration {
	metrics := networkingv1ac.NetworkPolicyIngressRule().
		WithPorts(networkingv1ac.NetworkPolicyPort().WithPort(intstr.FromInt32(MetricsPort)).WithProtocol(corev1.ProtocolTCP))
	if p.MetricsNamespace != "" {
		metrics.WithFrom(networkingv1ac.NetworkPolicyPeer().WithNamespaceSelector(
			metav1ac.LabelSelector().WithMatchLabels(map[string]string{corev1.LabelMetadataName: p.MetricsNamespace})))
	}
	return networkingv1ac.NetworkPolicy(NetworkPolicyName(agent.Name), agent.Namespace).
		WithLabels(objectLabels(agent.Name, ComponentWorker)).
		WithOwnerReferences(ownerReference(agent)).
		WithSpec(networkingv1ac.NetworkPolicySpec().
			WithPodSelector(metav1ac.LabelSelector().WithMatchLabels(SelectorLabels(agent.Name))).
			WithPolicyTypes(networkingv1.PolicyTypeIngress).
			WithIngress(
				networkingv1ac.NetworkPolicyIngressRule().
					WithPorts(networkingv1ac.NetworkPolicyPort().WithPort(intstr.FromInt32(HealthPort)).WithProtocol(corev1.ProtocolTCP)),
				metrics))
}

func objectLabels(agentName, component string) map[string]string {
	return map[string]string{
		LabelName:      workerAppName,
		LabelInstance:  agentName,
		LabelComponent: component,
		LabelManagedBy: ManagedBy,
		LabelAgent:     agentName,
	}
}

func ownerReference(agent *agentsv1.Agent) *metav1ac.OwnerReferenceApplyConfiguration {
	return metav1ac.OwnerReference().
		WithAPIVersion(agentsv1.GroupVersion.String()).
		WithKind("Agent").
		WithName(agent.Name).
		WithUID(agent.UID).
		WithController(true).
		WithBlockOwnerDeletion(true)
}

func orDefault[T comparable](v, fallback T) T {
	var zero T
	if v == zero {
		return fallback
	}
	return v
}

func durationOr(d *metav1.Duration, fallback time.Duration) metav1.Duration {
	if d == nil {
		return metav1.Duration{Duration: fallback}
	}
	return *d
}

// Convert turns a typed API value into its apply configuration, or an
// apply configuration that the client filled with the API server's answer
// into its typed value. The two share one JSON form, so the round trip
// through JSON is exact.
func Convert[T any](from any) (*T, error) {
	data, err := json.Marshal(from)
	if err != nil {
		return nil, fmt.Errorf("encoding %T: %w", from, err)
	}
	out := new(T)
	if err := json.Unmarshal(data, out); err != nil {
		return nil, fmt.Errorf("decoding %T: %w", out, err)
	}
	return out, nil
}

// applyConfig converts a typed value the builders hold; that cannot fail.
func applyConfig[T any](typed any) *T {
	out, err := Convert[T](typed)
	if err != nil {
		panic(err)
	}
	return out
}

// The worker Deployment is rendered as the API server stores it, so that an
// unchanged Agent renders exactly what the Deployment holds and the
// operator sends no apply. The values the server defaults inside atomic
// fields (applied, and so owned, as a whole) and the quantities it rounds
// are spelled out here, as the server would store them.

// envVar is a variable of spec.workers.env as the API server stores it.
func envVar(e *corev1.EnvVar) *corev1ac.EnvVarApplyConfiguration {
	e = e.DeepCopy()
	if from := e.ValueFrom; from != nil {
		if from.FieldRef != nil && from.FieldRef.APIVersion == "" {
			from.FieldRef.APIVersion = "v1"
		}
		if from.FileKeyRef != nil && from.FileKeyRef.Optional == nil {
			from.FileKeyRef.Optional = new(false)
		}
	}
	return applyConfig[corev1ac.EnvVarApplyConfiguration](e)
}

func toleration(t *corev1.Toleration) *corev1ac.TolerationApplyConfiguration {
	return applyConfig[corev1ac.TolerationApplyConfiguration](t)
}

// resources are the worker container's resources as the API server stores
// them: it rounds quantities up to thousandths of a unit.
// Worker resources where the Agent names none: a request the scheduler can
// place many of, and a memory limit so one runaway worker cannot take its
// node's memory. No CPU limit, which would throttle Steps for nothing.
var (
	DefaultWorkerCPURequest    = resource.MustParse("50m")
	DefaultWorkerMemoryRequest = resource.MustParse("128Mi")
	DefaultWorkerMemoryLimit   = resource.MustParse("1Gi")
)

// resources are the Agent's worker resources, each unset one defaulted so
// that a request never exceeds its limit.
func resources(r corev1.ResourceRequirements) *corev1ac.ResourceRequirementsApplyConfiguration {
	r = *r.DeepCopy()
	if r.Requests == nil {
		r.Requests = corev1.ResourceList{}
	}
	if r.Limits == nil {
		r.Limits = corev1.ResourceList{}
	}
	if _, ok := r.Requests[corev1.ResourceCPU]; !ok {
		request := DefaultWorkerCPURequest
		if limit, ok := r.Limits[corev1.ResourceCPU]; ok && limit.Cmp(request) < 0 {
			request = limit
		}
		r.Requests[corev1.ResourceCPU] = request
	}
	if _, ok := r.Limits[corev1.ResourceMemory]; !ok {
		limit := DefaultWorkerMemoryLimit
		if request, ok := r.Requests[corev1.ResourceMemory]; ok && request.Cmp(limit) > 0 {
			limit = request
		}
		r.Limits[corev1.ResourceMemory] = limit
	}
	if _, ok := r.Requests[corev1.ResourceMemory]; !ok {
		request := DefaultWorkerMemoryRequest
		if limit := r.Limits[corev1.ResourceMemory]; limit.Cmp(request) < 0 {
			request = limit
		}
		r.Requests[corev1.ResourceMemory] = request
	}
	for _, list := range []corev1.ResourceList{r.Limits, r.Requests} {
		for name, q := range list {
			q.RoundUp(-3)
			list[name] = q
		}
	}
	return applyConfig[corev1ac.ResourceRequirementsApplyConfiguration](&r)
}
