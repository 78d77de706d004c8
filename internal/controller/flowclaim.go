package controller

import (
	"context"
	"fmt"
	"slices"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	agentsv1 "github.com/stepwise-run/stepwise/api/v1alpha1"
	"github.com/stepwise-run/stepwise/internal/render"
)

// claimant is an Agent whose worker Deployment serves a Flow type claim.
type claimant struct {
	key     types.NamespacedName
	created metav1.Time
}

// electClaimant picks, among Agents that all run workers for one claim, the
// one that keeps them: the oldest, then the first by namespace and name, so
// every pass and every replica of the operator picks the same one. Two
// holders happen only when two Agents claimed at the same time.
func electClaimant(holders []claimant) claimant {
	return slices.MinFunc(holders, func(a, b claimant) int {
		if !a.created.Equal(&b.created) {
			if a.created.Before(&b.created) {
				return -1
			}
			return 1
		}
		return strings.Compare(a.key.String(), b.key.String())
	})
}

// checkFlowClaim refuses an Agent when another Agent runs workers for the
// same Flow type on the same engine namespace. The Agent that runs them
// keeps them, whatever its age; when none does, the claim goes to the Agent
// that reaches this check first, which is the first whose references all
// resolve.
func (r *AgentReconciler) checkFlowClaim(ctx context.Context, agent *agentsv1.Agent, engine agentsv1.EngineSpec, claim string) error {
	holders, err := r.claimHolders(ctx, claim)
	if err != nil || len(holders) == 0 {
		return err
	}
	winner := electClaimant(holders)
	if winner.key == client.ObjectKeyFromObject(agent) {
		return nil
	}
	return &render.Blocker{Reason: agentsv1.ReasonFlowTypeConflict, Message: fmt.Sprintf(
		"Agent %s already runs workers for Flow type %q on engine %s namespace %q; the first claimant keeps its workers",
		winner.key, agent.Spec.FlowType, engine.Address, engine.Namespace)}
}

// claimHolders lists the live Agents whose worker Deployments serve a claim.
// The Deployment's label, not the Agent's spec, says what its workers serve
// now: an Agent whose spec moved on still holds its old claim until its new
// workers are applied.
func (r *AgentReconciler) claimHolders(ctx context.Context, claim string) ([]claimant, error) {
	var deployments appsv1.DeploymentList
	if err := r.List(ctx, &deployments, client.MatchingLabels{render.LabelFlowClaim: claim}); err != nil {
		return nil, fmt.Errorf("listing worker Deployments of a Flow type claim: %w", err)
	}
	var holders []claimant
	for i := range deployments.Items {
		owner, err := controllingAgent(ctx, r.Client, &deployments.Items[i])
		if err != nil {
			return nil, err
		}
		if owner != nil {
			holders = append(holders, claimant{key: client.ObjectKeyFromObject(owner), created: owner.CreationTimestamp})
		}
	}
	return holders, nil
}

// controllingAgent returns the live Agent that controls an object, or nil.
func controllingAgent(ctx context.Context, c client.Reader, obj client.Object) (*agentsv1.Agent, error) {
	ref := metav1.GetControllerOf(obj)
	if ref == nil || ref.Kind != "Agent" || ref.APIVersion != agentsv1.GroupVersion.String() {
		return nil, nil
	}
	agent := &agentsv1.Agent{}
	err := c.Get(ctx, client.ObjectKey{Namespace: obj.GetNamespace(), Name: ref.Name}, agent)
	switch {
	case apierrors.IsNotFound(err):
		return nil, nil
	case err != nil:
		return nil, fmt.Errorf("reading Agent %s: %w", ref.Name, err)
	case agent.UID != ref.UID || !agent.DeletionTimestamp.IsZero():
		return nil, nil // a deleted Agent's workers are on their way out
	}
	return agent, nil
}
