package charts_test

import (
	"os"
	"path/filepath"
	"slices"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"sigs.k8s.io/yaml"

	"github.com/stepwise-run/stepwise/internal/hub"
)

func TestDefaultRenderIsTheOperatorWithItsGeneratedRoleAndCRDs(t *testing.T) {
	out, err := render(t, "--include-crds")
	if err != nil {
		t.Fatal(err)
	}
	objs := parse(t, out)
	want := []string{
		"ClusterRole/stepwise-manager", "ClusterRoleBinding/stepwise-manager", "ClusterRole/stepwise-metrics-reader",
		"CustomResourceDefinition/agents.agents.stepwise.run", "CustomResourceDefinition/mediastores.agents.stepwise.run",
		"CustomResourceDefinition/toolsources.agents.stepwise.run", "CustomResourceDefinition/clusterengines.agents.stepwise.run",
		"ClusterRole/stepwise-gateway", "ClusterRoleBinding/stepwise-gateway",
		"Deployment/stepwise", "Deployment/stepwise-event-hub", "Deployment/stepwise-gateway",
		"NetworkPolicy/stepwise", "NetworkPolicy/stepwise-event-hub", "NetworkPolicy/stepwise-gateway",
		"Role/stepwise-gateway", "RoleBinding/stepwise-gateway",
		"Role/stepwise-leader-election", "RoleBinding/stepwise-leader-election", "Secret/stepwise-event-hub-publish-keys", "Secret/stepwise-event-hub-read-tokens",
		"Service/stepwise-event-hub", "Service/stepwise-gateway", "Service/stepwise-metrics",
		"ServiceAccount/stepwise", "ServiceAccount/stepwise-gateway",
	}
	slices.Sort(want)
	if got := keysOf(objs); !slices.Equal(got, want) {
		t.Errorf("objects = %v, want %v", got, want)
	}

	generated := readClusterRole(t, filepath.Join("..", "config", "rbac", "role.yaml"))
	role := get[rbacv1.ClusterRole](t, objs, "ClusterRole/stepwise-manager")
	if !equalJSON(t, role.Rules, generated.Rules) {
		t.Errorf("the chart's ClusterRole rules differ from config/rbac/role.yaml's:\n%s", mustYAML(t, role.Rules))
	}
	binding := get[rbacv1.ClusterRoleBinding](t, objs, "ClusterRoleBinding/stepwise-manager")
	wantSubject := rbacv1.Subject{Kind: "ServiceAccount", Name: "stepwise", Namespace: releaseNS}
	if binding.RoleRef.Name != role.Name || !slices.Equal(binding.Subjects, []rbacv1.Subject{wantSubject}) {
		t.Errorf("ClusterRoleBinding binds %s to %v, want %s to %v", binding.RoleRef.Name, binding.Subjects, role.Name, wantSubject)
	}
	leaderBinding := get[rbacv1.RoleBinding](t, objs, "RoleBinding/stepwise-leader-election")
	if !slices.Equal(leaderBinding.Subjects, []rbacv1.Subject{wantSubject}) {
		t.Errorf("leader-election RoleBinding subjects = %v, want %v", leaderBinding.Subjects, wantSubject)
	}

	for _, crd := range []string{"agents", "mediastores", "toolsources"} {
		rendered := get[apiextensionsv1.CustomResourceDefinition](t, objs, "CustomResourceDefinition/"+crd+".agents.stepwise.run")
		generated := readCRD(t, filepath.Join("..", "config", "crd", "bases", "agents.stepwise.run_"+crd+".yaml"))
		if !equalJSON(t, rendered, generated) {
			t.Errorf("the chart's %s CRD differs from config/crd/bases: run `make manifests`", crd)
		}
	}

	deployment := get[appsv1.Deployment](t, objs, "Deployment/stepwise")
	version := appVersion(t)
	if got := *deployment.Spec.Replicas; got != 1 {
		t.Errorf("replicas = %d, want 1", got)
	}
	pod := deployment.Spec.Template.Spec
	if pod.ServiceAccountName != "stepwise" {
		t.Errorf("serviceAccountName = %q, want stepwise", pod.ServiceAccountName)
	}
	manager := pod.Containers[0]
	if want := defaultPrefix + "/operator:" + version; manager.Image != want {
		t.Errorf("image = %q, want %q", manager.Image, want)
	}
	if manager.ImagePullPolicy != corev1.PullIfNotPresent {
		t.Errorf("imagePullPolicy = %q, want IfNotPresent", manager.ImagePullPolicy)
	}
	wantArgs := []string{
		"--leader-elect", "--health-probe-bind-address=:8081", "--metrics-bind-address=:8080", "--metrics-secure=true",
		"--poller-quiet-period=75s", "--versioned-rollouts=true",
		// With no engine.address the chart makes no ClusterEngine; the
		// administrator's own ClusterEngine "default" is the default.
		"--operator-namespace=stepwise-system", "--default-engine=default", "--allow-namespace-engines=false",
		"--worker-image=" + defaultPrefix + "/agent-worker:" + version, "--worker-network-policies",
		"--gateway-grants-configmap=stepwise-gateway-grants",
		"--event-hub-url=http://stepwise-event-hub.stepwise-system.svc:8090", "--event-hub-publish-keys-file=/etc/stepwise/event-hub-publish-keys/keys",
		"--zap-log-level=info", "--zap-encoder=json",
	}
	if !slices.Equal(manager.Args, wantArgs) {
		t.Errorf("args = %q, want %q", manager.Args, wantArgs)
	}
	expectRestricted(t, pod)
	if got := manager.Resources.Requests.Memory().String(); got != "64Mi" {
		t.Errorf("memory request = %s, want 64Mi", got)
	}

	service := get[corev1.Service](t, objs, "Service/stepwise-metrics")
	if len(service.Spec.Ports) != 1 || service.Spec.Ports[0].Port != 8080 || service.Spec.Ports[0].TargetPort.StrVal != "metrics" {
		t.Errorf("metrics Service ports = %+v, want 8080 to the container's metrics port", service.Spec.Ports)
	}
	for key, value := range service.Spec.Selector {
		if deployment.Spec.Template.Labels[key] != value {
			t.Errorf("the metrics Service selects %s=%s, which the operator pod lacks", key, value)
		}
	}
}

