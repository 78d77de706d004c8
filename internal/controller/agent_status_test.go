package controller

import (
	"errors"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	agentsv1 "github.com/stepwise-run/stepwise/api/v1alpha1"
	"github.com/stepwise-run/stepwise/internal/render"
	"github.com/stepwise-run/stepwise/internal/rollout"
	"github.com/stepwise-run/stepwise/internal/tenancy"
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

// all is a pass that read every part of the workers.
var all = observedWorkers{deployment: true, graph: true, replicaSets: true}

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
			name: "applied and available", pass: agentPass{observed: all, applied: true, deployment: deployment(2, 2, 2, true)},
			wantReady: metav1.ConditionTrue, wantReadyReason: agentsv1.ReasonReconciled,
			wantAvailableReason: agentsv1.ReasonDeploymentAvailable, wantObservedGen: 4,
		},
		{
			name: "applied while the rollout is still going", pass: agentPass{observed: all, applied: true, deployment: deployment(2, 2, 1, true)},
			wantReady: metav1.ConditionTrue, wantReadyReason: agentsv1.ReasonReconciled,
			wantAvailableReason: agentsv1.ReasonDeploymentUnavailable, wantObservedGen: 4,
		},
		{
			name: "applied but the Deployment controller has not seen it", pass: agentPass{observed: all, applied: true, deployment: deployment(2, 2, 2, false)},
			wantReady: metav1.ConditionTrue, wantReadyReason: agentsv1.ReasonReconciled,
			wantAvailableReason: agentsv1.ReasonDeploymentUnavailable, wantObservedGen: 4,
		},
		{
			name: "scaled to zero", pass: agentPass{observed: all, applied: true, deployment: deployment(0, 0, 0, true)},
			wantReady: metav1.ConditionTrue, wantReadyReason: agentsv1.ReasonReconciled,
			wantAvailableReason: agentsv1.ReasonScaledToZero, wantObservedGen: 4,
		},
		{
			name:      "blocked before anything was applied",
			pass:      agentPass{observed: all, blocker: &render.Blocker{Reason: agentsv1.ReasonToolSourceNotFound, Message: "m"}},
			wantReady: metav1.ConditionFalse, wantReadyReason: agentsv1.ReasonToolSourceNotFound,
			wantAvailableReason: agentsv1.ReasonDeploymentNotCreated, wantObservedGen: 4,
		},
		{
			name:      "a failed write keeps the last observed generation",
			pass:      agentPass{observed: all, err: errors.New("conflict"), deployment: deployment(1, 1, 1, true)},
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
			if tt.pass.deployment != nil && status.ConfigDigest != "sha256:abc" {
				t.Errorf("digest %q, want it from the Deployment", status.ConfigDigest)
			}
		})
	}
}

// A blocked Agent reports its versions from its Deployment's ReplicaSets:
// the template's is current, the others drain.
func TestWorkerVersionsOfABlockedAgent(t *testing.T) {
	template := func(version, image string) corev1.PodTemplateSpec {
		return corev1.PodTemplateSpec{
			ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{render.LabelEngineVersion: version}},
			Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "agent-worker", Image: image}}},
		}
	}
	rs := func(version, image string, replicas, ready int32) appsv1.ReplicaSet {
		return appsv1.ReplicaSet{Spec: appsv1.ReplicaSetSpec{Template: template(version, image)},
			Status: appsv1.ReplicaSetStatus{Replicas: replicas, ReadyReplicas: ready}}
	}
	d := &appsv1.Deployment{Spec: appsv1.DeploymentSpec{Template: template("0.4.0", "w:4")}}
	since := metav1.NewTime(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	current := rollout.Worker{EngineVersion: "0.4.0", Image: "w:4"}
	old := rollout.Worker{EngineVersion: "0.3.0", Image: "w:3"}
	got := workerVersionsOfReplicaSets(d, []appsv1.ReplicaSet{
		rs("0.3.0", "w:3", 2, 1), rs("0.4.0", "w:4", 1, 1), rs("0.3.0", "w:3", 1, 1), rs("0.2.0", "w:2", 0, 0),
	}, []agentsv1.WorkerVersion{{BuildID: old.BuildID(), State: agentsv1.WorkerVersionDraining, Since: since}})
	if len(got) != 2 {
		t.Fatalf("versions = %+v, want 0.4.0 and 0.3.0", got)
	}
	if got[0].BuildID != current.BuildID() || got[0].State != agentsv1.WorkerVersionCurrent || got[0].Replicas != 1 {
		t.Errorf("first = %+v, want the template's version, current, 1 replica", got[0])
	}
	if got[1].BuildID != old.BuildID() || got[1].State != agentsv1.WorkerVersionDraining || got[1].Replicas != 3 ||
		got[1].ReadyReplicas != 2 || !got[1].Since.Equal(&since) {
		t.Errorf("second = %+v, want 0.3.0 draining since before, 3 replicas, 2 ready", got[1])
	}
	if sessionFeatures(got) == nil || len(sessionFeatures(got)) != len(rollout.Features("0.3.0")) {
		t.Errorf("features in effect = %v, want those of 0.3.0, the oldest live", sessionFeatures(got))
	}
}

