// Package charts_test checks the operator's Helm chart with the pinned Helm:
// that its schema refuses bad values naming the field, and that what it
// renders is the operator the project builds (its generated RBAC role and
// CRDs, its flags, a restricted security context).
package charts_test

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"

	agentsv1 "github.com/stepwise-run/stepwise/api/v1alpha1"
	"github.com/stepwise-run/stepwise/internal/hub"
	"github.com/stepwise-run/stepwise/internal/media"
	workers "github.com/stepwise-run/stepwise/internal/render"
	"github.com/stepwise-run/stepwise/internal/testtools"
)

const (
	chartDir      = "stepwise"
	allValues     = "stepwise/ci/all-values.yaml"
	releaseName   = "stepwise"
	releaseNS     = "stepwise-system"
	defaultPrefix = "ghcr.io/stepwise-run"
)

// helm returns the pinned Helm binary.
func helm(t *testing.T) string {
	t.Helper()
	return testtools.Helm.Path(t)
}

// render runs helm template for the release stepwise in stepwise-system
// with these extra arguments, returning the manifests or Helm's error.
func render(t *testing.T, args ...string) (string, error) {
	t.Helper()
	cmd := exec.Command(helm(t), append([]string{"template", releaseName, chartDir, "--namespace", releaseNS}, args...)...)
	cmd.Env = append(os.Environ(), "HELM_CONFIG_HOME="+t.TempDir(), "HELM_CACHE_HOME="+t.TempDir(), "HELM_DATA_HOME="+t.TempDir())
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return "", errors.New(stderr.String())
	}
	return stdout.String(), nil
}