// The default release runs the gateway with its generated role, and the
// event hub; the operator, the gateway and the hub share one key Secret.
func TestDefaultRenderRunsTheGatewayAndTheEventHub(t *testing.T) {
	out, err := render(t)
	if err != nil {
		t.Fatal(err)
	}
	objs := parse(t, out)
	version := appVersion(t)

	generated := readClusterRole(t, filepath.Join("..", "config", "rbac", "gateway", "role.yaml"))
	role := get[rbacv1.ClusterRole](t, objs, "ClusterRole/stepwise-gateway")
	if !equalJSON(t, role.Rules, generated.Rules) {
		t.Errorf("the gateway's ClusterRole rules differ from config/rbac/gateway/role.yaml's:\n%s", mustYAML(t, role.Rules))
	}
	binding := get[rbacv1.ClusterRoleBinding](t, objs, "ClusterRoleBinding/stepwise-gateway")
	wantSubject := rbacv1.Subject{Kind: "ServiceAccount", Name: "stepwise-gateway", Namespace: releaseNS}
	if binding.RoleRef.Name != role.Name || !slices.Equal(binding.Subjects, []rbacv1.Subject{wantSubject}) {
		t.Errorf("the gateway's ClusterRoleBinding binds %s to %v, want %s to %v", binding.RoleRef.Name, binding.Subjects, role.Name, wantSubject)
	}
	// The gateway reads no Secret cluster-wide, and in the operator's
	// namespace gets the ClusterEngines' credentials one by name and
	// watches the grants the operator publishes.
	for _, rule := range role.Rules {
		if slices.Contains(rule.Resources, "secrets") {
			t.Errorf("the gateway's ClusterRole reads Secrets: %+v", rule)
		}
	}
	local := get[rbacv1.Role](t, objs, "Role/stepwise-gateway")
	wantLocal := []rbacv1.PolicyRule{
		{APIGroups: []string{""}, Resources: []string{"secrets"}, Verbs: []string{"get"}},
		{APIGroups: []string{""}, Resources: []string{"configmaps"}, Verbs: []string{"get", "list", "watch"}},
	}
	if !equalJSON(t, local.Rules, wantLocal) || local.Namespace != releaseNS {
		t.Errorf("the gateway's Role in %s = %s", local.Namespace, mustYAML(t, local.Rules))
	}
	if lb := get[rbacv1.RoleBinding](t, objs, "RoleBinding/stepwise-gateway"); lb.RoleRef.Name != local.Name || !slices.Equal(lb.Subjects, []rbacv1.Subject{wantSubject}) {
		t.Errorf("the gateway's RoleBinding binds %s to %v", lb.RoleRef.Name, lb.Subjects)
	}
	withEngines, err := render(t, "--set", "tenancy.namespaceEngines=true")
	if err != nil {
		t.Fatal(err)
	}
	extra := get[rbacv1.ClusterRole](t, parse(t, withEngines), "ClusterRole/stepwise-gateway").Rules
	if last := extra[len(extra)-1]; !slices.Equal(last.Resources, []string{"secrets"}) || !slices.Equal(last.Verbs, []string{"get"}) {
		t.Errorf("with namespace engines, the gateway cannot get their credentials: %+v", last)
	}

	gateway := get[appsv1.Deployment](t, objs, "Deployment/stepwise-gateway")
	pod := gateway.Spec.Template.Spec
	if *gateway.Spec.Replicas != 2 || pod.ServiceAccountName != "stepwise-gateway" {
		t.Errorf("gateway replicas %d, serviceAccountName %q; want 2 and stepwise-gateway", *gateway.Spec.Replicas, pod.ServiceAccountName)
	}
	container := pod.Containers[0]
	if want := defaultPrefix + "/gateway:" + version; container.Image != want {
		t.Errorf("gateway image = %q, want %q", container.Image, want)
	}
	wantArgs := []string{"--listen=:8080", "--hub-url=http://stepwise-event-hub.stepwise-system.svc:8090", "--hub-read-tokens-file=/etc/stepwise/event-hub-read-tokens/tokens",
		// A token made for the gateway is one the API server refuses.
		"--token-audiences=stepwise-gateway", "--gateway-grants-configmap=stepwise-gateway-grants",
		"--operator-namespace=stepwise-system", "--default-engine=default", "--allow-namespace-engines=false"}
	if !slices.Equal(container.Args, wantArgs) {
		t.Errorf("gateway args = %q, want %q", container.Args, wantArgs)
	}
	expectRestricted(t, pod)
	expectSelects(t, get[corev1.Service](t, objs, "Service/stepwise-gateway"), gateway, 80, "http")

	hubDeploy := get[appsv1.Deployment](t, objs, "Deployment/stepwise-event-hub")
	hubPod := hubDeploy.Spec.Template.Spec
	if *hubDeploy.Spec.Replicas != 1 || hubDeploy.Spec.Strategy.Type != appsv1.RecreateDeploymentStrategyType {
		t.Errorf("the event hub runs %d replicas with strategy %q; one hub holds the events, so want 1 and Recreate",
			*hubDeploy.Spec.Replicas, hubDeploy.Spec.Strategy.Type)
	}
	if hubPod.AutomountServiceAccountToken == nil || *hubPod.AutomountServiceAccountToken {
		t.Error("the event hub pod mounts an API token it never uses")
	}
	hubArgs := []string{"--listen=", "--hub-listen=:8090", "--hub-publish-keys-file=/etc/stepwise/event-hub-publish-keys/keys",
		"--hub-read-tokens-file=/etc/stepwise/event-hub-read-tokens/tokens"}
	if got := hubPod.Containers[0].Args; !slices.Equal(got, hubArgs) || hubPod.Containers[0].Image != container.Image {
		t.Errorf("event hub container = %s %q, want the gateway image with %q", hubPod.Containers[0].Image, got, hubArgs)
	}
	expectRestricted(t, hubPod)
	expectSelects(t, get[corev1.Service](t, objs, "Service/stepwise-event-hub"), hubDeploy, 8090, "hub")

	keys := get[corev1.Secret](t, objs, "Secret/stepwise-event-hub-publish-keys")
	if _, err := hub.ParsePublishKeys(keys.Data["keys"]); err != nil {
		t.Errorf("the generated publish keys: %v", err)
	}
	tokens := get[corev1.Secret](t, objs, "Secret/stepwise-event-hub-read-tokens")
	if _, err := hub.ParseReadTokens(tokens.Data["tokens"]); err != nil {
		t.Errorf("the generated read tokens: %v", err)
	}
	// Each pod mounts only the credential it needs: the gateway, the most
	// exposed, cannot sign a publish token.
	operator := get[appsv1.Deployment](t, objs, "Deployment/stepwise")
	expectCredentials(t, operator, "stepwise-event-hub-publish-keys")
	expectCredentials(t, gateway, "stepwise-event-hub-read-tokens")
	expectCredentials(t, hubDeploy, "stepwise-event-hub-publish-keys", "stepwise-event-hub-read-tokens")
}

func readClusterRole(t *testing.T, path string) *rbacv1.ClusterRole {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var role rbacv1.ClusterRole
	if err := yaml.UnmarshalStrict(data, &role); err != nil {
		t.Fatal(err)
	}
	if len(role.Rules) == 0 {
		t.Fatalf("%s holds no rules", path)
	}
	return &role
}

func readCRD(t *testing.T, path string) *apiextensionsv1.CustomResourceDefinition {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var crd apiextensionsv1.CustomResourceDefinition
	if err := yaml.UnmarshalStrict(data, &crd); err != nil {
		t.Fatal(err)
	}
	return &crd
}
