package gateway

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/selection"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apiserver/pkg/authentication/authenticator"
	tokencache "k8s.io/apiserver/pkg/authentication/token/cache"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	"k8s.io/apiserver/pkg/authorization/authorizerfactory"
	webhooktoken "k8s.io/apiserver/plugin/pkg/authenticator/token/webhook"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	agentsv1 "github.com/stepwise-run/stepwise/api/v1alpha1"
	"github.com/stepwise-run/stepwise/internal/engineadmin"
	"github.com/stepwise-run/stepwise/internal/flowclaim"
	"github.com/stepwise-run/stepwise/internal/grants"
	"github.com/stepwise-run/stepwise/internal/render"
	"github.com/stepwise-run/stepwise/internal/tenancy"
	sessions "github.com/stepwise-run/stepwise/pkg/client"
)

// The gateway's cluster role: it reads Agents, the worker Deployments that
// say which Agent holds a claim, the ClusterEngines and the labels of
// namespaces that say which engine an Agent may use, and the session Flow
// graph ConfigMaps, and asks the API server who a caller is and what they
// may do. It reads no Secret cluster-wide: the chart adds a Role in the
// operator's namespace to get the ClusterEngines' credential Secrets and
// watch the published grants, and a cluster-wide get of Secrets only where
// namespaces may name engines of their own, whose credentials live in
// their namespaces.
// +kubebuilder:rbac:groups=agents.stepwise.run,resources=agents;clusterengines,verbs=get;list;watch
// +kubebuilder:rbac:groups=apps,resources=deployments,verbs=get;list;watch
// +kubebuilder:rbac:groups="",resources=namespaces,verbs=get
// +kubebuilder:rbac:groups="",resources=configmaps,verbs=get
// +kubebuilder:rbac:groups=authentication.k8s.io,resources=tokenreviews,verbs=create
// +kubebuilder:rbac:groups=authorization.k8s.io,resources=subjectaccessreviews,verbs=create

// KubernetesAgents finds Agents, and their engines, through the API server.
type KubernetesAgents struct {
	// Reader reads Agents, ClusterEngines, worker Deployments, namespaces
	// and the Secrets an Agent's engine names.
	Reader client.Reader
	// Defaults are the engine rules the operator applies, as the shared
	// flags give them: the gateway serves exactly the Agents the operator
	// runs.
	Defaults render.Defaults
	// OperatorNamespace is where the ClusterEngines' Secrets are.
	OperatorNamespace string
	Engines           *engineadmin.Client
}

