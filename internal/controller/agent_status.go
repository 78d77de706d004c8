package controller

import (
	"fmt"
	"slices"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	agentsv1 "github.com/stepwise-run/stepwise/api/v1alpha1"
	"github.com/stepwise-run/stepwise/internal/render"
	"github.com/stepwise-run/stepwise/internal/rollout"
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
	// renewTokenAt is when the Agent's publish token is due for renewal;
	// zero when it has none.
	renewTokenAt time.Time
	// lostClaim is the label of the claim the Agent lost to another Agent.
	lostClaim string
	// resolved is the Agent with its references checked; nil when the
	// pass did not get that far.
	resolved *render.Resolved
	// recheckShared says sessions still move off the shared names, and
	// sharedRetired that none is left and the Agent leaves them.
	recheckShared, sharedRetired bool
	// deployment is the worker Deployment as the API server last returned
	// it; nil when it does not exist or was not observed.
	deployment *appsv1.Deployment
	// graph is the published Flow graph ConfigMap; nil when it does not
	// exist or was not observed.
	graph *corev1.ConfigMap
	// replicaSets are the ReplicaSets of the worker Deployment.
	replicaSets []appsv1.ReplicaSet
	// workerSets are all the Agent's worker Deployments, the desired one
	// and the versions a rollout still runs or drains; nil when not read.
	workerSets []*appsv1.Deployment
	// agentReplicaSets are the ReplicaSets of all the Agent's worker
	// Deployments.
	agentReplicaSets []appsv1.ReplicaSet
	// rollout is the rollout step this pass planned; nil when the Agent
	// was not applied.
	rollout *rollout.Plan
	// desiredConfigMap is the worker configuration this pass rendered.
	desiredConfigMap string
	// spend is the agent budget's spend; nil without an agent budget.
	spend *agentsv1.SpendStatus
	// observed says which of deployment, graph and replicaSets this pass
	// read. Status keeps what a pass did not read as it was: a failed read
	// is not an absent object.
	observed observedWorkers
}

// observedWorkers says which parts of an Agent's workers a pass read.
type observedWorkers struct {
	deployment, graph, replicaSets, spend bool
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
		status.Replicas, status.ReadyReplicas, status.ConfigDigest = 0, 0, ""
		if d := pass.deployment; d != nil {
			status.Replicas = d.Status.Replicas
			status.ReadyReplicas = d.Status.ReadyReplicas
			status.ConfigDigest = d.Spec.Template.Annotations[render.AnnotationConfigDigest]
		}
		setWorkersAvailableCondition(&status, agent.Generation, pass.deployment, pass.rollout)
	}
	if r := pass.resolved; r != nil {
		setNames(&status, r, pass)
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
	switch plan := pass.rollout; {
	case plan != nil:
		status.WorkerVersions = workerVersionsOf(plan.Versions)
		status.RolloutStrategy = rolloutStrategy(agent.Status, plan)
		setRolloutConditions(&status, agent.Generation, plan)
	case pass.observed.replicaSets && pass.deployment != nil:
		status.WorkerVersions = workerVersionsOfReplicaSets(pass.deployment, pass.replicaSets, agent.Status.WorkerVersions)
	case pass.observed.replicaSets:
		status.WorkerVersions = nil
	}
	status.SessionFeatures = sessionFeatures(status.WorkerVersions)
	if pass.observed.spend {
		status.Spend = pass.spend
	}
	setAgentReadyCondition(&status, agent.Generation, pass)
	setStalledCondition(&status, agent.Generation, pass)
	return status
}

// setNames records the engine and the names the Agent's sessions run
// under. New sessions start under the desired workers' names once those
// take them (the rollout made them current, or nothing else is left), and
// until then where they started before. The shared names stay recorded
// while sessions run under them, and once left are never recorded again:
// no tenant writes status, so only an Agent whose sessions ran under them
// keeps them.
func setNames(status *agentsv1.AgentStatus, r *render.Resolved, pass agentPass) {
	status.EngineID = r.EngineID
	desired := r.Names.TaskQueue()
	taking := pass.rollout != nil && (pass.rollout.Phase == rollout.PhaseComplete || pass.rollout.Phase == rollout.PhaseDraining)
	if taking || status.TaskQueue == "" {
		status.TaskQueue = desired
	}
	switch {
	case r.Names.IsShared():
		status.SharedTaskQueue = desired
	case pass.sharedRetired:
		status.SharedTaskQueue = ""
	case r.SharedTaskQueue != "":
		status.SharedTaskQueue = r.SharedTaskQueue
	}
}

// rolloutStrategy is how the rollout to the desired version moves the
// workers. Once a stop-old-first rollout has stopped the old workers, the
// rest of it, starting the new ones, plans as rolling or versioned; it is
// still the stop-old-first rollout to that version.
func rolloutStrategy(before agentsv1.AgentStatus, plan *rollout.Plan) string {
	sameTarget := len(before.WorkerVersions) > 0 && len(plan.Versions) > 0 && before.WorkerVersions[0].BuildID == plan.Versions[0].BuildID
	startsNew := plan.Strategy == rollout.StrategyRolling || plan.Strategy == rollout.StrategyVersioned
	if startsNew && sameTarget && before.RolloutStrategy == string(rollout.StrategyStopOldFirst) {
		return before.RolloutStrategy
	}
	return string(plan.Strategy)
}