// valuesFile writes a values file for one render.
func valuesFile(t *testing.T, values string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "values.yaml")
	if err := os.WriteFile(path, []byte(values), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestBadValuesAreRefusedNamingTheField(t *testing.T) {
	for _, tc := range []struct {
		name, values string
		// wantErr are parts of Helm's message: the field's path and why.
		wantErr []string
	}{
		{"no replicas", "replicas: 0", []string{"'/replicas'", "minimum"}},
		{"fractional replicas", "replicas: 1.5", []string{"'/replicas'", "integer"}},
		{"unknown key", "replica: 2", []string{"additional properties 'replica' not allowed"}},
		{"unknown nested key", "engine: {host: 'temporal:7233'}", []string{"'/engine'", "additional properties 'host' not allowed"}},
		{"engine address without port", "engine: {address: temporal.example.com}", []string{"'/engine/address'", "does not match pattern"}},
		{"engine address with empty port", "engine: {address: 'temporal:'}", []string{"'/engine/address'"}},
		{"engine address port out of range", "engine: {address: 'temporal:70000'}", []string{"'/engine/address'"}},
		{"engine address with scheme", "engine: {address: 'http://temporal:7233'}", []string{"'/engine/address'"}},
		{"engine address IPv6 unbracketed", "engine: {address: '::1:7233'}", []string{"'/engine/address'"}},
		{"empty engine namespace", "engine: {address: 'temporal:7233', namespace: ''}", []string{"'/engine/namespace'"}},
		{"API key without key", "engine: {address: 'temporal:7233', tls: {enabled: true}, apiKeySecret: creds}", []string{"'/engine/apiKeySecret'"}},
		{"API key without TLS", "engine: {address: 'temporal:7233', apiKeySecret: creds/key}", []string{"'/engine/tls/enabled'", "true"}},
		{"TLS secret without TLS", "engine: {address: 'temporal:7233', tls: {secret: ca}}", []string{"'/engine/tls/enabled'", "true"}},
		{"TLS without an engine", "engine: {tls: {enabled: true}}", []string{"'/engine/tls/enabled'", "false"}},
		{"TLS secret not a name", "engine: {address: 'temporal:7233', tls: {enabled: true, secret: Bad_Name}}", []string{"'/engine/tls/secret'"}},
		{"pull policy", "image: {pullPolicy: Sometimes}", []string{"'/image/pullPolicy'", "IfNotPresent"}},
		{"image tag", "image: {tag: 'v1 beta'}", []string{"'/image/tag'"}},
		{"image registry with scheme", "image: {registry: 'https://ghcr.io/stepwise-run'}", []string{"'/image/registry'"}},
		{"image registry with trailing slash", "image: {registry: 'ghcr.io/stepwise-run/'}", []string{"'/image/registry'"}},
		{"worker image", "workerImage: 'Agent Worker:latest'", []string{"'/workerImage'"}},
		{"pull secret as a string", "imagePullSecrets: [registry]", []string{"'/imagePullSecrets/0'", "object"}},
		{"negative CPU", "resources: {requests: {cpu: '-1'}}", []string{"'/resources/requests/cpu'"}},
		{"negative memory number", "resources: {limits: {memory: -5}}", []string{"'/resources/limits/memory'"}},
		{"memory with a bad unit", "resources: {limits: {memory: 256MB}}", []string{"'/resources/limits/memory'"}},
		{"resource claims", "resources: {claims: [{name: gpu}]}", []string{"'/resources'", "additional properties 'claims' not allowed"}},
		{"relative host path root", "mediaHostPathRoots: [srv/media]", []string{"'/mediaHostPathRoots/0'"}},
		{"host path root with ..", "mediaHostPathRoots: [/srv/../etc]", []string{"'/mediaHostPathRoots/0'"}},
		{"host path root with a trailing slash", "mediaHostPathRoots: [/srv/media/]", []string{"'/mediaHostPathRoots/0'"}},
		{"host path root with a comma", "mediaHostPathRoots: ['/srv/a,/srv/b']", []string{"'/mediaHostPathRoots/0'"}},
		{"log level", "log: {level: verbose}", []string{"'/log/level'"}},
		{"log level zero", "log: {level: 0}", []string{"'/log/level'"}},
		{"log encoder", "log: {encoder: text}", []string{"'/log/encoder'"}},
		{"poller quiet period not a duration", "rollout: {pollerQuietPeriod: soon}", []string{"'/rollout/pollerQuietPeriod'"}},
		{"unknown rollout key", "rollout: {strategy: recreate}", []string{"strategy"}},
		{"metrics port as a string", "metrics: {port: '8080'}", []string{"'/metrics/port'", "integer"}},
		{"metrics port out of range", "metrics: {port: 65536}", []string{"'/metrics/port'", "maximum"}},
		{"one port for metrics and probes", "metrics: {port: 8081}", []string{"metrics.port and healthProbePort are both 8081"}},
		{"probe port zero", "healthProbePort: 0", []string{"'/healthProbePort'"}},
		{"node selector value not a string", "nodeSelector: {example.com/pool: 1}", []string{"'/nodeSelector/example.com~1pool'", "string"}},
		{"pod label too long", "podLabels: {team: " + strings.Repeat("a", 64) + "}", []string{"'/podLabels/team'"}},
		{"toleration operator", "tolerations: [{key: dedicated, operator: Maybe}]", []string{"'/tolerations/0/operator'"}},
		{"toleration unknown key", "tolerations: [{key: dedicated, efect: NoSchedule}]", []string{"'/tolerations/0'", "'efect'"}},
		{"affinity unknown key", "affinity: {nodeAfinity: {}}", []string{"'/affinity'", "'nodeAfinity'"}},
		{"affinity weight", "affinity: {podAntiAffinity: {preferredDuringSchedulingIgnoredDuringExecution: [{weight: 0, podAffinityTerm: {topologyKey: zone}}]}}",
			[]string{"'/affinity/podAntiAffinity/preferredDuringSchedulingIgnoredDuringExecution/0/weight'"}},
		{"affinity namespace not a DNS label", "affinity: {podAffinity: {requiredDuringSchedulingIgnoredDuringExecution: [{topologyKey: zone, namespaces: [Temporal_NS]}]}}",
			[]string{"'/affinity/podAffinity/requiredDuringSchedulingIgnoredDuringExecution/0/namespaces/0'"}},
		{"full name not a DNS label", "fullnameOverride: Stepwise", []string{"'/fullnameOverride'"}},
		{"priority class name", "priorityClassName: High_Priority", []string{"'/priorityClassName'"}},
		{"service account annotations not strings", "serviceAccount: {annotations: {example.com/a: {b: c}}}", []string{"'/serviceAccount/annotations/example.com~1a'"}},
		{"one port for the gateway and the hub", "gateway: {port: 8090}", []string{"gateway.port and eventHub.port are both 8090"}},
		{"gateway Service type", "gateway: {service: {type: ExternalName}}", []string{"'/gateway/service/type'"}},
		{"negative gateway replicas", "gateway: {replicas: -1}", []string{"'/gateway/replicas'"}},
		{"token audience with a comma", "gateway: {tokenAudiences: ['a,b']}", []string{"'/gateway/tokenAudiences/0'"}},
		{"hub publish keys Secret not a name", "eventHub: {publishKeysSecret: Hub_Key}", []string{"'/eventHub/publishKeysSecret'"}},
		{"hub read tokens Secret not a name", "eventHub: {readTokensSecret: Hub_Key}", []string{"'/eventHub/readTokensSecret'"}},
		{"the retired single hub key", "eventHub: {keySecret: hub-key}", []string{"keySecret"}},
		{"hub port out of range", "eventHub: {port: 0}", []string{"'/eventHub/port'"}},
		{"hub URL with a path", "eventHub: {url: 'http://hub:8090/publish'}", []string{"'/eventHub/url'"}},
		{"hub URL with a query", "eventHub: {url: 'http://hub:8090?x=1'}", []string{"'/eventHub/url'"}},
		{"hub URL with credentials", "eventHub: {url: 'http://user:pw@hub:8090'}", []string{"'/eventHub/url'"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			out, err := render(t, "--values", valuesFile(t, tc.values))
			if err == nil {
				t.Fatalf("values %q rendered, want them refused:\n%s", tc.values, out)
			}
			for _, want := range tc.wantErr {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("values %q: error does not contain %q:\n%v", tc.values, want, err)
				}
			}
		})
	}
}

