package controller

import (
	"fmt"
	"slices"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	agentsv1 "github.com/stepwise-run/stepwise/api/v1alpha1"
	"github.com/stepwise-run/stepwise/internal/render"
)

// agentPass is what one reconcile of an Agent observed and did. Status is
// derived from it alone.
type agentPass struct {
	// blocker says why nothing was applied.
	blocker *render.Blocker
	// err is a failure the controller retries.
	err error
	// applied is true when every owned object was applied.
	applied bool
	// lostClaim is the Flow type claim the Agent lost to another Agent.
	lostClaim string
	// deployment is the worker Deployment as the API server last returned
	// it; nil when it does not exist or was not observed.
	deployment *appsv1.Deployment
	// graph is the published Flow graph ConfigMap; nil when it does not
	// exist or was not observed.
	graph *corev1.ConfigMap
	// replicaSets are the ReplicaSets of the worker Deployment.
	replicaSets []appsv1.ReplicaSet
	// observed says which of deployment, graph and replicaSets this pass
	// read. Status keeps what a pass did not read as it was: a failed read
	// is not an absent object.
	observed observedWorkers
}

// observedWorkers says which parts of an Agent's workers a pass read.
type observedWorkers struct {
	deployment, graph, replicaSets bool
}

// agentStatus derives the Agent's status from its status before the pass
// and what the pass observed and did. What the pass did not observe keeps
// its earlier value: replicas, which an autoscaler reads through the scale
// subresource, the config digest, the worker versions, the Flow graph and
// WorkersAvailable.
func agentStatus(agent *agentsv1.Agent, pass agentPass) agentsv1.AgentStatus {
	status := *agent.Status.DeepCopy()
	status.Selector = render.Selector(agent.Name)
	// A pass succeeded when it reached a definite outcome, applied or
	// blocked until something it references changes, and nothing failed.
	if pass.err == nil && (pass.applied || pass.blocker != nil) {
		status.ObservedGeneration = agent.Generation
	}
	if pass.observed.deployment {
		status.Replicas, status.ReadyReplicas, status.ConfigDigest, status.TaskQueue = 0, 0, "", ""
		if d := pass.deployment; d != nil {
			status.Replicas = d.Status.Replicas
			status.ReadyReplicas = d.Status.ReadyReplicas
			status.ConfigDigest = d.Spec.Template.Annotations[render.AnnotationConfigDigest]
			status.TaskQueue = render.TaskQueue(agent.Spec.FlowType)
		}
		setWorkersAvailableCondition(&status, agent.Generation, pass.deployment)
	}
	if pass.observed.graph {
		status.SessionFlowGraph = nil
		if g := pass.graph; g != nil {
			status.SessionFlowGraph = &agentsv1.PublishedFlowGraph{
				ConfigMapName: g.Name,
				Digest:        g.Annotations[render.AnnotationGraphDigest],
			}
		}
	}
	if pass.observed.replicaSets {
		status.WorkerVersions = workerVersions(pass.replicaSets)
	}
	setAgentReadyCondition(&status, agent.Generation, pass)
	return status
}

func setAgentReadyCondition(status *agentsv1.AgentStatus, generation int64, pass agentPass) {
	if pass.blocker == nil && pass.err == nil && !pass.applied {
		return // the pass ended before it could tell; keep what is known
	}
	meta.SetStatusCondition(&status.Conditions, readyCondition(generation, pass.blocker, pass.err,
		"the worker configuration, ServiceAccount, Deployment and session Flow graph are applied"))
}

func setWorkersAvailableCondition(status *agentsv1.AgentStatus, generation int64, d *appsv1.Deployment) {
	c := metav1.Condition{Type: agentsv1.ConditionWorkersAvailable, ObservedGeneration: generation}
	switch {
	case d == nil:
		c.Status, c.Reason, c.Message = metav1.ConditionFalse, agentsv1.ReasonDeploymentNotCreated, "no worker Deployment exists"
	case d.Spec.Replicas != nil && *d.Spec.Replicas == 0:
		c.Status, c.Reason, c.Message = metav1.ConditionTrue, agentsv1.ReasonScaledToZero, "the Agent asks for zero workers"
	default:
		desired := int32(1)
		if d.Spec.Replicas != nil {
			desired = *d.Spec.Replicas
		}
		current := d.Status.ObservedGeneration >= d.Generation
		c.Message = fmt.Sprintf("%d of %d workers available", d.Status.AvailableReplicas, desired)
		if current && d.Status.AvailableReplicas >= desired && d.Status.UpdatedReplicas >= desired {
			c.Status, c.Reason = metav1.ConditionTrue, agentsv1.ReasonDeploymentAvailable
		} else {
			c.Status, c.Reason = metav1.ConditionFalse, agentsv1.ReasonDeploymentUnavailable
		}
	}
	meta.SetStatusCondition(&status.Conditions, c)
}

// workerVersions counts the pods of each engine version across the
// Deployment's ReplicaSets, in version order; ReplicaSets without pods are
// left out.
func workerVersions(replicaSets []appsv1.ReplicaSet) []agentsv1.WorkerVersion {
	byVersion := map[string]*agentsv1.WorkerVersion{}
	for _, rs := range replicaSets {
		if rs.Status.Replicas == 0 {
			continue
		}
		version := rs.Spec.Template.Labels[render.LabelEngineVersion]
		if version == "" {
			version = "unknown"
		}
		v, ok := byVersion[version]
		if !ok {
			v = &agentsv1.WorkerVersion{EngineVersion: version}
			byVersion[version] = v
		}
		v.Replicas += rs.Status.Replicas
		v.ReadyReplicas += rs.Status.ReadyReplicas
	}
	out := make([]agentsv1.WorkerVersion, 0, len(byVersion))
	for _, v := range byVersion {
		out = append(out, *v)
	}
	slices.SortFunc(out, func(a, b agentsv1.WorkerVersion) int { return strings.Compare(a.EngineVersion, b.EngineVersion) })
	if len(out) == 0 {
		return nil
	}
	return out
}
