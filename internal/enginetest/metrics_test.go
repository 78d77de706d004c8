package enginetest

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/stepwise-run/stepwise/pkg/client"
)

// scrape reads a worker's /metrics as Prometheus would, failing the test
// when the text does not parse.
func scrape(t *testing.T, address string) map[string]*dto.MetricFamily {
	t.Helper()
	resp, err := http.Get("http://" + address + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = resp.Body.Close() }()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("/metrics = %d", resp.StatusCode)
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatalf("the scrape does not parse: %v", err)
	}
	return families
}

// sample sums the samples of a family whose labels include want.
func sample(families map[string]*dto.MetricFamily, name string, want map[string]string) (float64, bool) {
	family, ok := families[name]
	if !ok {
		return 0, false
	}
	var sum float64
	found := false
	for _, m := range family.GetMetric() {
		labels := map[string]string{}
		for _, l := range m.GetLabel() {
			labels[l.GetName()] = l.GetValue()
		}
		match := true
		for k, v := range want {
			if labels[k] != v {
				match = false
			}
		}
		if !match {
			continue
		}
		found = true
		switch {
		case m.GetCounter() != nil:
			sum += m.GetCounter().GetValue()
		case m.GetHistogram() != nil:
			sum += float64(m.GetHistogram().GetSampleCount())
		case m.GetGauge() != nil:
			sum += m.GetGauge().GetValue()
		}
	}
	return sum, found
}

// TestAWorkerCountsItsSessionsOnItsMetricsEndpoint runs sessions on a real
// dev server and scrapes the worker: the session counters match what the
// sessions did, and the Temporal SDK's metrics time each Step.
func TestAWorkerCountsItsSessionsOnItsMetricsEndpoint(t *testing.T) {
	s := NewStack(t, "MetricsAgent")
	w := s.StartWorker()
	sessions := client.New(s.Client, s.Agent())
	ctx := context.Background()
	if ok, err := sessions.Start(ctx, "s1", "tools: write_approved, read_a"); !ok || err != nil {
		t.Fatalf("Start = %v, %v", ok, err)
	}
	if ok, err := sessions.Approve(ctx, "s1", firstInterrupt(t, sessions, "s1").ID); !ok || err != nil {
		t.Fatalf("Approve = %v, %v", ok, err)
	}
	lastAnswer(t, sessions, "s1", 1)
	if ok, err := sessions.Send(ctx, "s1", "hello"); !ok || err != nil {
		t.Fatalf("Send = %v, %v", ok, err)
	}
	lastAnswer(t, sessions, "s1", 2)

	flow := map[string]string{"flow_type": "MetricsAgent"}
	with := func(extra ...string) map[string]string {
		labels := map[string]string{"flow_type": "MetricsAgent"}
		for i := 0; i+1 < len(extra); i += 2 {
			labels[extra[i]] = extra[i+1]
		}
		return labels
	}
	want := []struct {
		name   string
		labels map[string]string
		value  float64
	}{
		{"stepwise_session_turns_started_total", flow, 2},
		{"stepwise_session_turns_ended_total", with("outcome", "completed"), 2},
		// The tool calls' response, the answer after them, and "hello"'s.
		{"stepwise_session_model_calls_total", with("provider", "scripted", "model", "scripted"), 3},
		{"stepwise_session_tool_calls_total", with("effect", "non_idempotent_write", "status", "succeeded"), 1},
		{"stepwise_session_tool_calls_total", with("effect", "read", "status", "succeeded"), 1},
		{"stepwise_session_interrupts_raised_total", with("kind", "approval"), 1},
		{"stepwise_session_interrupts_resolved_total", with("kind", "approval", "resolution", "approved"), 1},
	}
	// The last events of a turn are written a moment after it commits.
	var families map[string]*dto.MetricFamily
	Eventually(t, 10*time.Second, "the worker's counters", func() (bool, error) {
		families = scrape(t, w.Metrics)
		var wrong []string
		for _, c := range want {
			if got, _ := sample(families, c.name, c.labels); got != c.value {
				wrong = append(wrong, fmt.Sprintf("%s%v = %v, want %v", c.name, c.labels, got, c.value))
			}
		}
		return len(wrong) == 0, fmt.Errorf("%s", strings.Join(wrong, "; "))
	})
	if tokens, ok := sample(families, "stepwise_session_model_tokens_total", with("type", "input")); !ok || tokens <= 0 {
		t.Errorf("no input tokens counted: %v", tokens)
	}
	// Each Step is an activity type of the Temporal SDK's metrics.
	for _, step := range []string{"RunModel", "CallTool", "CallSingleAttemptTool"} {
		if n, ok := sample(families, "temporal_activity_execution_latency_seconds", map[string]string{"activity_type": step}); !ok || n == 0 {
			t.Errorf("the Temporal SDK's metrics did not time Step %s", step)
		}
	}
	// The health port serves no metrics, and the metrics port no probes.
	resp, err := http.Get("http://" + w.Health + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusNotFound {
		t.Errorf("/metrics on the health port = %d, want 404", resp.StatusCode)
	}
}