// The chart refuses the same host directories the operator does, so an
// install that would stop the operator at start fails at install instead.
func TestHostPathRootsRefusedAsTheOperatorRefusesThem(t *testing.T) {
	var roots []string
	for _, dir := range media.SystemDirectories {
		roots = append(roots, dir, dir+"/stepwise")
	}
	roots = append(roots, "/", "/lib", "/lib64", "/libexec/media")
	for _, root := range roots {
		if !media.IsSystemPath(root) && root != "/" {
			t.Fatalf("%s is not a system path for the operator; fix the test", root)
		}
	}
	list, err := yaml.Marshal(map[string][]string{"mediaHostPathRoots": roots})
	if err != nil {
		t.Fatal(err)
	}
	_, err = render(t, "--values", valuesFile(t, string(list)))
	if err == nil {
		t.Fatal("system directories rendered, want them refused")
	}
	for i, root := range roots {
		if want := "'/mediaHostPathRoots/" + strconv.Itoa(i) + "'"; !strings.Contains(err.Error(), want) {
			t.Errorf("%s is not refused (no %s in the error):\n%v", root, want, err)
		}
	}

	allowed := []string{"/srv/stepwise-media", "/varnish/media", "/mnt/lib", "/data/tmp"}
	for _, root := range allowed {
		if media.IsSystemPath(root) {
			t.Fatalf("%s is a system path for the operator; fix the test", root)
		}
	}
	out, err := render(t, "--set", "mediaHostPathRoots={"+strings.Join(allowed, ",")+"}")
	if err != nil {
		t.Fatalf("directories outside the system ones refused: %v", err)
	}
	if want := "--media-host-path-roots=" + strings.Join(allowed, ","); !strings.Contains(out, want) {
		t.Errorf("render lacks %s", want)
	}
}

// objects is a render split into its objects, by kind and name.
type objects map[string][]byte