// Target implements Agents. It serves only an Agent that the operator runs
// on its engine and that holds its claims there; another Agent that names
// the same Flow type on the same engine is refused. An Agent's sessions
// are reached only under its own names, so no Agent, of this namespace or
// another, reaches another's.
func (k *KubernetesAgents) Target(ctx context.Context, ref AgentRef) (Target, func(), error) {
	agent := &agentsv1.Agent{}
	err := k.Reader.Get(ctx, client.ObjectKey{Namespace: ref.Namespace, Name: ref.Name}, agent)
	switch {
	case apierrors.IsNotFound(err) || (err == nil && !agent.DeletionTimestamp.IsZero()):
		return Target{}, nil, fmt.Errorf("%w: Agent %s does not exist", ErrAgentNotFound, ref)
	case err != nil:
		return Target{}, nil, fmt.Errorf("reading Agent %s: %w", ref, err)
	}
	observed, err := k.observeEngine(ctx, agent)
	if err != nil {
		return Target{}, nil, err
	}
	resolved, blocker := render.ResolveEngine(agent, observed, k.Defaults)
	if blocker != nil {
		return Target{}, nil, &httpError{status: http.StatusServiceUnavailable, reason: "not_ready",
			message: fmt.Sprintf("Agent %s cannot be served: %s", ref, blocker.Message)}
	}
	if agent.Status.TaskQueue == "" || agent.Status.EngineID != resolved.EngineID {
		return Target{}, nil, &httpError{status: http.StatusServiceUnavailable, reason: "not_ready",
			message: fmt.Sprintf("Agent %s runs no workers on its engine yet", ref)}
	}
	// The Agent's workers hold the claim of the names its status gives:
	// the shared names alone while they are of an engine that knows no
	// other, its own and, while they serve them too, the shared names.
	claims := flowclaim.OfWorkers(resolved.EngineID, tenancy.Tenant(agent.Namespace, agent.Spec.FlowType), agent.Status.SharedTaskQueue != "")
	if shared := tenancy.Shared(agent.Spec.FlowType); agent.Status.TaskQueue == shared.TaskQueue() {
		claims = flowclaim.OfWorkers(resolved.EngineID, shared, false)
	}
	for _, claim := range claims {
		holder, held, err := flowclaim.Holder(ctx, k.Reader, claim)
		switch {
		case err != nil:
			return Target{}, nil, err
		case !held:
			return Target{}, nil, &httpError{status: http.StatusServiceUnavailable, reason: "not_ready",
				message: fmt.Sprintf("Agent %s runs no workers yet", ref)}
		case holder != client.ObjectKeyFromObject(agent):
			return Target{}, nil, &httpError{status: http.StatusConflict, reason: "flow_type_conflict",
				message: fmt.Sprintf("Agent %s names Flow type %q, which another Agent holds on its engine", ref, agent.Spec.FlowType)}
		}
	}
	conn, err := engineadmin.ConnectionFor(resolved)
	if err != nil {
		return Target{}, nil, &httpError{status: http.StatusServiceUnavailable, reason: "not_ready",
			message: fmt.Sprintf("Agent %s: %v", ref, err)}
	}
	c, release, err := k.Engines.Acquire(ctx, conn)
	if err != nil {
		return Target{}, nil, err
	}
	return Target{Client: c, Agent: sessions.AgentOf(agent)}, release, nil
}

// observeEngine reads what checking the Agent's engine takes, as the
// operator reads it. The gateway never asks an engine who it is: the
// Agent's status says what the operator found.
func (k *KubernetesAgents) observeEngine(ctx context.Context, agent *agentsv1.Agent) (render.Observed, error) {
	observed := render.Observed{Secrets: map[string]*corev1.Secret{}, NamespaceEngineID: agent.Status.EngineID}
	if own, ok := render.NamespaceEngine(agent); ok {
		secrets, err := k.secrets(ctx, agent.Namespace, render.EngineSecretUses("spec.engine", own))
		observed.Secrets = secrets
		return observed, err
	}
	name := render.ClusterEngineName(agent, k.Defaults)
	if name == "" {
		return observed, nil
	}
	ce := &agentsv1.ClusterEngine{}
	switch err := k.Reader.Get(ctx, client.ObjectKey{Name: name}, ce); {
	case apierrors.IsNotFound(err):
		return observed, nil
	case err != nil:
		return observed, fmt.Errorf("reading ClusterEngine %s: %w", name, err)
	}
	observed.ClusterEngine = ce
	secrets, err := k.secrets(ctx, k.OperatorNamespace, render.EngineSecretUses("", render.ClusterEngineSpecOf(ce)))
	if err != nil {
		return observed, err
	}
	observed.EngineSecrets = secrets
	ns := &corev1.Namespace{}
	if err := k.Reader.Get(ctx, client.ObjectKey{Name: agent.Namespace}, ns); err != nil {
		return observed, fmt.Errorf("reading namespace %s: %w", agent.Namespace, err)
	}
	observed.NamespaceLabels = ns.Labels
	return observed, nil
}

// secrets reads the Secrets uses name in a namespace; a missing one is
// left out, for ResolveEngine to name.
func (k *KubernetesAgents) secrets(ctx context.Context, namespace string, uses []render.SecretUse) (map[string]*corev1.Secret, error) {
	out := map[string]*corev1.Secret{}
	for _, use := range uses {
		secret := &corev1.Secret{}
		err := k.Reader.Get(ctx, client.ObjectKey{Namespace: namespace, Name: use.Secret}, secret)
		switch {
		case apierrors.IsNotFound(err):
		case err != nil:
			return nil, fmt.Errorf("reading Secret %s/%s: %w", namespace, use.Secret, err)
		default:
			out[use.Secret] = secret
		}
	}
	return out, nil
}

