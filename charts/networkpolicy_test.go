package charts_test

import (
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	workers "github.com/stepwise-run/stepwise/internal/render"
)

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