func parse(t *testing.T, manifests string) objects {
	t.Helper()
	out := objects{}
	reader := utilyaml.NewYAMLReader(bufio.NewReader(strings.NewReader(manifests)))
	for {
		doc, err := reader.Read()
		if errors.Is(err, io.EOF) {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		var object unstructured.Unstructured
		if err := yaml.Unmarshal(doc, &object.Object); err != nil {
			t.Fatal(err)
		}
		if object.Object == nil {
			continue
		}
		key := object.GetKind() + "/" + object.GetName()
		if _, dup := out[key]; dup {
			t.Fatalf("the render holds %s twice", key)
		}
		if ns := object.GetNamespace(); ns != "" && ns != releaseNS {
			t.Errorf("%s is in namespace %s, not the release's %s", key, ns, releaseNS)
		}
		out[key] = doc
	}
}

// get decodes one object of the render.
func get[T any](t *testing.T, objs objects, key string) *T {
	t.Helper()
	doc, ok := objs[key]
	if !ok {
		t.Fatalf("the render has no %s; it has %v", key, keysOf(objs))
	}
	var object T
	if err := yaml.UnmarshalStrict(doc, &object); err != nil {
		t.Fatalf("%s: %v", key, err)
	}
	return &object
}

func keysOf(objs objects) []string {
	var keys []string
	for key := range objs {
		keys = append(keys, key)
	}
	slices.Sort(keys)
	return keys
}

func appVersion(t *testing.T) string {
	t.Helper()
	var chart struct {
		AppVersion string `json:"appVersion"`
	}
	data, err := os.ReadFile(filepath.Join(chartDir, "Chart.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(data, &chart); err != nil {
		t.Fatal(err)
	}
	return chart.AppVersion
}

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

// expectCredentials checks that a Deployment mounts exactly these event
// hub Secrets, each at its own directory, read-only.
func expectCredentials(t *testing.T, d *appsv1.Deployment, secrets ...string) {
	t.Helper()
	dirs := map[string]string{
		"publish-keys": "/etc/stepwise/event-hub-publish-keys",
		"read-tokens":  "/etc/stepwise/event-hub-read-tokens",
	}
	var mounted []string
	for _, v := range d.Spec.Template.Spec.Volumes {
		if v.Secret != nil && strings.Contains(v.Name, "event-hub") {
			mounted = append(mounted, v.Secret.SecretName)
		}
	}
	if !slices.Equal(mounted, secrets) {
		t.Errorf("%s mounts event hub Secrets %q, want %q", d.Name, mounted, secrets)
	}
	for _, secret := range secrets {
		kind := secret[strings.Index(secret, "event-hub-")+len("event-hub-"):]
		for suffix, dir := range dirs {
			if strings.HasSuffix(kind, suffix) && !mountsKey(d.Spec.Template.Spec, secret, dir) {
				t.Errorf("%s does not mount %s at %s", d.Name, secret, dir)
			}
		}
	}
}

// expectSelects checks that a Service sends its port to a named port of a
// Deployment's pods.
func expectSelects(t *testing.T, service *corev1.Service, d *appsv1.Deployment, port int32, target string) {
	t.Helper()
	if len(service.Spec.Ports) != 1 || service.Spec.Ports[0].Port != port || service.Spec.Ports[0].TargetPort.StrVal != target {
		t.Errorf("Service %s ports = %+v, want %d to %s", service.Name, service.Spec.Ports, port, target)
	}
	for k, v := range service.Spec.Selector {
		if d.Spec.Template.Labels[k] != v {
			t.Errorf("Service %s selects %s=%s, which the pods of %s lack", service.Name, k, v, d.Name)
		}
	}
	for k, v := range d.Spec.Selector.MatchLabels {
		if service.Spec.Selector[k] != v {
			t.Errorf("Service %s selects more pods than %s: it lacks %s=%s", service.Name, d.Name, k, v)
		}
	}
	if !slices.ContainsFunc(d.Spec.Template.Spec.Containers[0].Ports, func(p corev1.ContainerPort) bool { return p.Name == target }) {
		t.Errorf("%s declares no port %s", d.Name, target)
	}
}

func mountsKey(pod corev1.PodSpec, secret, dir string) bool {
	for _, v := range pod.Volumes {
		if v.Secret == nil || v.Secret.SecretName != secret {
			continue
		}
		for _, m := range pod.Containers[0].VolumeMounts {
			if m.Name == v.Name && m.MountPath == dir && m.ReadOnly {
				return true
			}
		}
	}
	return false
}

// The NetworkPolicies let into each pod only what its role needs. The test
// cluster's network plugin does not enforce NetworkPolicies, so these are
// checked as rendered (and by kubeconform, and by the API server in the
// end-to-end suite), not by traffic.
func TestNetworkPoliciesLetInOnlyWhatEachPodServes(t *testing.T) {
	out, err := render(t, "--set", "networkPolicy.metricsNamespace=monitoring",
		"--set-json", `networkPolicy.gatewayFrom=[{"namespaceSelector":{"matchLabels":{"kubernetes.io/metadata.name":"ingress"}}}]`)
	if err != nil {
		t.Fatal(err)
	}
	objs := parse(t, out)
	byName := func(name string) *networkingv1.NetworkPolicy {
		return get[networkingv1.NetworkPolicy](t, objs, "NetworkPolicy/"+name)
	}
	selects := func(p *networkingv1.NetworkPolicy, d *appsv1.Deployment) {
		t.Helper()
		sel, err := metav1.LabelSelectorAsSelector(&p.Spec.PodSelector)
		if err != nil || !sel.Matches(labels.Set(d.Spec.Template.Labels)) || len(p.Spec.PodSelector.MatchLabels) == 0 {
			t.Errorf("NetworkPolicy %s does not select the pods of %s alone", p.Name, d.Name)
		}
		if !slices.Equal(p.Spec.PolicyTypes, []networkingv1.PolicyType{networkingv1.PolicyTypeIngress}) {
			t.Errorf("NetworkPolicy %s has policy types %v, want Ingress", p.Name, p.Spec.PolicyTypes)
		}
	}
	ports := func(rule networkingv1.NetworkPolicyIngressRule) []int {
		var out []int
		for _, p := range rule.Ports {
			out = append(out, p.Port.IntValue())
		}
		return out
	}

	operator := byName("stepwise")
	selects(operator, get[appsv1.Deployment](t, objs, "Deployment/stepwise"))
	if len(operator.Spec.Ingress) != 2 || !slices.Equal(ports(operator.Spec.Ingress[0]), []int{8081}) || len(operator.Spec.Ingress[0].From) != 0 ||
		!slices.Equal(ports(operator.Spec.Ingress[1]), []int{8080}) ||
		operator.Spec.Ingress[1].From[0].NamespaceSelector.MatchLabels["kubernetes.io/metadata.name"] != "monitoring" {
		t.Errorf("the operator lets in %s; want its probes from anywhere and its metrics from monitoring", mustYAML(t, operator.Spec.Ingress))
	}

	hub := byName("stepwise-event-hub")
	selects(hub, get[appsv1.Deployment](t, objs, "Deployment/stepwise-event-hub"))
	gatewayPods := get[appsv1.Deployment](t, objs, "Deployment/stepwise-gateway").Spec.Template.Labels
	if len(hub.Spec.Ingress) != 1 || !slices.Equal(ports(hub.Spec.Ingress[0]), []int{8090}) || len(hub.Spec.Ingress[0].From) != 2 {
		t.Fatalf("the event hub lets in %s", mustYAML(t, hub.Spec.Ingress))
	}
	fromGateway, fromWorkers := hub.Spec.Ingress[0].From[0], hub.Spec.Ingress[0].From[1]
	if sel, _ := metav1.LabelSelectorAsSelector(fromGateway.PodSelector); fromGateway.NamespaceSelector != nil || !sel.Matches(labels.Set(gatewayPods)) {
		t.Errorf("the hub's first peer is %s, want the gateway's pods of the release's namespace", mustYAML(t, fromGateway))
	}
	if fromWorkers.NamespaceSelector == nil || !equalJSON(t, fromWorkers.PodSelector.MatchLabels, map[string]string{workers.LabelName: "agent-worker"}) {
		t.Errorf("the hub's second peer is %s, want worker pods of any namespace", mustYAML(t, fromWorkers))
	}

	gateway := byName("stepwise-gateway")
	selects(gateway, get[appsv1.Deployment](t, objs, "Deployment/stepwise-gateway"))
	if len(gateway.Spec.Ingress) != 1 || !slices.Equal(ports(gateway.Spec.Ingress[0]), []int{8080}) ||
		gateway.Spec.Ingress[0].From[0].NamespaceSelector.MatchLabels["kubernetes.io/metadata.name"] != "ingress" {
		t.Errorf("the gateway lets in %s; want its port from the values' peers", mustYAML(t, gateway.Spec.Ingress))
	}
	if args := get[appsv1.Deployment](t, objs, "Deployment/stepwise").Spec.Template.Spec.Containers[0].Args; !slices.Contains(args, "--worker-network-policies") ||
		!slices.Contains(args, "--metrics-namespace=monitoring") {
		t.Errorf("the operator makes no worker NetworkPolicies: %q", args)
	}

	off, err := render(t, "--set", "networkPolicy.enabled=false")
	if err != nil {
		t.Fatal(err)
	}
	for _, key := range keysOf(parse(t, off)) {
		if strings.HasPrefix(key, "NetworkPolicy/") {
			t.Errorf("networkPolicy.enabled=false renders %s", key)
		}
	}
}

// Without the gateway, nothing of it or the hub renders and the operator
// hands workers no hub.
func TestGatewayOff(t *testing.T) {
	out, err := render(t, "--set", "gateway.enabled=false")
	if err != nil {
		t.Fatal(err)
	}
	objs := parse(t, out)
	for _, key := range keysOf(objs) {
		if strings.Contains(key, "gateway") || strings.Contains(key, "event-hub") {
			t.Errorf("the gateway is off, yet the render holds %s", key)
		}
	}
	operator := get[appsv1.Deployment](t, objs, "Deployment/stepwise")
	for _, arg := range operator.Spec.Template.Spec.Containers[0].Args {
		if strings.HasPrefix(arg, "--event-hub") {
			t.Errorf("the gateway is off, yet the operator has %s", arg)
		}
	}
	if len(operator.Spec.Template.Spec.Volumes) != 0 {
		t.Errorf("the operator mounts %v", operator.Spec.Template.Spec.Volumes)
	}
}

// expectRestricted checks the security context the restricted Pod
// Security Standard asks for, with a read-only root file system.
func expectRestricted(t *testing.T, pod corev1.PodSpec) {
	t.Helper()
	sc := pod.SecurityContext
	if sc == nil || sc.RunAsNonRoot == nil || !*sc.RunAsNonRoot || sc.RunAsUser == nil || *sc.RunAsUser != 65532 ||
		sc.SeccompProfile == nil || sc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault {
		t.Errorf("pod securityContext = %s, want non-root 65532 with the RuntimeDefault seccomp profile", mustYAML(t, sc))
	}
	for _, container := range pod.Containers {
		csc := container.SecurityContext
		if csc == nil || csc.AllowPrivilegeEscalation == nil || *csc.AllowPrivilegeEscalation ||
			csc.ReadOnlyRootFilesystem == nil || !*csc.ReadOnlyRootFilesystem || csc.Capabilities == nil ||
			!slices.Equal(csc.Capabilities.Drop, []corev1.Capability{"ALL"}) || len(csc.Capabilities.Add) != 0 {
			t.Errorf("container %s securityContext = %s, want no privilege escalation, a read-only root and ALL capabilities dropped",
				container.Name, mustYAML(t, csc))
		}
	}
}

func TestAllValuesReachTheOperator(t *testing.T) {
	out, err := render(t, "--values", allValues)
	if err != nil {
		t.Fatal(err)
	}
	objs := parse(t, out)
	deployment := get[appsv1.Deployment](t, objs, "Deployment/stepwise-all")
	pod := deployment.Spec.Template.Spec
	manager := pod.Containers[0]
	const registry = "registry.example.com:5000/platform/stepwise"
	if want := registry + "/operator:0.4.0-rc.1"; manager.Image != want || manager.ImagePullPolicy != corev1.PullAlways {
		t.Errorf("image = %q %s, want %q Always", manager.Image, manager.ImagePullPolicy, want)
	}
	wantArgs := []string{
		"--leader-elect", "--health-probe-bind-address=:9091", "--metrics-bind-address=:9090", "--metrics-secure=true", "--poller-quiet-period=2m", "--versioned-rollouts=false",
		"--operator-namespace=" + releaseNS, "--default-engine=shared-temporal", "--allow-namespace-engines=true",
		"--worker-image=" + registry + "/agent-worker:0.4.0", "--media-host-path-roots=/srv/stepwise-media,team-a:/mnt/team-a-media,/mnt/agents/media",
		"--otlp-endpoint=http://otel-collector.observability:4317", "--otlp-protocol=grpc",
		"--worker-network-policies", "--metrics-namespace=monitoring", "--gateway-grants-configmap=stepwise-all-gateway-grants",
		"--event-hub-url=https://event-hub.agents.example.com:9443", "--event-hub-publish-keys-file=/etc/stepwise/event-hub-publish-keys/keys",
		"--zap-log-level=2", "--zap-encoder=console",
	}
	if !slices.Equal(manager.Args, wantArgs) {
		t.Errorf("args = %q\nwant %q", manager.Args, wantArgs)
	}
	if *deployment.Spec.Replicas != 2 || pod.PriorityClassName != "system-cluster-critical" ||
		!slices.Equal(pod.ImagePullSecrets, []corev1.LocalObjectReference{{Name: "registry-credentials"}}) ||
		pod.NodeSelector["kubernetes.io/os"] != "linux" || len(pod.Tolerations) != 2 || pod.Affinity == nil ||
		pod.Affinity.NodeAffinity == nil || pod.Affinity.PodAffinity == nil || pod.Affinity.PodAntiAffinity == nil {
		t.Errorf("the pod lacks a scheduling or pull value: %s", mustYAML(t, pod))
	}
	if got := manager.Resources.Limits.Cpu().String(); got != "1" {
		t.Errorf("CPU limit = %s, want 1", got)
	}
	labels := deployment.Spec.Template.Labels
	if labels["example.com/tier"] != "control-plane" || labels["app.kubernetes.io/name"] != "agents" {
		t.Errorf("pod labels = %v, want podLabels beside the selector labels", labels)
	}
	if deployment.Spec.Template.Annotations["example.com/team"] != "platform" {
		t.Errorf("pod annotations = %v", deployment.Spec.Template.Annotations)
	}
	expectRestricted(t, pod)

	account := get[corev1.ServiceAccount](t, objs, "ServiceAccount/stepwise-all")
	if account.Annotations["example.com/identity"] != "operator" {
		t.Errorf("ServiceAccount annotations = %v", account.Annotations)
	}
	service := get[corev1.Service](t, objs, "Service/stepwise-all-metrics")
	if service.Spec.Ports[0].Port != 9090 || service.Annotations["prometheus.io/scrape"] != "true" {
		t.Errorf("metrics Service = %s", mustYAML(t, service))
	}
	get[rbacv1.ClusterRole](t, objs, "ClusterRole/stepwise-all-manager")
	engine := get[agentsv1.ClusterEngine](t, objs, "ClusterEngine/shared-temporal")
	wantEngine := agentsv1.ClusterEngineSpec{Address: "temporal.example.com:7233", Namespace: "agents.prod",
		TLS:               &agentsv1.EngineTLS{SecretRef: &agentsv1.SecretReference{Name: "temporal-client-tls"}, ServerName: "temporal.internal.example.com"},
		APIKeySecretRef:   &agentsv1.SecretKeyReference{Name: "temporal-api-key", Key: "key"},
		NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"stepwise.example.com/tenant": "true"}}}
	if !equality.Semantic.DeepEqual(engine.Spec, wantEngine) {
		t.Errorf("the default ClusterEngine = %s, want %s", mustYAML(t, engine.Spec), mustYAML(t, wantEngine))
	}
	get[rbacv1.Role](t, objs, "Role/stepwise-all-leader-election")

	gateway := get[appsv1.Deployment](t, objs, "Deployment/stepwise-all-gateway")
	gatewayPod := gateway.Spec.Template.Spec
	wantGatewayArgs := []string{
		"--listen=:8443", "--hub-url=https://event-hub.agents.example.com:9443", "--hub-read-tokens-file=/etc/stepwise/event-hub-read-tokens/tokens",
		"--token-audiences=stepwise-gateway,https://kubernetes.default.svc", "--gateway-grants-configmap=stepwise-all-gateway-grants",
		"--operator-namespace=" + releaseNS, "--default-engine=shared-temporal", "--allow-namespace-engines=true",
	}
	if got := gatewayPod.Containers[0].Args; !slices.Equal(got, wantGatewayArgs) {
		t.Errorf("gateway args = %q\nwant %q", got, wantGatewayArgs)
	}
	if want := registry + "/gateway:0.4.0-rc.2"; gatewayPod.Containers[0].Image != want || *gateway.Spec.Replicas != 3 {
		t.Errorf("gateway image %q, replicas %d; want %q and 3", gatewayPod.Containers[0].Image, *gateway.Spec.Replicas, want)
	}
	if gateway.Spec.Template.Labels["example.com/tier"] != "edge" || gateway.Spec.Template.Annotations["example.com/team"] != "platform" {
		t.Errorf("gateway pod metadata = %v %v", gateway.Spec.Template.Labels, gateway.Spec.Template.Annotations)
	}
	gatewayService := get[corev1.Service](t, objs, "Service/stepwise-all-gateway")
	if gatewayService.Spec.Type != corev1.ServiceTypeLoadBalancer || gatewayService.Annotations["example.com/load-balancer"] != "internal" {
		t.Errorf("gateway Service = %s", mustYAML(t, gatewayService))
	}
	expectSelects(t, gatewayService, gateway, 443, "http")
	if get[corev1.ServiceAccount](t, objs, "ServiceAccount/stepwise-all-gateway").Annotations["example.com/identity"] != "gateway" {
		t.Error("the gateway's ServiceAccount lacks its annotations")
	}
	hub := get[appsv1.Deployment](t, objs, "Deployment/stepwise-all-event-hub")
	if got := hub.Spec.Template.Spec.Containers[0].Resources.Limits.Memory().String(); got != "1Gi" {
		t.Errorf("event hub memory limit = %s, want 1Gi", got)
	}
	expectSelects(t, get[corev1.Service](t, objs, "Service/stepwise-all-event-hub"), hub, 9443, "hub")
	// Secrets of the platform's own replace the generated ones.
	for _, name := range []string{"Secret/stepwise-all-event-hub-publish-keys", "Secret/stepwise-all-event-hub-read-tokens"} {
		if _, ok := objs[name]; ok {
			t.Errorf("the values name the hub's Secrets, yet the chart renders %s", name)
		}
	}
	expectCredentials(t, deployment, "hub-publish-keys-from-vault")
	expectCredentials(t, gateway, "hub-read-tokens-from-vault")
	expectCredentials(t, hub, "hub-publish-keys-from-vault", "hub-read-tokens-from-vault")
}