// TestAgentStatusAfterAFailedRead shows that a pass that could not read
// the workers leaves what it could not read as it was, stamps no
// generation, and says why in Ready.
func TestAgentStatusAfterAFailedRead(t *testing.T) {
	readyBefore := metav1.Condition{Type: agentsv1.ConditionReady, Status: metav1.ConditionTrue, Reason: agentsv1.ReasonReconciled, ObservedGeneration: 3}
	availableBefore := metav1.Condition{Type: agentsv1.ConditionWorkersAvailable, Status: metav1.ConditionTrue,
		Reason: agentsv1.ReasonDeploymentAvailable, Message: "3 of 3 workers available", ObservedGeneration: 3}
	earlier := agentsv1.AgentStatus{
		ObservedGeneration: 3, Conditions: []metav1.Condition{readyBefore, availableBefore},
		Replicas: 3, ReadyReplicas: 3, Selector: render.Selector("support"), TaskQueue: "stepwise/SupportAgent",
		ConfigDigest: "sha256:before", WorkerVersions: []agentsv1.WorkerVersion{{BuildID: "0.1.0-abc", EngineVersion: "0.1.0", Replicas: 3, ReadyReplicas: 3, State: agentsv1.WorkerVersionCurrent}},
		SessionFlowGraph: &agentsv1.PublishedFlowGraph{ConfigMapName: "support-session-graph", Digest: "sha256:graph"},
	}
	agent := &agentsv1.Agent{ObjectMeta: metav1.ObjectMeta{Name: "support", Generation: 4},
		Spec: agentsv1.AgentSpec{FlowType: "SupportAgent"}, Status: earlier}
	readErr := errors.New("reading *v1.Deployment support-worker: the server is currently unable to handle the request")

	tests := []struct {
		name string
		pass agentPass
		// want is the status the pass writes, Ready aside.
		want            agentsv1.AgentStatus
		wantReadyReason string
	}{
		{
			name:            "nothing read: everything stays",
			pass:            agentPass{err: readErr},
			want:            earlier,
			wantReadyReason: agentsv1.ReasonReconcileFailed,
		},
		{
			name: "applied, then the ReplicaSets could not be listed",
			pass: agentPass{applied: true, err: readErr, observed: observedWorkers{deployment: true, graph: true},
				deployment: deployment(3, 2, 3, true),
				graph: &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "support-session-graph",
					Annotations: map[string]string{render.AnnotationGraphDigest: "sha256:graph2"}}}},
			want: func() agentsv1.AgentStatus {
				s := *earlier.DeepCopy()
				s.Replicas, s.ReadyReplicas, s.ConfigDigest = 2, 2, "sha256:abc"
				s.SessionFlowGraph.Digest = "sha256:graph2"
				s.Conditions[1] = metav1.Condition{Type: agentsv1.ConditionWorkersAvailable, Status: metav1.ConditionFalse,
					Reason: agentsv1.ReasonDeploymentUnavailable, Message: "2 of 3 workers available", ObservedGeneration: 4}
				return s
			}(),
			wantReadyReason: agentsv1.ReasonReconcileFailed,
		},
		{
			name: "blocked, then the Deployment could not be read",
			pass: agentPass{blocker: &render.Blocker{Reason: agentsv1.ReasonSecretNotFound, Message: "spec.model.apiKeySecretRef: Secret \"openai\" does not exist"},
				err: readErr, observed: observedWorkers{graph: true},
				graph: &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "support-session-graph",
					Annotations: map[string]string{render.AnnotationGraphDigest: "sha256:graph"}}}},
			// A blocked Agent is stalled, whatever else failed.
			want: func() agentsv1.AgentStatus {
				s := *earlier.DeepCopy()
				s.Conditions = append(s.Conditions, metav1.Condition{Type: agentsv1.ConditionStalled, Status: metav1.ConditionTrue,
					Reason: agentsv1.ReasonSecretNotFound, Message: "spec.model.apiKeySecretRef: Secret \"openai\" does not exist", ObservedGeneration: 4})
				return s
			}(),
			wantReadyReason: agentsv1.ReasonSecretNotFound,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := agentStatus(agent, tt.pass)
			ready := meta.FindStatusCondition(got.Conditions, agentsv1.ConditionReady)
			if ready == nil || ready.Status != metav1.ConditionFalse || ready.Reason != tt.wantReadyReason ||
				!strings.Contains(ready.Message, readErr.Error()) || ready.ObservedGeneration != 4 {
				t.Errorf("Ready = %+v, want False %s naming the failed read", ready, tt.wantReadyReason)
			}
			meta.RemoveStatusCondition(&got.Conditions, agentsv1.ConditionReady)
			want := *tt.want.DeepCopy()
			meta.RemoveStatusCondition(&want.Conditions, agentsv1.ConditionReady)
			for i := range got.Conditions {
				got.Conditions[i].LastTransitionTime = metav1.Time{}
			}
			if !equality.Semantic.DeepEqual(got, want) {
				t.Errorf("status = %+v\nwant     %+v", got, want)
			}
		})
	}
}

