package controller

import (
	"context"
	"fmt"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	agentsv1 "github.com/stepwise-run/stepwise/api/v1alpha1"
	"github.com/stepwise-run/stepwise/internal/flowclaim"
	"github.com/stepwise-run/stepwise/internal/render"
)

// liveWorker is what exists of an Agent's applied worker objects; each is
// nil when absent.
type liveWorker struct {
	serviceAccount   *corev1.ServiceAccount
	configMap        *corev1.ConfigMap
	deployment       *appsv1.Deployment
	disruptionBudget *policyv1.PodDisruptionBudget
	networkPolicy    *networkingv1.NetworkPolicy
	eventHubSecret   *corev1.Secret
	engineSecret     *corev1.Secret
}

// checkOwnership refuses to apply over an object of the same name that the
// Agent does not control, such as a team's own Deployment: server-side apply
// with force would otherwise take it over. It returns the worker objects
// that exist.
func (r *AgentReconciler) checkOwnership(ctx context.Context, agent *agentsv1.Agent, worker *render.WorkerObjects) (liveWorker, error) {
	type owned struct {
		kind, name string
		obj        client.Object
	}
	configMap, deployment, serviceAccount := &corev1.ConfigMap{}, &appsv1.Deployment{}, &corev1.ServiceAccount{}
	budget := &policyv1.PodDisruptionBudget{}
	policy := &networkingv1.NetworkPolicy{}
	objects := []owned{
		{"ConfigMap", *worker.ConfigMap.Name, configMap},
		{"ConfigMap", render.GraphConfigMapName(agent.Name), &corev1.ConfigMap{}},
		{"Deployment", render.WorkerName(agent.Name), deployment},
		{"PodDisruptionBudget", render.DisruptionBudgetName(agent.Name), budget},
	}
	if worker.ServiceAccount != nil {
		objects = append(objects, owned{"ServiceAccount", *worker.ServiceAccount.Name, serviceAccount})
	}
	if worker.NetworkPolicy != nil {
		objects = append(objects, owned{"NetworkPolicy", *worker.NetworkPolicy.Name, policy})
	}
	exists := map[client.Object]bool{}
	for _, o := range objects {
		key := client.ObjectKey{Namespace: agent.Namespace, Name: o.name}
		err := r.Get(ctx, key, o.obj)
		if apierrors.IsNotFound(err) {
			// The cache holds only the objects the operator labels.
			err = r.APIReader.Get(ctx, key, o.obj)
		}
		switch {
		case apierrors.IsNotFound(err):
			continue
		case err != nil:
			return liveWorker{}, fmt.Errorf("reading %s %s: %w", o.kind, key.Name, err)
		case !isControlledBy(o.obj, agent):
			return liveWorker{}, &render.Blocker{Reason: agentsv1.ReasonOwnedObjectConflict, Message: fmt.Sprintf(
				"%s %q exists and is not owned by this Agent; the operator will not take it over: rename or delete it", o.kind, key.Name)}
		}
		exists[o.obj] = true
	}
	var live liveWorker
	if exists[configMap] {
		live.configMap = configMap
	}
	if exists[deployment] {
		live.deployment = deployment
	}
	if exists[serviceAccount] {
		live.serviceAccount = serviceAccount
	}
	if exists[budget] {
		live.disruptionBudget = budget
	}
	if exists[policy] {
		live.networkPolicy = policy
	}
	// The operator caches Secrets by metadata only, so its own Secrets are
	// read from the API server.
	var err error
	if live.engineSecret, err = r.ownedSecret(ctx, agent, render.EngineSecretName(agent.Name), worker.EngineSecret != nil); err != nil {
		return liveWorker{}, err
	}
	return live, nil
}

// checkFlowClaim refuses an Agent when another Agent runs workers for the
// same names on the same engine. The Agent that runs them keeps them,
// whatever its age; when none does, the claim goes to the Agent that
// reaches this check first, which is the first whose references all
// resolve.
func (r *AgentReconciler) checkFlowClaim(ctx context.Context, agent *agentsv1.Agent, claim flowclaim.Claim) error {
	holder, held, err := flowclaim.Holder(ctx, r.Client, claim)
	if err != nil || !held || holder == client.ObjectKeyFromObject(agent) {
		return err
	}
	return &render.Blocker{Reason: agentsv1.ReasonFlowTypeConflict, Message: flowclaim.Refusal(agent, claim)}
}

func isControlledBy(obj, owner client.Object) bool {
	ref := metav1.GetControllerOf(obj)
	return ref != nil && ref.UID == owner.GetUID()
}
