package controller

import (
	"context"
	"fmt"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	agentsv1 "github.com/stepwise-run/stepwise/api/v1alpha1"
	"github.com/stepwise-run/stepwise/internal/flowclaim"
	"github.com/stepwise-run/stepwise/internal/render"
)

// observeWorkers reads, for status, the worker Deployment and the graph
// ConfigMap that this pass did not apply, and the Deployment's ReplicaSets,
// and records in pass.observed what it read.
func (r *AgentReconciler) observeWorkers(ctx context.Context, agent *agentsv1.Agent, pass *agentPass) error {
	if !pass.observed.graph {
		graph := &corev1.ConfigMap{}
		found, err := r.getOwned(ctx, agent, render.GraphConfigMapName(agent.Name), graph)
		if err != nil {
			return err
		}
		if found {
			pass.graph = graph
		}
		pass.observed.graph = true
	}
	if !pass.observed.deployment {
		deployment, err := r.readDesiredDeployment(ctx, agent)
		if err != nil {
			return err
		}
		pass.deployment = deployment
		pass.observed.deployment = true
	}
	var replicaSets appsv1.ReplicaSetList
	if err := r.List(ctx, &replicaSets, client.InNamespace(agent.Namespace), client.MatchingLabels(render.SelectorLabels(agent.Name))); err != nil {
		return fmt.Errorf("listing the worker ReplicaSets: %w", err)
	}
	pass.agentReplicaSets = replicaSets.Items
	for _, rs := range replicaSets.Items {
		if pass.deployment != nil && isControlledBy(&rs, pass.deployment) {
			pass.replicaSets = append(pass.replicaSets, rs)
		}
	}
	pass.observed.replicaSets = true
	return nil
}

// readDesiredDeployment reads the worker Deployment of the version the
// status names first, the one the last applied pass desired: a versioned
// one by its build ID, else the unversioned one.
func (r *AgentReconciler) readDesiredDeployment(ctx context.Context, agent *agentsv1.Agent) (*appsv1.Deployment, error) {
	names := []string{render.WorkerName(agent.Name)}
	if versions := agent.Status.WorkerVersions; len(versions) > 0 && versions[0].BuildID != "" {
		names = []string{render.VersionedWorkerName(agent.Name, versions[0].BuildID), render.WorkerName(agent.Name)}
	}
	for _, name := range names {
		deployment := &appsv1.Deployment{}
		found, err := r.getOwned(ctx, agent, name, deployment)
		if err != nil {
			return nil, err
		}
		if found {
			return deployment, nil
		}
	}
	return nil, nil
}

// getOwned reads an object the Agent controls; found is false when it does
// not exist or something else controls it.
func (r *AgentReconciler) getOwned(ctx context.Context, agent *agentsv1.Agent, name string, obj client.Object) (found bool, err error) {
	err = r.Get(ctx, client.ObjectKey{Namespace: agent.Namespace, Name: name}, obj)
	switch {
	case apierrors.IsNotFound(err):
		return false, nil
	case err != nil:
		return false, fmt.Errorf("reading %T %s: %w", obj, name, err)
	}
	return isControlledBy(obj, agent), nil
}

// pruneConfigMaps deletes the Agent's worker configurations that neither the
// Deployment nor any of its ReplicaSets names. A ReplicaSet keeps its
// configuration, so its pods during a rollout and a rollback to it both
// find theirs.
func (r *AgentReconciler) pruneConfigMaps(ctx context.Context, agent *agentsv1.Agent, pass *agentPass) error {
	var configs corev1.ConfigMapList
	if err := r.List(ctx, &configs, client.InNamespace(agent.Namespace), client.MatchingLabels{
		render.LabelAgent: agent.Name, render.LabelComponent: render.ComponentWorkerConfig,
	}); err != nil {
		return fmt.Errorf("listing worker configurations: %w", err)
	}
	// The configuration a waiting rollout will start its workers with is
	// kept too, and those of every worker set a rollout still runs.
	inUse := map[string]bool{pass.desiredConfigMap: true}
	for _, d := range append([]*appsv1.Deployment{pass.deployment}, pass.workerSets...) {
		if d != nil {
			inUse[render.ConfigMapOf(&d.Spec.Template)] = true
		}
	}
	for _, rs := range pass.agentReplicaSets {
		inUse[render.ConfigMapOf(&rs.Spec.Template)] = true
	}
	for i := range configs.Items {
		cm := &configs.Items[i]
		if inUse[cm.Name] || !isControlledBy(cm, agent) {
			continue
		}
		err := r.Delete(ctx, cm, client.Preconditions{UID: &cm.UID})
		if err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("deleting worker configuration %s that no ReplicaSet uses: %w", cm.Name, err)
		}
	}
	return nil
}

// keepScale follows spec.workers.replicas on the existing Deployment while
// the Agent is blocked, so an autoscaler or kubectl scale still works; it
// scales to zero the workers of an Agent that lost a claim it was running,
// and every worker of an Agent that may no longer use its engine, whose
// credentials it also takes back. Nothing else of a blocked Agent is
// applied.
func (r *AgentReconciler) keepScale(ctx context.Context, agent *agentsv1.Agent, pass *agentPass) error {
	revoked := pass.blocker.Reason == agentsv1.ReasonEngineNotAllowed
	if pass.lostClaim != "" || revoked {
		sets, err := r.listWorkerSets(ctx, agent, nil)
		if err != nil {
			return err
		}
		for _, d := range sets.all() {
			if revoked || d.Labels[flowclaim.LabelFlowClaim] == pass.lostClaim || d.Labels[flowclaim.LabelSharedFlowClaim] == pass.lostClaim {
				if err := r.scaleDeployment(ctx, d, 0); err != nil {
					return err
				}
			}
		}
	}
	if revoked {
		secret, err := r.ownedSecret(ctx, agent, render.EngineSecretName(agent.Name), false)
		if err != nil {
			return err
		}
		return r.applyOwnedSecret(ctx, nil, secret)
	}
	d := pass.deployment
	if d == nil || (pass.lostClaim != "" && (d.Labels[flowclaim.LabelFlowClaim] == pass.lostClaim || d.Labels[flowclaim.LabelSharedFlowClaim] == pass.lostClaim)) {
		return nil
	}
	return r.scaleDeployment(ctx, d, render.DesiredReplicas(agent))
}