// TestReferenceStatusAfterAFailedPass shows that a ToolSource and a
// MediaStore report a failed pass as the Agent does: Ready False with
// ReconcileFailed, observedGeneration and what the pass did not read left
// alone.
func TestReferenceStatusAfterAFailedPass(t *testing.T) {
	failed := errors.New("reading Secret \"tickets\": the server is currently unable to handle the request")
	inUse := metav1.Condition{Type: agentsv1.ConditionInUse, Status: metav1.ConditionTrue, Reason: agentsv1.ReasonReferencedByAgents,
		Message: "used by Agents support", ObservedGeneration: 1}
	ready := metav1.Condition{Type: agentsv1.ConditionReady, Status: metav1.ConditionTrue, Reason: agentsv1.ReasonReconciled, ObservedGeneration: 1}

	ts := &agentsv1.ToolSource{ObjectMeta: metav1.ObjectMeta{Name: "tickets", Generation: 2},
		Status: agentsv1.ToolSourceStatus{ObservedGeneration: 1, SourceName: "tickets", Conditions: []metav1.Condition{ready}}}
	ms := &agentsv1.MediaStore{ObjectMeta: metav1.ObjectMeta{Name: "media", Generation: 2},
		Spec:   agentsv1.MediaStoreSpec{S3: &agentsv1.S3MediaStore{Bucket: "agent-media"}},
		Status: agentsv1.MediaStoreStatus{ObservedGeneration: 1, StoreURI: "s3://agent-media", Conditions: []metav1.Condition{ready, inUse}}}
	agent := &agentsv1.Agent{ObjectMeta: metav1.ObjectMeta{Name: "support", Generation: 2},
		Status: agentsv1.AgentStatus{ObservedGeneration: 1, Conditions: []metav1.Condition{ready}}}

	tsStatus := toolSourceStatus(ts, referencePass{err: failed})
	msStatus := mediaStoreStatus(ms, mediaStorePass{referencePass: referencePass{err: failed}})
	agentSt := agentStatus(agent, agentPass{err: failed})
	for kind, got := range map[string]struct {
		conditions         []metav1.Condition
		observedGeneration int64
	}{
		"ToolSource": {tsStatus.Conditions, tsStatus.ObservedGeneration},
		"MediaStore": {msStatus.Conditions, msStatus.ObservedGeneration},
		"Agent":      {agentSt.Conditions, agentSt.ObservedGeneration},
	} {
		c := meta.FindStatusCondition(got.conditions, agentsv1.ConditionReady)
		if c == nil || c.Status != metav1.ConditionFalse || c.Reason != agentsv1.ReasonReconcileFailed ||
			c.Message != failed.Error() || c.ObservedGeneration != 2 {
			t.Errorf("%s Ready = %+v, want False ReconcileFailed with the failure for generation 2", kind, c)
		}
		if got.observedGeneration != 1 {
			t.Errorf("%s observedGeneration = %d, want 1 kept", kind, got.observedGeneration)
		}
	}
	if c := meta.FindStatusCondition(msStatus.Conditions, agentsv1.ConditionInUse); c == nil || *c != inUse {
		t.Errorf("MediaStore InUse = %+v, want it kept as %+v when its users were not listed", c, inUse)
	}

	// A pass that reached its verdict stamps the generation on both kinds.
	blocked := referencePass{blocker: &render.Blocker{Reason: agentsv1.ReasonHostPathNotAllowed, Message: "m"}}
	if s := mediaStoreStatus(ms, mediaStorePass{referencePass: blocked, usersKnown: true}); s.ObservedGeneration != 2 {
		t.Errorf("a blocked MediaStore's observedGeneration = %d, want 2", s.ObservedGeneration)
	}
	if s := toolSourceStatus(ts, referencePass{}); s.ObservedGeneration != 2 {
		t.Errorf("a ready ToolSource's observedGeneration = %d, want 2", s.ObservedGeneration)
	}
}

