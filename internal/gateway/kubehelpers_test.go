package gateway_test

import (
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"testing"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	"sigs.k8s.io/yaml"

	apischeme "github.com/stepwise-run/stepwise/api/scheme"
	"github.com/stepwise-run/stepwise/internal/gateway"
	"github.com/stepwise-run/stepwise/internal/grants"
	"github.com/stepwise-run/stepwise/internal/testtools"
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
	must(t, k.admin.List(t.Context(), &list, client.MatchingLabelsSelector{Selector: grants.Selector()}))
	doc, err := json.Marshal(grants.Publish(list.Items))
	if err != nil {
		t.Fatal(err)
	}
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: grantsSource.Namespace, Name: grantsSource.Name}}
	_, err = controllerutil.CreateOrUpdate(t.Context(), k.admin, cm, func() error {
		cm.Data = map[string]string{grants.PublishedKey: string(doc)}
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
