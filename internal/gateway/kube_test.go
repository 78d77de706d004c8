package gateway_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr"

	appsv1 "k8s.io/api/apps/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	"sigs.k8s.io/yaml"

	apischeme "github.com/stepwise-run/stepwise/api/scheme"
	agentsv1 "github.com/stepwise-run/stepwise/api/v1alpha1"
	"github.com/stepwise-run/stepwise/internal/engineadmin"
	"github.com/stepwise-run/stepwise/internal/enginetest"
	"github.com/stepwise-run/stepwise/internal/flowclaim"
	"github.com/stepwise-run/stepwise/internal/gateway"
	"github.com/stepwise-run/stepwise/internal/gatewayapi"
	"github.com/stepwise-run/stepwise/internal/render"
	"github.com/stepwise-run/stepwise/internal/tenancy"
	"github.com/stepwise-run/stepwise/internal/testtools"
	sessions "github.com/stepwise-run/stepwise/pkg/client"
)

// kube runs an API server with the CRDs, an admin client, and a client of
// the gateway's own identity bound to its generated role alone, so the tests
// also show the role is enough.
type kube struct {
	admin   client.Client
	gateway client.Client
	// gatewayConfig is the gateway's identity, for its reviews.
	gatewayConfig *rest.Config
	// informers are the gateway's cache.
	informers cache.Cache
}

func startKube(t *testing.T) *kube {
	t.Helper()
	testtools.APIServer.Path(t)
	env := &envtest.Environment{CRDDirectoryPaths: []string{filepath.Join("..", "..", "config", "crd", "bases")}, ErrorIfCRDPathMissing: true}
	cfg, err := env.Start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Stop() })
	scheme, err := apischeme.New()
	if err != nil {
		t.Fatal(err)
	}
	admin, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	raw, err := os.ReadFile(filepath.Join("..", "..", "config", "rbac", "gateway", "role.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	role := &rbacv1.ClusterRole{}
	if err := yaml.Unmarshal(raw, role); err != nil {
		t.Fatal(err)
	}
	must(t, admin.Create(ctx, role))
	must(t, admin.Create(ctx, &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "stepwise-gateway"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role.Name},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: "stepwise-gateway"}},
	}))
	// The chart's Role in the operator's namespace, the gateway's only
	// read of Secrets.
	must(t, admin.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: operatorNamespace}}))
	must(t, admin.Create(ctx, &rbacv1.Role{
		ObjectMeta: metav1.ObjectMeta{Namespace: operatorNamespace, Name: "stepwise-gateway"},
		Rules: []rbacv1.PolicyRule{
			{APIGroups: []string{""}, Resources: []string{"configmaps"}, Verbs: []string{"get", "list", "watch"}},
			{APIGroups: []string{""}, Resources: []string{"secrets"}, Verbs: []string{"get"}},
		},
	}))
	must(t, admin.Create(ctx, &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Namespace: operatorNamespace, Name: "stepwise-gateway"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "stepwise-gateway"},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: "stepwise-gateway"}},
	}))
	user, err := env.AddUser(envtest.User{Name: "stepwise-gateway"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	gw, informers, err := gateway.NewKubernetesClient(ctx, user.Config(), scheme, grantsSource)
	if err != nil {
		t.Fatal(err)
	}
	return &kube{admin: admin, gateway: gw, gatewayConfig: user.Config(), informers: informers}
}

// operatorNamespace is where the operator runs in these tests, and
// grantsSource the ConfigMap it publishes the application tokens' grants in.
const operatorNamespace = "stepwise-system"

var grantsSource = gateway.GrantsSource{Namespace: operatorNamespace, Name: "stepwise-gateway-grants"}

// publishGrants does what the operator does when a labeled Secret changes:
// publish every labeled Secret's grants, by the token's digest.
func (k *kube) publishGrants(t *testing.T) {
	t.Helper()
	var list corev1.SecretList
	must(t, k.admin.List(t.Context(), &list, client.MatchingLabelsSelector{Selector: gateway.ApplicationTokenSelector()}))
	doc, err := json.Marshal(gateway.PublishGrants(list.Items))
	if err != nil {
		t.Fatal(err)
	}
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: grantsSource.Namespace, Name: grantsSource.Name}}
	_, err = controllerutil.CreateOrUpdate(t.Context(), k.admin, cm, func() error {
		cm.Data = map[string]string{gateway.PublishedGrantsKey: string(doc)}
		return nil
	})
	must(t, err)
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// serviceAccountToken makes a ServiceAccount and returns a token of it for
// the audiences.
func (k *kube) serviceAccountToken(t *testing.T, namespace, name string, audiences ...string) string {
	t.Helper()
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name}}
	must(t, k.admin.Create(t.Context(), sa))
	req := &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{Audiences: audiences}}
	must(t, k.admin.SubResource("token").Create(t.Context(), sa, req))
	return req.Status.Token
}