// TestSetNames holds where new sessions start, and whether the shared names
// are kept, to what each pass found: new sessions start under the desired
// workers' names once those take them, the shared names stay recorded
// while sessions run under them, and once given up are never recorded
// again.
func TestSetNames(t *testing.T) {
	own, shared := tenancy.Tenant("team", "SupportAgent"), tenancy.Shared("SupportAgent")
	resolved := func(names tenancy.Names, sharedQueue string) *render.Resolved {
		return &render.Resolved{EngineID: "engine-1", Names: names, SharedTaskQueue: sharedQueue}
	}
	phase := func(p rollout.Phase) *rollout.Plan { return &rollout.Plan{Phase: p} }
	tests := []struct {
		name                string
		before              agentsv1.AgentStatus
		pass                agentPass
		taskQueue, keepsOld string
	}{
		{"a new Agent starts under its own names", agentsv1.AgentStatus{},
			agentPass{resolved: resolved(own, ""), rollout: phase(rollout.PhaseRollingUpdate)}, own.TaskQueue(), ""},
		{"an earlier operator's Agent on 0.7.0 keeps the shared names", agentsv1.AgentStatus{TaskQueue: shared.TaskQueue()},
			agentPass{resolved: resolved(shared, ""), rollout: phase(rollout.PhaseComplete)}, shared.TaskQueue(), shared.TaskQueue()},
		{"moving to 0.8.0: new sessions start on the shared queue until the new workers take them",
			agentsv1.AgentStatus{TaskQueue: shared.TaskQueue(), SharedTaskQueue: shared.TaskQueue()},
			agentPass{resolved: resolved(own, shared.TaskQueue()), rollout: phase(rollout.PhaseRollingUpdate)}, shared.TaskQueue(), shared.TaskQueue()},
		{"moving to 0.8.0: once they take them, under the Agent's own",
			agentsv1.AgentStatus{TaskQueue: shared.TaskQueue(), SharedTaskQueue: shared.TaskQueue()},
			agentPass{resolved: resolved(own, shared.TaskQueue()), rollout: phase(rollout.PhaseDraining)}, own.TaskQueue(), shared.TaskQueue()},
		{"no session left under the shared names: they are given up",
			agentsv1.AgentStatus{TaskQueue: own.TaskQueue(), SharedTaskQueue: shared.TaskQueue()},
			agentPass{resolved: resolved(own, shared.TaskQueue()), rollout: phase(rollout.PhaseComplete), sharedRetired: true}, own.TaskQueue(), ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			status := tt.before
			setNames(&status, tt.pass.resolved, tt.pass)
			if status.TaskQueue != tt.taskQueue || status.SharedTaskQueue != tt.keepsOld || status.EngineID != "engine-1" {
				t.Errorf("task queue %q, shared %q, engine %q; want %q, %q, engine-1", status.TaskQueue, status.SharedTaskQueue, status.EngineID, tt.taskQueue, tt.keepsOld)
			}
		})
	}
}
