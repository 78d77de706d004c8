package controller

import (
	"errors"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	agentsv1 "github.com/stepwise-run/stepwise/api/v1alpha1"
	"github.com/stepwise-run/stepwise/internal/render"
)

func deployment(replicas, available, updated int32, current bool) *appsv1.Deployment {
	d := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Generation: 2},
		Spec: appsv1.DeploymentSpec{
			Replicas: &replicas,
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{
				Annotations: map[string]string{render.AnnotationConfigDigest: "sha256:abc"}}},
		},
		Status: appsv1.DeploymentStatus{Replicas: available, ReadyReplicas: available, AvailableReplicas: available, UpdatedReplicas: updated, ObservedGeneration: 1},
	}
	if current {
		d.Status.ObservedGeneration = 2
	}
	return d
}

func TestAgentStatusConditions(t *testing.T) {
	agent := &agentsv1.Agent{ObjectMeta: metav1.ObjectMeta{Name: "support", Generation: 4},
		Spec: agentsv1.AgentSpec{FlowType: "SupportAgent"}, Status: agentsv1.AgentStatus{ObservedGeneration: 3}}
	tests := []struct {
		name                string
		pass                agentPass
		wantReady           metav1.ConditionStatus
		wantReadyReason     string
		wantAvailableReason string
		wantObservedGen     int64
	}{
		{
			name: "applied and available", pass: agentPass{applied: true, deployment: deployment(2, 2, 2, true)},
			wantReady: metav1.ConditionTrue, wantReadyReason: agentsv1.ReasonReconciled,
			wantAvailableReason: agentsv1.ReasonDeploymentAvailable, wantObservedGen: 4,
		},
		{
			name: "applied while the rollout is still going", pass: agentPass{applied: true, deployment: deployment(2, 2, 1, true)},
			wantReady: metav1.ConditionTrue, wantReadyReason: agentsv1.ReasonReconciled,
			wantAvailableReason: agentsv1.ReasonDeploymentUnavailable, wantObservedGen: 4,
		},
		{
			name: "applied but the Deployment controller has not seen it", pass: agentPass{applied: true, deployment: deployment(2, 2, 2, false)},
			wantReady: metav1.ConditionTrue, wantReadyReason: agentsv1.ReasonReconciled,
			wantAvailableReason: agentsv1.ReasonDeploymentUnavailable, wantObservedGen: 4,
		},
		{
			name: "scaled to zero", pass: agentPass{applied: true, deployment: deployment(0, 0, 0, true)},
			wantReady: metav1.ConditionTrue, wantReadyReason: agentsv1.ReasonReconciled,
			wantAvailableReason: agentsv1.ReasonScaledToZero, wantObservedGen: 4,
		},
		{
			name:      "blocked before anything was applied",
			pass:      agentPass{blocker: &render.Blocker{Reason: agentsv1.ReasonToolSourceNotFound, Message: "m"}},
			wantReady: metav1.ConditionFalse, wantReadyReason: agentsv1.ReasonToolSourceNotFound,
			wantAvailableReason: agentsv1.ReasonDeploymentNotCreated, wantObservedGen: 4,
		},
		{
			name:      "a failed write keeps the last observed generation",
			pass:      agentPass{err: errors.New("conflict"), deployment: deployment(1, 1, 1, true)},
			wantReady: metav1.ConditionFalse, wantReadyReason: agentsv1.ReasonReconcileFailed,
			wantAvailableReason: agentsv1.ReasonDeploymentAvailable, wantObservedGen: 3,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			status := agentStatus(agent, tt.pass)
			ready := meta.FindStatusCondition(status.Conditions, agentsv1.ConditionReady)
			if ready == nil || ready.Status != tt.wantReady || ready.Reason != tt.wantReadyReason || ready.ObservedGeneration != 4 {
				t.Errorf("Ready = %+v, want %s %s for generation 4", ready, tt.wantReady, tt.wantReadyReason)
			}
			available := meta.FindStatusCondition(status.Conditions, agentsv1.ConditionWorkersAvailable)
			if available == nil || available.Reason != tt.wantAvailableReason {
				t.Errorf("WorkersAvailable = %+v, want reason %s", available, tt.wantAvailableReason)
			}
			if status.ObservedGeneration != tt.wantObservedGen {
				t.Errorf("observedGeneration = %d, want %d", status.ObservedGeneration, tt.wantObservedGen)
			}
			if status.Selector != render.Selector("support") {
				t.Errorf("selector = %q", status.Selector)
			}
			if tt.pass.deployment != nil && (status.ConfigDigest != "sha256:abc" || status.TaskQueue != "stepwise/SupportAgent") {
				t.Errorf("digest %q task queue %q, want them from the Deployment", status.ConfigDigest, status.TaskQueue)
			}
		})
	}
}

func TestWorkerVersions(t *testing.T) {
	rs := func(version string, replicas, ready int32) appsv1.ReplicaSet {
		r := appsv1.ReplicaSet{Status: appsv1.ReplicaSetStatus{Replicas: replicas, ReadyReplicas: ready}}
		if version != "" {
			r.Spec.Template.Labels = map[string]string{render.LabelEngineVersion: version}
		}
		return r
	}
	got := workerVersions([]appsv1.ReplicaSet{
		rs("0.2.0", 2, 1), rs("0.1.0", 1, 1), rs("0.2.0", 1, 1), rs("0.0.9", 0, 0), rs("", 1, 0),
	})
	want := []agentsv1.WorkerVersion{
		{EngineVersion: "0.1.0", Replicas: 1, ReadyReplicas: 1},
		{EngineVersion: "0.2.0", Replicas: 3, ReadyReplicas: 2},
		{EngineVersion: "unknown", Replicas: 1, ReadyReplicas: 0},
	}
	if len(got) != len(want) {
		t.Fatalf("workerVersions = %+v, want %+v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("workerVersions[%d] = %+v, want %+v", i, got[i], want[i])
		}
	}
	if workerVersions(nil) != nil {
		t.Error("no ReplicaSets should report no versions")
	}
}