func requestWith(token string) *http.Request {
	r, _ := http.NewRequest(http.MethodGet, "/", nil)
	if token != "" {
		r.Header.Set("Authorization", "Bearer "+token)
	}
	return r
}

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
		verb  gateway.Verb
		want  error
	}{
		{"the granted verb", approver, supportRef, gateway.VerbApprove, nil},
		{"reading", approver, supportRef, gateway.VerbGet, nil},
		{"a verb the Role leaves out", approver, supportRef, gateway.VerbSend, gateway.ErrForbidden},
		{"another Agent of the namespace", approver, gateway.AgentRef{Namespace: "team-a", Name: "billing"}, gateway.VerbGet, gateway.ErrForbidden},
		{"the same Agent name in another namespace", approver, gateway.AgentRef{Namespace: "team-b", Name: "support"}, gateway.VerbGet, gateway.ErrForbidden},
		{"a token for another audience", otherAudience, supportRef, gateway.VerbGet, gateway.ErrUnauthenticated},
		{"a token the API server never issued", "not-a-token", supportRef, gateway.VerbGet, gateway.ErrUnauthenticated},
		{"no token", "", supportRef, gateway.VerbGet, gateway.ErrUnauthenticated},
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

	must(t, auth.Authorize(ctx, requestWith(token), ref, gateway.VerbGet))
	must(t, k.admin.Delete(ctx, binding))
	revoked := time.Now()
	waitUntil(t, "the revoked permission to be refused", func() bool {
		return errors.Is(auth.Authorize(ctx, requestWith(token), ref, gateway.VerbGet), gateway.ErrForbidden)
	})
	t.Logf("the revocation took effect after %s", time.Since(revoked).Round(100*time.Millisecond))

	// A permission granted after a refusal works once the refusal ages out.
	binding.ResourceVersion = ""
	must(t, k.admin.Create(ctx, binding))
	waitUntil(t, "the granted permission to be allowed", func() bool {
		return auth.Authorize(ctx, requestWith(token), ref, gateway.VerbGet) == nil
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
	labeled := map[string]string{gateway.LabelApplicationToken: "true"}
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
	authorize := func(tok string, ref gateway.AgentRef, verb gateway.Verb) error {
		return auth.Authorize(ctx, requestWith(tok), ref, verb)
	}
	waitUntil(t, "the token to be known", func() bool { return authorize(token, support, gateway.VerbSend) == nil })
	for _, tc := range []struct {
		name  string
		token string
		ref   gateway.AgentRef
		verb  gateway.Verb
		want  error
	}{
		{"a verb it does not grant", token, support, gateway.VerbApprove, gateway.ErrForbidden},
		{"an Agent it does not name", token, gateway.AgentRef{Namespace: "team-a", Name: "billing"}, gateway.VerbGet, gateway.ErrForbidden},
		{"another namespace", token, gateway.AgentRef{Namespace: "team-b", Name: "support"}, gateway.VerbGet, gateway.ErrForbidden},
		{"an unlabeled Secret's token", unlabeled, support, gateway.VerbGet, gateway.ErrUnauthenticated},
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
		return errors.Is(authorize(token, support, gateway.VerbGet), gateway.ErrUnauthenticated)
	})
	must(t, k.admin.Delete(ctx, copied))
	k.publishGrants(t)
	waitUntil(t, "the token to work again", func() bool { return authorize(token, support, gateway.VerbGet) == nil })

	// Taking a verb away, then deleting the Secret, takes effect.
	secret.StringData = map[string]string{"verbs": "get"}
	must(t, k.admin.Update(ctx, secret))
	k.publishGrants(t)
	waitUntil(t, "the verb taken away to be refused", func() bool {
		return errors.Is(authorize(token, support, gateway.VerbSend), gateway.ErrForbidden)
	})
	must(t, k.admin.Delete(ctx, secret))
	k.publishGrants(t)
	waitUntil(t, "the deleted token to be unknown", func() bool {
		return errors.Is(authorize(token, support, gateway.VerbGet), gateway.ErrUnauthenticated)
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

func TestKubernetesAgentsServeOnlyTheAgentThatHoldsItsNames(t *testing.T) {
	k := startKube(t)
	server := enginetest.StartDevServer(t)
	ctx := t.Context()
	for _, ns := range []string{"team-a", "team-b", "team-c"} {
		labels := map[string]string{"tenant": "yes"}
		if ns == "team-c" {
			labels = nil
		}
		must(t, k.admin.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns, Labels: labels}}))
	}
	engines := engineadmin.New(logr.Discard())
	t.Cleanup(engines.Close)
	// The engine's own identity, as the operator records it.
	id, err := engines.Identity(ctx, engineadmin.Connection{Address: server.FrontendHostPort(), Namespace: "default"})
	if err != nil {
		t.Fatal(err)
	}
	ce := &agentsv1.ClusterEngine{ObjectMeta: metav1.ObjectMeta{Name: "dev"}, Spec: agentsv1.ClusterEngineSpec{
		Address: server.FrontendHostPort(), Namespace: "default",
		NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"tenant": "yes"}}}}
	must(t, k.admin.Create(ctx, ce))
	ce.Status = agentsv1.ClusterEngineStatus{ObservedGeneration: ce.Generation, NamespaceID: id.NamespaceID,
		Conditions: []metav1.Condition{{Type: agentsv1.ConditionReady, Status: metav1.ConditionTrue, Reason: agentsv1.ReasonReconciled,
			LastTransitionTime: metav1.Now()}}}
	must(t, k.admin.Status().Update(ctx, ce))

	// Agents as the operator applied them: status names their engine and
	// task queue, and a worker Deployment each controls carries its claim.
	isController := true
	newAgent := func(ns, name string, workers bool) *agentsv1.Agent {
		a := &agentsv1.Agent{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
			Spec: agentsv1.AgentSpec{FlowType: "SupportAgent", Model: agentsv1.ModelSpec{Provider: agentsv1.ModelProviderScripted, Name: "demo"}}}
		must(t, k.admin.Create(ctx, a))
		a.Status.EngineID, a.Status.TaskQueue = id.NamespaceID, tenancy.Tenant(ns, "SupportAgent").TaskQueue()
		must(t, k.admin.Status().Update(ctx, a))
		if workers {
			claim := flowclaim.Claim{EngineID: id.NamespaceID, Names: tenancy.Tenant(ns, "SupportAgent")}.Label()
			labels := map[string]string{"app": name, flowclaim.LabelFlowClaim: claim}
			must(t, k.admin.Create(ctx, &appsv1.Deployment{
				ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name + "-worker", Labels: labels,
					OwnerReferences: []metav1.OwnerReference{{APIVersion: agentsv1.GroupVersion.String(), Kind: "Agent",
						Name: a.Name, UID: a.UID, Controller: &isController}}},
				Spec: appsv1.DeploymentSpec{Selector: &metav1.LabelSelector{MatchLabels: labels},
					Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels},
						Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "worker", Image: "worker"}}}}},
			}))
		}
		return a
	}
	agents := &gateway.KubernetesAgents{Reader: k.gateway, Defaults: render.Defaults{DefaultEngine: "dev"},
		OperatorNamespace: "stepwise-system", Engines: engines}
	target := func(ns, name string) (gateway.Target, error) {
		tg, release, err := agents.Target(ctx, gateway.AgentRef{Namespace: ns, Name: name})
		if err == nil {
			release()
		}
		return tg, err
	}

	if _, err := target("team-a", "missing"); !errors.Is(err, gateway.ErrAgentNotFound) {
		t.Fatalf("an Agent that does not exist: %v, want ErrAgentNotFound", err)
	}
	// team-b's Agent is older than team-a's, with a Deployment that forges
	// team-a's claim: it takes nothing from team-a.
	teamB := newAgent("team-b", "support", false)
	forged := map[string]string{"app": "forged", flowclaim.LabelFlowClaim: flowclaim.Claim{EngineID: id.NamespaceID, Names: tenancy.Tenant("team-a", "SupportAgent")}.Label()}
	must(t, k.admin.Create(ctx, &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Namespace: "team-b", Name: "forged", Labels: forged,
			OwnerReferences: []metav1.OwnerReference{{APIVersion: agentsv1.GroupVersion.String(), Kind: "Agent",
				Name: teamB.Name, UID: teamB.UID, Controller: &isController}}},
		Spec: appsv1.DeploymentSpec{Selector: &metav1.LabelSelector{MatchLabels: forged}, Replicas: new(int32(0)),
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: forged},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "worker", Image: "worker"}}}}},
	}))
	support := newAgent("team-a", "support", true)
	newAgent("team-a", "copycat", false)
	waitUntil(t, "the gateway's cache sees the worker Deployments", func() bool {
		_, err := target("team-a", "support")
		return err == nil
	})
	tg, err := target("team-a", "support")
	want := sessionsAgent(support)
	if err != nil || tg.Agent != want {
		t.Fatalf("the holder: %+v, %v; want %+v", tg.Agent, err, want)
	}
	if _, err := target("team-a", "copycat"); err == nil || !strings.Contains(err.Error(), "another Agent holds") {
		t.Fatalf("an Agent naming a Flow type another Agent of its namespace holds: %v", err)
	}
	// team-b's Agent of the same Flow type holds nothing of its own yet,
	// and is never given team-a's.
	if _, err := target("team-b", "support"); err == nil || !strings.Contains(err.Error(), "runs no workers yet") {
		t.Fatalf("team-b's Agent: %v, want not served", err)
	}
	// An Agent whose workers, of engine 0.7.0, keep the shared names holds
	// their claim, and is served on them.
	legacy := &agentsv1.Agent{ObjectMeta: metav1.ObjectMeta{Namespace: "team-b", Name: "legacy"},
		Spec: agentsv1.AgentSpec{FlowType: "LegacyAgent", Model: agentsv1.ModelSpec{Provider: agentsv1.ModelProviderScripted, Name: "demo"}}}
	must(t, k.admin.Create(ctx, legacy))
	shared := tenancy.Shared("LegacyAgent")
	legacy.Status.EngineID, legacy.Status.TaskQueue = id.NamespaceID, shared.TaskQueue()
	must(t, k.admin.Status().Update(ctx, legacy))
	legacyLabels := map[string]string{"app": "legacy", flowclaim.LabelFlowClaim: flowclaim.Claim{EngineID: id.NamespaceID, Names: shared}.Label()}
	must(t, k.admin.Create(ctx, &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Namespace: "team-b", Name: "legacy-worker", Labels: legacyLabels,
			OwnerReferences: []metav1.OwnerReference{{APIVersion: agentsv1.GroupVersion.String(), Kind: "Agent",
				Name: legacy.Name, UID: legacy.UID, Controller: &isController}}},
		Spec: appsv1.DeploymentSpec{Selector: &metav1.LabelSelector{MatchLabels: legacyLabels},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: legacyLabels},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "worker", Image: "worker"}}}}},
	}))
	waitUntil(t, "the gateway's cache sees the shared names' workers", func() bool {
		tg, err := target("team-b", "legacy")
		return err == nil && tg.Agent.TaskQueue == shared.TaskQueue()
	})

	// A namespace the ClusterEngine does not select is not served.
	newAgent("team-c", "support", true)
	if _, err := target("team-c", "support"); err == nil || !strings.Contains(err.Error(), `does not let namespace "team-c" use it`) {
		t.Fatalf("an Agent of a namespace the ClusterEngine leaves out: %v", err)
	}
	// An engine of the namespace's own, where the gateway allows none.
	own := newAgent("team-a", "own", false)
	own.Spec.Engine = &agentsv1.EngineSpec{Address: server.FrontendHostPort(), Namespace: "default"}
	must(t, k.admin.Update(ctx, own))
	waitUntil(t, "the gateway's cache sees the Agent's engine", func() bool {
		_, err := target("team-a", "own")
		return err != nil && strings.Contains(err.Error(), "--allow-namespace-engines")
	})
}

