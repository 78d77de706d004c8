package gateway_test

import (
	"errors"
	"log/slog"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/stepwise-run/stepwise/internal/gateway"
	"github.com/stepwise-run/stepwise/internal/grants"
)

// Application tokens come from labeled Secrets, reach only their own
// namespace, and follow the Secrets as they change; any other bearer token
// goes on to the API server.
func TestApplicationTokensFollowTheirSecrets(t *testing.T) {
	k := startKube(t)
	ctx := t.Context()
	for _, ns := range []string{"team-a", "team-b"} {
		must(t, k.admin.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}))
	}
	const token = "an-application-token-of-team-a-0123456789"
	labeled := map[string]string{grants.LabelApplicationToken: "true"}
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "ticketing", Labels: labeled},
		StringData: map[string]string{"token": token, "verbs": "get, create, send", "agents": "support"}}
	must(t, k.admin.Create(ctx, secret))
	// The same kind of Secret without the label is not a token.
	const unlabeled = "an-unlabeled-token-of-team-a-0123456789"
	must(t, k.admin.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "other"},
		StringData: map[string]string{"token": unlabeled, "verbs": "get"}}))

	auth := &gateway.TokenAuthorizer{Next: k.authorizer(t, gateway.DefaultAuthorizerCache)}
	must(t, gateway.WatchPublishedGrants(ctx, k.informers, auth, grantsSource, slog.New(slog.DiscardHandler)))
	k.publishGrants(t)
	support := gateway.AgentRef{Namespace: "team-a", Name: "support"}
	authorize := func(tok string, ref gateway.AgentRef, verb grants.Verb) error {
		return auth.Authorize(ctx, requestWith(tok), ref, verb)
	}
	waitUntil(t, "the token to be known", func() bool { return authorize(token, support, grants.VerbSend) == nil })
	for _, tc := range []struct {
		name  string
		token string
		ref   gateway.AgentRef
		verb  grants.Verb
		want  error
	}{
		{"a verb it does not grant", token, support, grants.VerbApprove, gateway.ErrForbidden},
		{"an Agent it does not name", token, gateway.AgentRef{Namespace: "team-a", Name: "billing"}, grants.VerbGet, gateway.ErrForbidden},
		{"another namespace", token, gateway.AgentRef{Namespace: "team-b", Name: "support"}, grants.VerbGet, gateway.ErrForbidden},
		{"an unlabeled Secret's token", unlabeled, support, grants.VerbGet, gateway.ErrUnauthenticated},
	} {
		if err := authorize(tc.token, tc.ref, tc.verb); !errors.Is(err, tc.want) {
			t.Errorf("%s: Authorize = %v, want %v", tc.name, err, tc.want)
		}
	}

	// A copy of the token in another namespace makes it unusable rather
	// than reaching that namespace.
	copied := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "team-b", Name: "stolen", Labels: labeled},
		StringData: map[string]string{"token": token, "verbs": "get"}}
	must(t, k.admin.Create(ctx, copied))
	k.publishGrants(t)
	waitUntil(t, "a token two Secrets hold to be refused", func() bool {
		return errors.Is(authorize(token, support, grants.VerbGet), gateway.ErrUnauthenticated)
	})
	must(t, k.admin.Delete(ctx, copied))
	k.publishGrants(t)
	waitUntil(t, "the token to work again", func() bool { return authorize(token, support, grants.VerbGet) == nil })

	// Taking a verb away, then deleting the Secret, takes effect.
	secret.StringData = map[string]string{"verbs": "get"}
	must(t, k.admin.Update(ctx, secret))
	k.publishGrants(t)
	waitUntil(t, "the verb taken away to be refused", func() bool {
		return errors.Is(authorize(token, support, grants.VerbSend), gateway.ErrForbidden)
	})
	must(t, k.admin.Delete(ctx, secret))
	k.publishGrants(t)
	waitUntil(t, "the deleted token to be unknown", func() bool {
		return errors.Is(authorize(token, support, grants.VerbGet), gateway.ErrUnauthenticated)
	})
}

// The gateway reads no Secret but the ClusterEngines' credentials, one by
// name, in the operator's namespace: it can list none, and get none of a
// team's.
func TestTheGatewayReadsNoSecretsOfTheCluster(t *testing.T) {
	k := startKube(t)
	ctx := t.Context()
	must(t, k.admin.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "team-a"}}))
	must(t, k.admin.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "openai"},
		StringData: map[string]string{"api-key": "sk-team-a"}}))
	reader, err := client.New(k.gatewayConfig, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	for _, ns := range []string{"", "team-a", operatorNamespace} {
		if err := reader.List(ctx, &corev1.SecretList{}, client.InNamespace(ns)); !apierrors.IsForbidden(err) {
			t.Errorf("the gateway lists Secrets of %q: %v, want forbidden", ns, err)
		}
	}
	if err := reader.Get(ctx, client.ObjectKey{Namespace: "team-a", Name: "openai"}, &corev1.Secret{}); !apierrors.IsForbidden(err) {
		t.Errorf("the gateway gets a team's Secret: %v, want forbidden", err)
	}
}
