package gateway_test

import (
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	agentsv1 "github.com/stepwise-run/stepwise/api/v1alpha1"
	"github.com/stepwise-run/stepwise/internal/gateway"
	"github.com/stepwise-run/stepwise/internal/gatewayapi"
	"github.com/stepwise-run/stepwise/internal/grants"
)

func TestKubernetesAuthorizerAsksRBACForTheVerbOnTheAgent(t *testing.T) {
	k := startKube(t)
	ctx := t.Context()
	for _, ns := range []string{"team-a", "team-b"} {
		must(t, k.admin.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}))
	}
	// An approver of support's sessions, by name, and nothing else.
	must(t, k.admin.Create(ctx, &rbacv1.Role{
		ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "support-approver"},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{agentsv1.GroupVersion.Group}, Resources: []string{"agents/sessions"},
			ResourceNames: []string{"support"}, Verbs: []string{"get", "approve"}}},
	}))
	must(t, k.admin.Create(ctx, &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "support-approver"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "support-approver"},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: "team-a", Name: "approver"}},
	}))
	approver := k.serviceAccountToken(t, "team-a", "approver", "stepwise-gateway")
	otherAudience := k.serviceAccountToken(t, "team-a", "elsewhere", "another-service")

	auth := k.authorizer(t, gateway.DefaultAuthorizerCache, "stepwise-gateway")
	supportRef := gateway.AgentRef{Namespace: "team-a", Name: "support"}
	cases := []struct {
		name  string
		token string
		ref   gateway.AgentRef
		verb  grants.Verb
		want  error
	}{
		{"the granted verb", approver, supportRef, grants.VerbApprove, nil},
		{"reading", approver, supportRef, grants.VerbGet, nil},
		{"a verb the Role leaves out", approver, supportRef, grants.VerbSend, gateway.ErrForbidden},
		{"another Agent of the namespace", approver, gateway.AgentRef{Namespace: "team-a", Name: "billing"}, grants.VerbGet, gateway.ErrForbidden},
		{"the same Agent name in another namespace", approver, gateway.AgentRef{Namespace: "team-b", Name: "support"}, grants.VerbGet, gateway.ErrForbidden},
		{"a token for another audience", otherAudience, supportRef, grants.VerbGet, gateway.ErrUnauthenticated},
		{"a token the API server never issued", "not-a-token", supportRef, grants.VerbGet, gateway.ErrUnauthenticated},
		{"no token", "", supportRef, grants.VerbGet, gateway.ErrUnauthenticated},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := auth.Authorize(ctx, requestWith(tc.token), tc.ref, tc.verb)
			if (tc.want == nil) != (err == nil) || (tc.want != nil && !errors.Is(err, tc.want)) {
				t.Fatalf("Authorize = %v, want %v", err, tc.want)
			}
		})
	}
}

// authorizer reviews tokens and access as the gateway.
func (k *kube) authorizer(t *testing.T, ttl gateway.AuthorizerCache, audiences ...string) *gateway.KubernetesAuthorizer {
	t.Helper()
	cs, err := kubernetes.NewForConfig(k.gatewayConfig)
	if err != nil {
		t.Fatal(err)
	}
	auth, err := gateway.NewKubernetesAuthorizer(cs, audiences, ttl)
	if err != nil {
		t.Fatal(err)
	}
	return auth
}

// A revoked permission keeps working for at most the cache's TTL: the
// answers are kept, so a page's requests do not each cost two reviews,
// and dropped, so a revocation takes effect.
func TestKubernetesAuthorizerKeepsAnswersForItsTTL(t *testing.T) {
	k := startKube(t)
	ctx := t.Context()
	must(t, k.admin.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "team-a"}}))
	must(t, k.admin.Create(ctx, &rbacv1.Role{
		ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "reader"},
		Rules:      []rbacv1.PolicyRule{{APIGroups: []string{agentsv1.GroupVersion.Group}, Resources: []string{"agents/sessions"}, Verbs: []string{"get"}}},
	}))
	binding := &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "reader"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "reader"},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: "team-a", Name: "reader"}},
	}
	must(t, k.admin.Create(ctx, binding))
	token := k.serviceAccountToken(t, "team-a", "reader")
	ref := gateway.AgentRef{Namespace: "team-a", Name: "support"}
	auth := k.authorizer(t, gateway.AuthorizerCache{Allowed: 3 * time.Second, Denied: time.Second})

	must(t, auth.Authorize(ctx, requestWith(token), ref, grants.VerbGet))
	must(t, k.admin.Delete(ctx, binding))
	revoked := time.Now()
	waitUntil(t, "the revoked permission to be refused", func() bool {
		return errors.Is(auth.Authorize(ctx, requestWith(token), ref, grants.VerbGet), gateway.ErrForbidden)
	})
	t.Logf("the revocation took effect after %s", time.Since(revoked).Round(100*time.Millisecond))

	// A permission granted after a refusal works once the refusal ages out.
	binding.ResourceVersion = ""
	must(t, k.admin.Create(ctx, binding))
	waitUntil(t, "the granted permission to be allowed", func() bool {
		return auth.Authorize(ctx, requestWith(token), ref, grants.VerbGet) == nil
	})
}

// When the API server cannot review a caller, the caller may well be
// allowed: the answer is 503 naming the API server, never 401 or 403, and
// never a message about the engine.
func TestKubernetesAuthorizerWithoutTheAPIServerAnswers503(t *testing.T) {
	cs, err := kubernetes.NewForConfig(&rest.Config{Host: "http://127.0.0.1:1"})
	if err != nil {
		t.Fatal(err)
	}
	auth, err := gateway.NewKubernetesAuthorizer(cs, nil, gateway.DefaultAuthorizerCache)
	if err != nil {
		t.Fatal(err)
	}
	handler := gateway.New(gateway.Options{Authorizer: auth}).Handler()
	rec := httptest.NewRecorder()
	req := httptest.NewRequest(http.MethodGet, "/api/v1/namespaces/team-a/agents/support/sessions/s-1/snapshot", nil)
	req.Header.Set("Authorization", "Bearer some-token")
	handler.ServeHTTP(rec, req)
	var body gatewayapi.ErrorBody
	if err := json.Unmarshal(rec.Body.Bytes(), &body); err != nil {
		t.Fatalf("answer %d %q: %v", rec.Code, rec.Body, err)
	}
	if rec.Code != http.StatusServiceUnavailable || body.Reason != "authorization_unavailable" || !strings.Contains(body.Message, "Kubernetes API server") {
		t.Fatalf("answer %d %+v, want 503 authorization_unavailable naming the Kubernetes API server", rec.Code, body)
	}
}