// sessionsAgent is an Agent as the gateway addresses its sessions.
func sessionsAgent(a *agentsv1.Agent) sessions.Agent {
	return sessions.Agent{Namespace: a.Namespace, Name: a.Name, UID: string(a.UID), FlowType: a.Spec.FlowType,
		TaskQueue: tenancy.Tenant(a.Namespace, a.Spec.FlowType).TaskQueue()}
}

func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("waiting for %s: timed out", what)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func TestKubernetesAgentsServeOnlyTheGraphTheAgentOwns(t *testing.T) {
	k := startKube(t)
	ctx := t.Context()
	must(t, k.admin.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "team-a"}}))
	support := &agentsv1.Agent{ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "support"},
		Spec: agentsv1.AgentSpec{FlowType: "SupportAgent", Model: agentsv1.ModelSpec{Provider: agentsv1.ModelProviderScripted, Name: "demo"}}}
	must(t, k.admin.Create(ctx, support))
	agents := &gateway.KubernetesAgents{Reader: k.gateway}
	ref := gateway.AgentRef{Namespace: "team-a", Name: "support"}
	waitUntil(t, "the gateway's cache sees the Agent", func() bool {
		_, err := agents.Graph(ctx, ref)
		return !errors.Is(err, gateway.ErrAgentNotFound)
	})
	if _, err := agents.Graph(ctx, ref); !errors.Is(err, gateway.ErrGraphNotPublished) {
		t.Fatalf("an Agent with no graph: %v, want ErrGraphNotPublished", err)
	}
	// A ConfigMap of the graph's name that someone else wrote is not the
	// operator's graph.
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: render.GraphConfigMapName("support")},
		Data: map[string]string{render.GraphFileName: `{"flowType":"forged"}`}}
	must(t, k.admin.Create(ctx, cm))
	if _, err := agents.Graph(ctx, ref); !errors.Is(err, gateway.ErrGraphNotPublished) {
		t.Fatalf("a graph ConfigMap the Agent does not own: %v, want ErrGraphNotPublished", err)
	}
	isController := true
	cm.OwnerReferences = []metav1.OwnerReference{{APIVersion: agentsv1.GroupVersion.String(), Kind: "Agent",
		Name: support.Name, UID: support.UID, Controller: &isController}}
	cm.Data[render.GraphFileName] = `{"flowType":"SupportAgent"}`
	must(t, k.admin.Update(ctx, cm))
	doc, err := agents.Graph(ctx, ref)
	if err != nil || string(doc) != `{"flowType":"SupportAgent"}` {
		t.Fatalf("the published graph = %s, %v", doc, err)
	}
	if _, err := agents.Graph(ctx, gateway.AgentRef{Namespace: "team-a", Name: "missing"}); !errors.Is(err, gateway.ErrAgentNotFound) {
		t.Fatalf("an Agent that does not exist: %v, want ErrAgentNotFound", err)
	}
}

