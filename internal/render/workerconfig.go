package render

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"

	agentsv1 "github.com/stepwise-run/stepwise/api/v1alpha1"
	"github.com/stepwise-run/stepwise/internal/media"
	"github.com/stepwise-run/stepwise/internal/spend"
	"github.com/stepwise-run/stepwise/pkg/workerconfig"
)

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

// SecretEnvName is the environment variable that carries one Secret key. It
// is derived from the Secret and key, so the same key always has the same
// variable and no value ever appears in its name.
func SecretEnvName(secret, key string) string {
	sum := sha256.Sum256([]byte(secret + "\x00" + key))
	return secretEnvPrefix + strings.ToUpper(hex.EncodeToString(sum[:6]))
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
