package controller

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	agentsv1 "github.com/stepwise-run/stepwise/api/v1alpha1"
)

// AgentCollector reports every Agent's workers and rollout as Prometheus
// metrics, read from the operator's cache at each scrape, the way
// kube-state-metrics reports objects: an Agent that is deleted leaves no
// series behind. Names follow the _info, _total and _seconds conventions of
// rollout controllers such as Argo Rollouts and Flagger.
type AgentCollector struct {
	Reader client.Reader
	// Now is the clock of rollout durations; time.Now when nil.
	Now func() time.Time
}

var (
	agentLabels = []string{"namespace", "agent"}

	agentInfo = prometheus.NewDesc("stepwise_agent_info",
		"An Agent, with its Flow type and rollout strategy.", append(agentLabels, "flow_type", "rollout_strategy"), nil)
	agentReady = prometheus.NewDesc("stepwise_agent_ready",
		"1 while the Agent's Ready condition is True.", agentLabels, nil)
	agentReplicas = prometheus.NewDesc("stepwise_agent_replicas",
		"Worker pods of the Agent, of any version.", agentLabels, nil)
	agentReadyReplicas = prometheus.NewDesc("stepwise_agent_ready_replicas",
		"Ready worker pods of the Agent.", agentLabels, nil)
	agentVersionInfo = prometheus.NewDesc("stepwise_agent_worker_version_info",
		"A worker version of the Agent that still has pods, a Deployment or an engine record, with its state.",
		append(agentLabels, "build_id", "engine_version", "state"), nil)
	agentVersions = prometheus.NewDesc("stepwise_agent_worker_versions",
		"Worker versions of the Agent, by state.", append(agentLabels, "state"), nil)
	agentRolloutInfo = prometheus.NewDesc("stepwise_agent_rollout_info",
		"The phase of the Agent's rollout: the reason of its Progressing condition.", append(agentLabels, "phase"), nil)
	agentRolloutSeconds = prometheus.NewDesc("stepwise_agent_rollout_seconds",
		"Seconds since the Agent's current rollout began; 0 when none runs.", agentLabels, nil)
	agentScrapeErrors = prometheus.NewDesc("stepwise_agent_metrics_errors",
		"1 when the Agents could not be read for this scrape.", nil, nil)
)

// Describe implements prometheus.Collector.
func (c *AgentCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{agentInfo, agentReady, agentReplicas, agentReadyReplicas, agentVersionInfo,
		agentVersions, agentRolloutInfo, agentRolloutSeconds, agentScrapeErrors} {
		ch <- d
	}
}

// Collect implements prometheus.Collector.
func (c *AgentCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var agents agentsv1.AgentList
	if err := c.Reader.List(ctx, &agents); err != nil {
		ch <- prometheus.MustNewConstMetric(agentScrapeErrors, prometheus.GaugeValue, 1)
		return
	}
	ch <- prometheus.MustNewConstMetric(agentScrapeErrors, prometheus.GaugeValue, 0)
	now := time.Now
	if c.Now != nil {
		now = c.Now
	}
	for i := range agents.Items {
		for _, m := range agentMetrics(&agents.Items[i], now()) {
			ch <- m
		}
	}
}

// agentMetrics are one Agent's metrics at a time.
func agentMetrics(a *agentsv1.Agent, now time.Time) []prometheus.Metric {
	labels := []string{a.Namespace, a.Name}
	gauge := func(d *prometheus.Desc, v float64, extra ...string) prometheus.Metric {
		return prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, append(append([]string{}, labels...), extra...)...)
	}
	ready := 0.0
	if meta.IsStatusConditionTrue(a.Status.Conditions, agentsv1.ConditionReady) {
		ready = 1
	}
	out := []prometheus.Metric{
		gauge(agentInfo, 1, a.Spec.FlowType, a.Status.RolloutStrategy),
		gauge(agentReady, ready),
		gauge(agentReplicas, float64(a.Status.Replicas)),
		gauge(agentReadyReplicas, float64(a.Status.ReadyReplicas)),
	}
	states := map[string]int{}
	for _, v := range a.Status.WorkerVersions {
		states[string(v.State)]++
		out = append(out, gauge(agentVersionInfo, 1, v.BuildID, v.EngineVersion, string(v.State)))
	}
	for state, n := range states {
		out = append(out, gauge(agentVersions, float64(n), state))
	}
	rollout := 0.0
	if p := meta.FindStatusCondition(a.Status.Conditions, agentsv1.ConditionProgressing); p != nil {
		out = append(out, gauge(agentRolloutInfo, 1, p.Reason))
		if p.Status == metav1.ConditionTrue && !p.LastTransitionTime.IsZero() {
			rollout = now.Sub(p.LastTransitionTime.Time).Seconds()
		}
	}
	return append(out, gauge(agentRolloutSeconds, rollout))
}