// Random bearer tokens cost the API server a TokenReview each only within
// the gateway's limits, per client and in all; a token once accepted passes
// freely, whoever floods.
func TestUnknownTokensAreReviewedWithinLimits(t *testing.T) {
	k := startKube(t)
	ctx := t.Context()
	must(t, k.admin.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "team-a"}}))
	valid := k.serviceAccountToken(t, "team-a", "reader")
	var reviews atomic.Int64
	cfg := rest.CopyConfig(k.gatewayConfig)
	cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper {
		return roundTripFunc(func(r *http.Request) (*http.Response, error) {
			if strings.HasSuffix(r.URL.Path, "/tokenreviews") {
				reviews.Add(1)
			}
			return rt.RoundTrip(r)
		})
	})
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	auth, err := gateway.NewKubernetesAuthorizerWithLimits(cs, nil, gateway.DefaultAuthorizerCache,
		gateway.ReviewLimits{PerClient: 0.1, PerClientBurst: 5, Total: 1, TotalBurst: 8})
	if err != nil {
		t.Fatal(err)
	}
	from := func(client, token string) *http.Request {
		r := requestWith(token)
		r.RemoteAddr = client + ":41000"
		return r
	}
	must(t, auth.Authenticate(ctx, from("10.0.0.9", valid)))
	limited := 0
	for i := range 100 {
		err := auth.Authenticate(ctx, from("10.0.0.1", fmt.Sprintf("random-token-%d", i)))
		switch {
		case err != nil && strings.Contains(err.Error(), "unknown bearer tokens"):
			limited++
		case !errors.Is(err, gateway.ErrUnauthenticated):
			t.Fatalf("a random token: %v", err)
		}
	}
	if limited < 90 {
		t.Errorf("%d of 100 random tokens from one client were refused unreviewed, want all past the burst of 5", limited)
	}
	if n := reviews.Load(); n > 8 {
		t.Errorf("100 random tokens cost %d TokenReviews; the limit allows 8", n)
	}
	// Another client is reviewed from its own allowance, and the token
	// accepted before passes for everyone, even the flooding client.
	if err := auth.Authenticate(ctx, from("10.0.0.2", "another-random-token")); !errors.Is(err, gateway.ErrUnauthenticated) {
		t.Errorf("another client's first unknown token: %v, want it reviewed and refused", err)
	}
	must(t, auth.Authenticate(ctx, from("10.0.0.1", valid)))
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }
