package charts_test

import (
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	agentsv1 "github.com/stepwise-run/stepwise/api/v1alpha1"
)

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