// List implements Agents, from the cache.
func (k *KubernetesAgents) List(ctx context.Context, namespace string) ([]AgentRef, error) {
	var list agentsv1.AgentList
	if err := k.Reader.List(ctx, &list, client.InNamespace(namespace)); err != nil {
		return nil, fmt.Errorf("listing Agents: %w", err)
	}
	refs := make([]AgentRef, 0, len(list.Items))
	for i := range list.Items {
		if a := &list.Items[i]; a.DeletionTimestamp.IsZero() {
			refs = append(refs, AgentRef{Namespace: a.Namespace, Name: a.Name})
		}
	}
	return refs, nil
}

// Graph implements Agents: the graph ConfigMap the operator publishes,
// read from the API server, as the gateway caches no ConfigMaps.
func (k *KubernetesAgents) Graph(ctx context.Context, ref AgentRef) ([]byte, error) {
	agent := &agentsv1.Agent{}
	err := k.Reader.Get(ctx, client.ObjectKey{Namespace: ref.Namespace, Name: ref.Name}, agent)
	switch {
	case apierrors.IsNotFound(err) || (err == nil && !agent.DeletionTimestamp.IsZero()):
		return nil, fmt.Errorf("%w: Agent %s does not exist", ErrAgentNotFound, ref)
	case err != nil:
		return nil, fmt.Errorf("reading Agent %s: %w", ref, err)
	}
	cm := &corev1.ConfigMap{}
	err = k.Reader.Get(ctx, client.ObjectKey{Namespace: ref.Namespace, Name: render.GraphConfigMapName(ref.Name)}, cm)
	switch {
	case apierrors.IsNotFound(err):
		return nil, fmt.Errorf("%w: Agent %s", ErrGraphNotPublished, ref)
	case err != nil:
		return nil, fmt.Errorf("reading the session Flow graph of Agent %s: %w", ref, err)
	}
	// A ConfigMap of that name that the Agent does not own is not the
	// operator's graph: a user who may write ConfigMaps could put any
	// document there.
	doc, ok := cm.Data[render.GraphFileName]
	if !ok || !metav1.IsControlledBy(cm, agent) {
		return nil, fmt.Errorf("%w: Agent %s", ErrGraphNotPublished, ref)
	}
	return []byte(doc), nil
}

// DefaultAudience is the audience the gateway takes Kubernetes tokens for
// unless told otherwise: a token made for it (kubectl create token NAME
// --audience stepwise-gateway) is refused by the API server, so one the
// gateway is shown, or one leaked from it, cannot be replayed there.
const DefaultAudience = "stepwise-gateway"

// KubernetesAuthorizer authorizes Kubernetes identities: TokenReview finds
// who the bearer token belongs to, and SubjectAccessReview asks whether
// they may do the verb on the agents/sessions subresource of the Agent.
// Both answers are cached, as the API server caches its own webhooks', so
// a browser's requests cost no review each; a revoked token or permission
// stops working within the cache's TTL.
type KubernetesAuthorizer struct {
	audiences authenticator.Audiences
	tokens    authenticator.Token
	access    authorizer.Authorizer
	gate      *reviewGate
}

// AuthorizerCache is how long the Kubernetes authorizer keeps answers.
type AuthorizerCache struct {
	// Allowed is how long an accepted token and an allowed verb are kept.
	Allowed time.Duration
	// Denied is how long a refused token or verb is kept; short, so a
	// permission just granted works soon.
	Denied time.Duration
}

// DefaultAuthorizerCache keeps answers briefly: approvals are the gate of
// tool calls with effects, so a revoked permission must stop soon.
var DefaultAuthorizerCache = AuthorizerCache{Allowed: time.Minute, Denied: 10 * time.Second}