func TestPodLabelsDoNotReplaceTheSelectorLabels(t *testing.T) {
	out, err := render(t, "--set", "podLabels.app\\.kubernetes\\.io/instance=other")
	if err != nil {
		t.Fatal(err)
	}
	deployment := get[appsv1.Deployment](t, parse(t, out), "Deployment/stepwise")
	if got := deployment.Spec.Template.Labels["app.kubernetes.io/instance"]; got != releaseName {
		t.Errorf("pod label app.kubernetes.io/instance = %q, want the release's %q", got, releaseName)
	}
}

func TestMetricsOff(t *testing.T) {
	out, err := render(t, "--set", "metrics.enabled=false")
	if err != nil {
		t.Fatal(err)
	}
	objs := parse(t, out)
	if _, ok := objs["Service/stepwise-metrics"]; ok {
		t.Error("metrics are off, yet the render holds the metrics Service")
	}
	manager := get[appsv1.Deployment](t, objs, "Deployment/stepwise").Spec.Template.Spec.Containers[0]
	if !slices.Contains(manager.Args, "--metrics-bind-address=0") {
		t.Errorf("args = %q, want --metrics-bind-address=0", manager.Args)
	}
	for _, port := range manager.Ports {
		if port.Name == "metrics" {
			t.Error("metrics are off, yet the container declares a metrics port")
		}
	}
}

