package gateway

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/selection"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	agentsv1 "github.com/stepwise-run/stepwise/api/v1alpha1"
	"github.com/stepwise-run/stepwise/internal/engineadmin"
	"github.com/stepwise-run/stepwise/internal/flowclaim"
	"github.com/stepwise-run/stepwise/internal/render"
)

// The gateway's role: it reads Agents, the worker Deployments that say
// which Agent holds a Flow type, and the Secrets an Agent's engine names,
// and asks the API server who a caller is and what they may do.
// +kubebuilder:rbac:groups=agents.stepwise.run,resources=agents,verbs=get;list;watch
// +kubebuilder:rbac:groups=apps,resources=deployments,verbs=get;list;watch
// +kubebuilder:rbac:groups="",resources=secrets,verbs=get
// +kubebuilder:rbac:groups=authentication.k8s.io,resources=tokenreviews,verbs=create
// +kubebuilder:rbac:groups=authorization.k8s.io,resources=subjectaccessreviews,verbs=create

// KubernetesAgents finds Agents, and their engines, through the API server.
type KubernetesAgents struct {
	// Reader reads Agents, worker Deployments and the Secrets an Agent's
	// engine names.
	Reader client.Reader
	// DefaultEngine is the operator's default engine, for Agents without
	// spec.engine.
	DefaultEngine *agentsv1.EngineSpec
	Engines       *engineadmin.Client
}

// Target implements Agents. It serves only an Agent that holds its Flow
// type: the one the operator runs workers for. Another Agent that names
// the same Flow type on the same engine namespace is refused, or its
// callers would reach the holder's sessions.
func (k *KubernetesAgents) Target(ctx context.Context, ref AgentRef) (Target, func(), error) {
	agent := &agentsv1.Agent{}
	err := k.Reader.Get(ctx, client.ObjectKey{Namespace: ref.Namespace, Name: ref.Name}, agent)
	switch {
	case apierrors.IsNotFound(err) || (err == nil && !agent.DeletionTimestamp.IsZero()):
		return Target{}, nil, fmt.Errorf("%w: Agent %s does not exist", ErrAgentNotFound, ref)
	case err != nil:
		return Target{}, nil, fmt.Errorf("reading Agent %s: %w", ref, err)
	}
	engine, ok := render.EngineFor(agent, render.Defaults{Engine: k.DefaultEngine})
	if !ok {
		return Target{}, nil, &httpError{status: http.StatusServiceUnavailable, reason: "not_ready",
			message: fmt.Sprintf("Agent %s has no spec.engine and the gateway has no default engine", ref)}
	}
	holder, held, err := flowclaim.Holder(ctx, k.Reader, render.FlowClaim(engine, agent.Spec.FlowType))
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
	secrets := map[string]*corev1.Secret{}
	resolved := &render.Resolved{Agent: agent, Engine: engine}
	engineOnly := &agentsv1.Agent{Spec: agentsv1.AgentSpec{Engine: agent.Spec.Engine}}
	for _, use := range render.AgentSecretUses(engineOnly, &engine) {
		secret := &corev1.Secret{}
		if err := k.Reader.Get(ctx, client.ObjectKey{Namespace: agent.Namespace, Name: use.Secret}, secret); err != nil {
			if apierrors.IsNotFound(err) {
				continue // ConnectionFor names the missing Secret
			}
			return Target{}, nil, fmt.Errorf("reading Secret %s of Agent %s: %w", use.Secret, ref, err)
		}
		secrets[use.Secret] = secret
		if strings.HasSuffix(use.Field, ".tls.secretRef") {
			_, resolved.EngineTLS.CA = render.SecretValue(secret, render.TLSCAKey)
			_, resolved.EngineTLS.ClientCert = render.SecretValue(secret, render.TLSCertKey)
		}
	}
	conn, err := engineadmin.ConnectionFor(resolved, secrets)
	if err != nil {
		return Target{}, nil, &httpError{status: http.StatusServiceUnavailable, reason: "not_ready",
			message: fmt.Sprintf("Agent %s: %v", ref, err)}
	}
	c, release, err := k.Engines.Acquire(ctx, conn)
	if err != nil {
		return Target{}, nil, err
	}
	return Target{Client: c, FlowType: agent.Spec.FlowType, TaskQueue: render.TaskQueue(agent.Spec.FlowType)}, release, nil
}