// reviewBackoff retries a review the API server failed, briefly: a caller
// waits on it.
var reviewBackoff = wait.Backoff{Duration: 100 * time.Millisecond, Factor: 2, Jitter: 0.2, Steps: 3}

// NewKubernetesAuthorizer reviews tokens and access through the API server
// of cs. A token must be for one of audiences; none takes the API server's.
// Tokens not accepted before are reviewed within DefaultReviewLimits.
func NewKubernetesAuthorizer(cs kubernetes.Interface, audiences []string, ttl AuthorizerCache) (*KubernetesAuthorizer, error) {
	return NewKubernetesAuthorizerWithLimits(cs, audiences, ttl, DefaultReviewLimits)
}

// NewKubernetesAuthorizerWithLimits is NewKubernetesAuthorizer with limits
// of its own on reviews of unknown tokens.
func NewKubernetesAuthorizerWithLimits(cs kubernetes.Interface, audiences []string, ttl AuthorizerCache, limits ReviewLimits) (*KubernetesAuthorizer, error) {
	tokens, err := webhooktoken.NewFromInterface(cs.AuthenticationV1(), nil, reviewBackoff, 10*time.Second,
		webhooktoken.AuthenticatorMetrics{RecordRequestTotal: func(context.Context, string) {}, RecordRequestLatency: func(context.Context, string, float64) {}})
	if err != nil {
		return nil, fmt.Errorf("creating the token reviewer: %w", err)
	}
	access, err := authorizerfactory.DelegatingAuthorizerConfig{
		SubjectAccessReviewClient: cs.AuthorizationV1(),
		AllowCacheTTL:             ttl.Allowed,
		DenyCacheTTL:              ttl.Denied,
		WebhookRetryBackoff:       &reviewBackoff,
	}.New()
	if err != nil {
		return nil, fmt.Errorf("creating the access reviewer: %w", err)
	}
	return &KubernetesAuthorizer{audiences: audiences, tokens: tokencache.New(tokens, false, ttl.Allowed, ttl.Denied), access: access,
		gate: newReviewGate(limits, ttl.Allowed)}, nil
}

// Authenticate implements Authorizer.
func (k *KubernetesAuthorizer) Authenticate(ctx context.Context, r *http.Request) error {
	_, err := k.authenticate(ctx, r)
	return err
}

// authenticate reviews the request's bearer token.
func (k *KubernetesAuthorizer) authenticate(ctx context.Context, r *http.Request) (*authenticator.Response, error) {
	token := bearerToken(r)
	if token == "" {
		return nil, fmt.Errorf("%w: a bearer token is required", ErrUnauthenticated)
	}
	if len(k.audiences) > 0 {
		// The reviewer asks for these audiences and accepts a token for
		// none of them as it would an invalid one.
		ctx = authenticator.WithAudiences(ctx, k.audiences)
	}
	if !k.gate.admit(r, token) {
		return nil, &httpError{status: http.StatusTooManyRequests, reason: "too_many_token_reviews",
			message: "this client presented more unknown bearer tokens than the gateway reviews; send again in a few seconds"}
	}
	resp, ok, err := k.tokens.AuthenticateToken(ctx, token)
	if ok {
		k.gate.accepted(token)
	}
	switch {
	case err != nil && reviewFailed(err):
		return nil, reviewUnavailable("review the bearer token", err)
	case !ok && len(k.audiences) > 0:
		return nil, fmt.Errorf("%w: the Kubernetes API server does not accept the bearer token for this gateway's audiences (%s)",
			ErrUnauthenticated, strings.Join(k.audiences, ", "))
	case !ok:
		return nil, fmt.Errorf("%w: the Kubernetes API server does not accept the bearer token", ErrUnauthenticated)
	}
	return resp, nil
}