// setRolloutConditions reports the rollout's phase on Progressing and, for
// kstatus readers, Reconciling.
func setRolloutConditions(status *agentsv1.AgentStatus, generation int64, plan *rollout.Plan) {
	for _, t := range []string{agentsv1.ConditionProgressing, agentsv1.ConditionReconciling} {
		c := metav1.Condition{Type: t, ObservedGeneration: generation, Reason: string(plan.Phase), Message: plan.Message}
		if plan.Phase == rollout.PhaseComplete {
			c.Status, c.Reason, c.Message = metav1.ConditionFalse, agentsv1.ReasonRolloutComplete, "every desired worker is available and no other version runs"
		} else {
			c.Status = metav1.ConditionTrue
		}
		meta.SetStatusCondition(&status.Conditions, c)
	}
}

// setStalledCondition is True while the Agent waits for a change to what it
// references, with Ready's reason; a failed read or write leaves it as it
// was, since the controller retries.
func setStalledCondition(status *agentsv1.AgentStatus, generation int64, pass agentPass) {
	c := metav1.Condition{Type: agentsv1.ConditionStalled, ObservedGeneration: generation}
	switch {
	case pass.blocker != nil:
		c.Status, c.Reason, c.Message = metav1.ConditionTrue, pass.blocker.Reason, pass.blocker.Message
	case pass.err == nil && pass.applied:
		c.Status, c.Reason, c.Message = metav1.ConditionFalse, agentsv1.ReasonNotStalled, "nothing blocks the Agent"
	default:
		return
	}
	meta.SetStatusCondition(&status.Conditions, c)
}

// sessionFeatures are the features every listed version serves.
func sessionFeatures(versions []agentsv1.WorkerVersion) []string {
	engineVersions := make([]string, 0, len(versions))
	for _, v := range versions {
		engineVersions = append(engineVersions, v.EngineVersion)
	}
	var out []string
	for _, f := range rollout.FeaturesInEffect(engineVersions) {
		out = append(out, string(f))
	}
	return out
}

func workerVersionsOf(versions []rollout.VersionStatus) []agentsv1.WorkerVersion {
	out := make([]agentsv1.WorkerVersion, 0, len(versions))
	for _, v := range versions {
		out = append(out, agentsv1.WorkerVersion{
			BuildID: v.BuildID, EngineVersion: v.EngineVersion, Image: v.Image,
			Replicas: v.Replicas, ReadyReplicas: v.ReadyReplicas, TerminatingReplicas: v.TerminatingPods,
			State: agentsv1.WorkerVersionState(v.State), Since: metav1.NewTime(v.Since.UTC().Truncate(time.Second)),
		})
	}
	return out
}

func setAgentReadyCondition(status *agentsv1.AgentStatus, generation int64, pass agentPass) {
	if pass.blocker == nil && pass.err == nil && !pass.applied {
		return // the pass ended before it could tell; keep what is known
	}
	meta.SetStatusCondition(&status.Conditions, readyCondition(generation, pass.blocker, pass.err,
		"the worker configuration, ServiceAccount, Deployment and session Flow graph are applied"))
}

func setWorkersAvailableCondition(status *agentsv1.AgentStatus, generation int64, d *appsv1.Deployment, plan *rollout.Plan) {
	c := metav1.Condition{Type: agentsv1.ConditionWorkersAvailable, ObservedGeneration: generation}
	switch {
	case plan != nil && plan.Strategy == rollout.StrategyStopOldFirst && plan.Phase == rollout.PhaseWaitingForOldWorkersStopped:
		c.Status, c.Reason, c.Message = metav1.ConditionFalse, agentsv1.ReasonRolloutStoppedWorkers, plan.Message
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

// workerVersionsOfReplicaSets reports the versions of an Agent that was
// not applied this pass, from its Deployment's ReplicaSets: the template's
// version is current, the others drain. ReplicaSets without pods are left
// out.
func workerVersionsOfReplicaSets(d *appsv1.Deployment, replicaSets []appsv1.ReplicaSet, previous []agentsv1.WorkerVersion) []agentsv1.WorkerVersion {
	engineVersion, image := render.WorkerOf(d.Spec.Template.Labels, &d.Spec.Template.Spec)
	current := rollout.Worker{EngineVersion: engineVersion, Image: image}
	byID := map[string]*agentsv1.WorkerVersion{}
	var order []string
	for _, rs := range replicaSets {
		engineVersion, image := render.WorkerOf(rs.Spec.Template.Labels, &rs.Spec.Template.Spec)
		w := rollout.Worker{EngineVersion: engineVersion, Image: image}
		if rs.Status.Replicas == 0 && w != current {
			continue
		}
		id := w.BuildID()
		v, ok := byID[id]
		if !ok {
			v = &agentsv1.WorkerVersion{BuildID: id, EngineVersion: engineVersion, Image: image, State: agentsv1.WorkerVersionDraining}
			if w == current {
				v.State = agentsv1.WorkerVersionCurrent
			}
			for _, p := range previous {
				if p.BuildID == id && p.State == v.State {
					v.Since = p.Since
				}
			}
			if v.Since.IsZero() {
				v.Since = metav1.NewTime(time.Now().UTC().Truncate(time.Second))
			}
			byID[id] = v
			order = append(order, id)
		}
		v.Replicas += rs.Status.Replicas
		v.ReadyReplicas += rs.Status.ReadyReplicas
		if rs.Status.TerminatingReplicas != nil {
			v.TerminatingReplicas += *rs.Status.TerminatingReplicas
		}
	}
	out := make([]agentsv1.WorkerVersion, 0, len(order))
	for _, id := range order {
		out = append(out, *byID[id])
	}
	slices.SortStableFunc(out, func(a, b agentsv1.WorkerVersion) int {
		return boolOrder(b.State == agentsv1.WorkerVersionCurrent) - boolOrder(a.State == agentsv1.WorkerVersionCurrent)
	})
	if len(out) == 0 {
		return nil
	}
	return out
}

func boolOrder(b bool) int {
	if b {
		return 1
	}
	return 0
}
