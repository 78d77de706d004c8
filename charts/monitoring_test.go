package charts_test

import (
	"maps"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"sigs.k8s.io/yaml"

	workers "github.com/stepwise-run/stepwise/internal/render"
)

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