// Authorize implements Authorizer.
func (k *KubernetesAuthorizer) Authorize(ctx context.Context, r *http.Request, ref AgentRef, verb grants.Verb) error {
	resp, err := k.authenticate(ctx, r)
	if err != nil {
		return err
	}
	decision, reason, err := k.access.Authorize(ctx, authorizer.AttributesRecord{
		User: resp.User, Verb: string(verb), Namespace: ref.Namespace, APIGroup: agentsv1.GroupVersion.Group,
		APIVersion: agentsv1.GroupVersion.Version, Resource: "agents", Subresource: "sessions", Name: ref.Name, ResourceRequest: true,
	})
	switch {
	case err != nil:
		return reviewUnavailable("review access for "+resp.User.GetName(), err)
	case decision != authorizer.DecisionAllow:
		msg := fmt.Sprintf("%s may not %s sessions of Agent %s (verb %q on agents/sessions)", resp.User.GetName(), verb, ref, verb)
		if reason != "" {
			msg += ": " + reason
		}
		return fmt.Errorf("%w: %s", ErrForbidden, msg)
	}
	return nil
}

// reviewFailed tells a review the API server did not answer from its
// answer that a token is invalid, which the reviewer also reports as an
// error.
func reviewFailed(err error) bool {
	var status apierrors.APIStatus
	var network net.Error
	return errors.As(err, &status) || errors.As(err, &network) || errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled)
}

// reviewUnavailable is a review the API server did not answer: the caller
// may be allowed, so the answer is 503, never 401 or 403.
func reviewUnavailable(what string, err error) error {
	return &httpError{status: http.StatusServiceUnavailable, reason: "authorization_unavailable",
		message: fmt.Sprintf("the gateway could not %s with the Kubernetes API server: %v", what, err)}
}

// NewKubernetesClient returns the gateway's client and its cache: Agents,
// the worker Deployments that hold Flow types and the published grants
// ConfigMap are read from the cache, kept until ctx ends, so a request
// costs no list; the Secrets an engine takes credentials from are read
// from the API server when needed, one by name, so the gateway may get
// those and list none.
// An empty src.Name watches no grants.
func NewKubernetesClient(ctx context.Context, cfg *rest.Config, scheme *runtime.Scheme, src GrantsSource) (client.Client, cache.Cache, error) {
	claimed, err := labels.NewRequirement(flowclaim.LabelFlowClaim, selection.Exists, nil)
	if err != nil {
		return nil, nil, err
	}
	byObject := map[client.Object]cache.ByObject{&appsv1.Deployment{}: {Label: labels.NewSelector().Add(*claimed)}}
	watched := []client.Object{&agentsv1.Agent{}, &agentsv1.ClusterEngine{}, &appsv1.Deployment{}}
	if src.Name != "" {
		byObject[&corev1.ConfigMap{}] = cache.ByObject{Namespaces: map[string]cache.Config{src.Namespace: {}},
			Field: fields.OneTermEqualSelector("metadata.name", src.Name)}
		watched = append(watched, &corev1.ConfigMap{})
	}
	objects, err := cache.New(cfg, cache.Options{Scheme: scheme, ByObject: byObject})
	if err != nil {
		return nil, nil, fmt.Errorf("creating the gateway's cache: %w", err)
	}
	// Informers start on first use; asking now makes the first request
	// quick and a missing permission fail here rather than per request.
	for _, obj := range watched {
		if _, err := objects.GetInformer(ctx, obj); err != nil {
			return nil, nil, fmt.Errorf("watching %T: %w", obj, err)
		}
	}
	go func() { _ = objects.Start(ctx) }()
	if !objects.WaitForCacheSync(ctx) {
		return nil, nil, errors.New("the gateway's cache of Agents, worker Deployments and published grants did not sync")
	}
	c, err := client.New(cfg, client.Options{Scheme: scheme, Cache: &client.CacheOptions{
		Reader: objects, DisableFor: []client.Object{&corev1.Secret{}, &corev1.ConfigMap{}, &corev1.Namespace{}},
	}})
	if err != nil {
		return nil, nil, err
	}
	return c, objects, nil
}
