package controller

import (
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	apischeme "github.com/stepwise-run/stepwise/api/scheme"
	agentsv1 "github.com/stepwise-run/stepwise/api/v1alpha1"
)

func TestAgentMetricsShowTheRolloutFromTheStatus(t *testing.T) {
	began := time.Date(2026, 12, 5, 10, 0, 0, 0, time.UTC)
	rolling := &agentsv1.Agent{ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "support"},
		Spec: agentsv1.AgentSpec{FlowType: "SupportAgent"},
		Status: agentsv1.AgentStatus{
			RolloutStrategy: "StopOldFirst", Replicas: 3, ReadyReplicas: 2,
			Conditions: []metav1.Condition{
				{Type: agentsv1.ConditionReady, Status: metav1.ConditionTrue, Reason: agentsv1.ReasonReconciled},
				{Type: agentsv1.ConditionProgressing, Status: metav1.ConditionTrue, Reason: "WaitingForOldWorkersStopped", LastTransitionTime: metav1.NewTime(began)},
			},
			WorkerVersions: []agentsv1.WorkerVersion{
				{BuildID: "0.6.0-new", EngineVersion: "0.6.0", State: agentsv1.WorkerVersionRamping},
				{BuildID: "0.5.0-old", EngineVersion: "0.5.0", State: agentsv1.WorkerVersionDraining},
			},
		}}
	settled := &agentsv1.Agent{ObjectMeta: metav1.ObjectMeta{Namespace: "team-b", Name: "billing"},
		Spec: agentsv1.AgentSpec{FlowType: "Billing"},
		Status: agentsv1.AgentStatus{Conditions: []metav1.Condition{
			{Type: agentsv1.ConditionProgressing, Status: metav1.ConditionFalse, Reason: agentsv1.ReasonRolloutComplete, LastTransitionTime: metav1.NewTime(began)},
		}}}
	scheme, err := apischeme.New()
	if err != nil {
		t.Fatal(err)
	}
	reader := fake.NewClientBuilder().WithScheme(scheme).WithObjects(rolling, settled).Build()
	collector := &AgentCollector{Reader: reader, Now: func() time.Time { return began.Add(90 * time.Second) }}
	if problems, err := testutil.CollectAndLint(collector); err != nil || len(problems) > 0 {
		t.Errorf("lint: %v %+v", err, problems)
	}
	want := `
# HELP stepwise_agent_rollout_info The phase of the Agent's rollout: the reason of its Progressing condition.
# TYPE stepwise_agent_rollout_info gauge
stepwise_agent_rollout_info{agent="billing",namespace="team-b",phase="RolloutComplete"} 1
stepwise_agent_rollout_info{agent="support",namespace="team-a",phase="WaitingForOldWorkersStopped"} 1
# HELP stepwise_agent_rollout_seconds Seconds since the Agent's current rollout began; 0 when none runs.
# TYPE stepwise_agent_rollout_seconds gauge
stepwise_agent_rollout_seconds{agent="billing",namespace="team-b"} 0
stepwise_agent_rollout_seconds{agent="support",namespace="team-a"} 90
# HELP stepwise_agent_worker_versions Worker versions of the Agent, by state.
# TYPE stepwise_agent_worker_versions gauge
stepwise_agent_worker_versions{agent="support",namespace="team-a",state="Draining"} 1
stepwise_agent_worker_versions{agent="support",namespace="team-a",state="Ramping"} 1
# HELP stepwise_agent_ready_replicas Ready worker pods of the Agent.
# TYPE stepwise_agent_ready_replicas gauge
stepwise_agent_ready_replicas{agent="billing",namespace="team-b"} 0
stepwise_agent_ready_replicas{agent="support",namespace="team-a"} 2
# HELP stepwise_agent_info An Agent, with its Flow type and rollout strategy.
# TYPE stepwise_agent_info gauge
stepwise_agent_info{agent="billing",flow_type="Billing",namespace="team-b",rollout_strategy=""} 1
stepwise_agent_info{agent="support",flow_type="SupportAgent",namespace="team-a",rollout_strategy="StopOldFirst"} 1
`
	if err := testutil.CollectAndCompare(collector, strings.NewReader(want), "stepwise_agent_rollout_info", "stepwise_agent_rollout_seconds",
		"stepwise_agent_worker_versions", "stepwise_agent_ready_replicas", "stepwise_agent_info"); err != nil {
		t.Error(err)
	}
	// A registry takes it beside controller-runtime's collectors.
	if err := prometheus.NewRegistry().Register(collector); err != nil {
		t.Error(err)
	}
}