// KubernetesAuthorizer authorizes Kubernetes identities: TokenReview finds
// who the bearer token belongs to, and SubjectAccessReview asks whether
// they may do the verb on the agents/sessions subresource of the Agent.
type KubernetesAuthorizer struct {
	Client client.Client
	// Audiences the token must be for; empty takes the API server's.
	Audiences []string
}

// Authorize implements Authorizer.
func (k *KubernetesAuthorizer) Authorize(ctx context.Context, r *http.Request, ref AgentRef, verb Verb) error {
	token := bearerToken(r)
	if token == "" {
		return fmt.Errorf("%w: a bearer token is required", ErrUnauthenticated)
	}
	review := &authenticationv1.TokenReview{Spec: authenticationv1.TokenReviewSpec{Token: token, Audiences: k.Audiences}}
	if err := k.Client.Create(ctx, review); err != nil {
		return fmt.Errorf("reviewing a bearer token: %w", err)
	}
	if !review.Status.Authenticated {
		return fmt.Errorf("%w: the Kubernetes API server does not accept the bearer token", ErrUnauthenticated)
	}
	user := review.Status.User
	if len(k.Audiences) > 0 && !slices.ContainsFunc(review.Status.Audiences, func(a string) bool { return slices.Contains(k.Audiences, a) }) {
		return fmt.Errorf("%w: the bearer token is not for this gateway's audiences", ErrUnauthenticated)
	}
	extra := map[string]authorizationv1.ExtraValue{}
	for key, values := range user.Extra {
		extra[key] = authorizationv1.ExtraValue(values)
	}
	access := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
		User: user.Username, UID: user.UID, Groups: user.Groups, Extra: extra,
		ResourceAttributes: &authorizationv1.ResourceAttributes{
			Namespace: ref.Namespace, Verb: string(verb), Group: agentsv1.GroupVersion.Group,
			Resource: "agents", Subresource: "sessions", Name: ref.Name,
		},
	}}
	if err := k.Client.Create(ctx, access); err != nil {
		return fmt.Errorf("reviewing access for %s: %w", user.Username, err)
	}
	if !access.Status.Allowed {
		return fmt.Errorf("%w: %s may not %s sessions of Agent %s (verb %q on agents/sessions)", ErrForbidden, user.Username, verb, ref, verb)
	}
	return nil
}

// NewKubernetesClient returns the gateway's client: Agents and the worker
// Deployments that hold Flow types are read from a cache it keeps until ctx
// ends, so a request costs no list; Secrets are read from the API server
// when needed, so the gateway keeps no copy of the cluster's Secrets.
func NewKubernetesClient(ctx context.Context, cfg *rest.Config, scheme *runtime.Scheme) (client.Client, error) {
	claimed, err := labels.NewRequirement(render.LabelFlowClaim, selection.Exists, nil)
	if err != nil {
		return nil, err
	}
	objects, err := cache.New(cfg, cache.Options{Scheme: scheme, ByObject: map[client.Object]cache.ByObject{
		&appsv1.Deployment{}: {Label: labels.NewSelector().Add(*claimed)},
	}})
	if err != nil {
		return nil, fmt.Errorf("creating the gateway's cache: %w", err)
	}
	// Informers start on first use; asking now makes the first request
	// quick and a missing permission fail here rather than per request.
	for _, obj := range []client.Object{&agentsv1.Agent{}, &appsv1.Deployment{}} {
		if _, err := objects.GetInformer(ctx, obj); err != nil {
			return nil, fmt.Errorf("watching %T: %w", obj, err)
		}
	}
	go func() { _ = objects.Start(ctx) }()
	if !objects.WaitForCacheSync(ctx) {
		return nil, errors.New("the gateway's cache of Agents and worker Deployments did not sync")
	}
	return client.New(cfg, client.Options{Scheme: scheme, Cache: &client.CacheOptions{
		Reader: objects, DisableFor: []client.Object{&corev1.Secret{}},
	}})
}