// The rendered arguments are flags the operator defines and values it
// accepts: the operator built from this tree parses them and applies its own
// checks (engine address, API key Secret, host path roots) and stops only
// where it needs a cluster.
func TestTheOperatorAcceptsTheRenderedArguments(t *testing.T) {
	out, err := render(t, "--values", allValues)
	if err != nil {
		t.Fatal(err)
	}
	objs := parse(t, out)
	for _, tc := range []struct{ deployment, command string }{
		{"Deployment/stepwise-all", "../cmd/manager"},
		{"Deployment/stepwise-all-gateway", "../cmd/gateway"},
	} {
		t.Run(tc.command, func(t *testing.T) {
			args := withKeyFile(t, get[appsv1.Deployment](t, objs, tc.deployment).Spec.Template.Spec.Containers[0].Args)
			binary := filepath.Join(t.TempDir(), "command")
			build := exec.Command("go", "build", "-o", binary, tc.command)
			if out, err := build.CombinedOutput(); err != nil {
				t.Fatalf("building %s: %v\n%s", tc.command, err, out)
			}
			home := t.TempDir()
			run := exec.Command(binary, append(args, "--kubeconfig", filepath.Join(home, "no-kubeconfig"))...)
			run.Env = []string{"HOME=" + home, "PATH=" + os.Getenv("PATH")}
			stderr, err := run.CombinedOutput()
			if err == nil {
				t.Fatalf("%s ran without a cluster", tc.command)
			}
			if !strings.Contains(string(stderr), "loading the kubeconfig") {
				t.Errorf("%s stopped before it looked for a cluster, so it refused a rendered argument:\n%s", tc.command, stderr)
			}
		})
	}
}

// withKeyFile points the event hub credential flags at files of the
// test's, where the pod would mount the Secrets.
func withKeyFile(t *testing.T, args []string) []string {
	t.Helper()
	dir := t.TempDir()
	keys, tokens := filepath.Join(dir, "keys"), filepath.Join(dir, "tokens")
	if err := os.WriteFile(keys, []byte("k1:"+strings.Repeat("k", 48)), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(tokens, []byte(strings.Repeat("r", 48)), 0o600); err != nil {
		t.Fatal(err)
	}
	out := slices.Clone(args)
	for i, arg := range out {
		switch name, _, _ := strings.Cut(arg, "="); name {
		case "--event-hub-publish-keys-file", "--hub-publish-keys-file":
			out[i] = name + "=" + keys
		case "--hub-read-tokens-file":
			out[i] = name + "=" + tokens
		}
	}
	return out
}

// The schemas `make chart-check` writes are strict: a misspelled field of a
// rendered object fails kubeconform, naming the field.
func TestKubeconformRefusesAMisspelledField(t *testing.T) {
	kubeconform, schemas := testtools.Kubeconform.Path(t), testtools.KubeSchemas.Path(t)
	out, err := render(t, "--include-crds")
	if err != nil {
		t.Fatal(err)
	}
	check := func(manifests string) (string, error) {
		cmd := exec.Command(kubeconform, "-strict", "-summary", "-schema-location", filepath.Join(schemas, "{{ .ResourceKind }}{{ .KindSuffix }}.json"))
		cmd.Stdin = strings.NewReader(manifests)
		output, err := cmd.CombinedOutput()
		return string(output), err
	}
	if output, err := check(out); err != nil {
		t.Fatalf("the default render fails kubeconform: %v\n%s", err, output)
	}
	misspelled := strings.Replace(out, "readOnlyRootFilesystem:", "readOnlyRootFileSystem:", 1)
	if misspelled == out {
		t.Fatal("the render has no readOnlyRootFilesystem to misspell")
	}
	output, err := check(misspelled)
	if err == nil || !strings.Contains(output, "readOnlyRootFileSystem") {
		t.Errorf("kubeconform accepted a misspelled field or did not name it: %v\n%s", err, output)
	}
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

func equalJSON(t *testing.T, a, b any) bool {
	t.Helper()
	return bytes.Equal(mustYAML(t, a), mustYAML(t, b))
}

func mustYAML(t *testing.T, v any) []byte {
	t.Helper()
	data, err := yaml.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return data
}

// The monitors scrape the operator's metrics Service and every worker pod
// the operator renders, by the labels and port names it gives them.
func TestMonitorsScrapeTheOperatorAndTheWorkers(t *testing.T) {
	out, err := render(t, "--values", allValues)
	if err != nil {
		t.Fatal(err)
	}
	objs := parse(t, out)
	var pod struct {
		Spec struct {
			NamespaceSelector struct {
				Any bool `json:"any"`
			} `json:"namespaceSelector"`
			Selector struct {
				MatchLabels map[string]string `json:"matchLabels"`
			} `json:"selector"`
			Endpoints []struct {
				Port     string `json:"port"`
				Interval string `json:"interval"`
			} `json:"podMetricsEndpoints"`
		} `json:"spec"`
	}
	if err := yaml.Unmarshal(objs["PodMonitor/stepwise-all-workers"], &pod); err != nil {
		t.Fatal(err)
	}
	wantLabels := map[string]string{workers.LabelManagedBy: workers.ManagedBy, workers.LabelComponent: workers.ComponentWorker}
	if !pod.Spec.NamespaceSelector.Any || !maps.Equal(pod.Spec.Selector.MatchLabels, wantLabels) ||
		len(pod.Spec.Endpoints) != 1 || pod.Spec.Endpoints[0].Port != workers.MetricsPortName || pod.Spec.Endpoints[0].Interval != "15s" {
		t.Errorf("the PodMonitor selects %+v", pod.Spec)
	}
	service := get[corev1.Service](t, objs, "Service/stepwise-all-metrics")
	var monitor struct {
		Spec struct {
			Selector struct {
				MatchLabels map[string]string `json:"matchLabels"`
			} `json:"selector"`
			Endpoints []struct {
				Port            string `json:"port"`
				Scheme          string `json:"scheme"`
				BearerTokenFile string `json:"bearerTokenFile"`
			} `json:"endpoints"`
		} `json:"spec"`
	}
	if err := yaml.Unmarshal(objs["ServiceMonitor/stepwise-all"], &monitor); err != nil {
		t.Fatal(err)
	}
	for k, v := range monitor.Spec.Selector.MatchLabels {
		if service.Labels[k] != v {
			t.Errorf("the ServiceMonitor selects %s=%s; the metrics Service has %v", k, v, service.Labels)
		}
	}
	if len(monitor.Spec.Endpoints) != 1 || monitor.Spec.Endpoints[0].Port != service.Spec.Ports[0].Name {
		t.Errorf("the ServiceMonitor scrapes %+v; the Service's port is %s", monitor.Spec.Endpoints, service.Spec.Ports[0].Name)
	}
	// The operator's metrics are served over HTTPS to authorized tokens.
	if e := monitor.Spec.Endpoints[0]; e.Scheme != "https" || e.BearerTokenFile == "" {
		t.Errorf("the ServiceMonitor scrapes with scheme %q and token %q, want https with Prometheus's token", e.Scheme, e.BearerTokenFile)
	}
	reader := get[rbacv1.ClusterRole](t, objs, "ClusterRole/stepwise-all-metrics-reader")
	if len(reader.Rules) != 1 || !slices.Equal(reader.Rules[0].NonResourceURLs, []string{"/metrics"}) || !slices.Equal(reader.Rules[0].Verbs, []string{"get"}) {
		t.Errorf("the metrics reader role = %+v", reader.Rules)
	}
	// Off by default: a cluster without the Prometheus Operator's CRDs
	// installs the chart as it is.
	if out, err := render(t); err != nil || strings.Contains(out, "monitoring.coreos.com") {
		t.Errorf("the default render has monitors (%v)", err)
	}
}
