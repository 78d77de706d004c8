package controller

import (
	"context"
	"fmt"

	"sigs.k8s.io/controller-runtime/pkg/client"

	agentsv1 "github.com/stepwise-run/stepwise/api/v1alpha1"
	"github.com/stepwise-run/stepwise/internal/flowclaim"
	"github.com/stepwise-run/stepwise/internal/render"
)

// checkFlowClaim refuses an Agent when another Agent runs workers for the
// same Flow type on the same engine namespace. The Agent that runs them
// keeps them, whatever its age; when none does, the claim goes to the Agent
// that reaches this check first, which is the first whose references all
// resolve.
func (r *AgentReconciler) checkFlowClaim(ctx context.Context, agent *agentsv1.Agent, engine agentsv1.EngineSpec, claim string) error {
	holders, err := flowclaim.Holders(ctx, r.Client, claim)
	if err != nil || len(holders) == 0 {
		return err
	}
	winner := flowclaim.Elect(holders)
	if winner.Key == client.ObjectKeyFromObject(agent) {
		return nil
	}
	return &render.Blocker{Reason: agentsv1.ReasonFlowTypeConflict, Message: fmt.Sprintf(
		"Agent %s already runs workers for Flow type %q on engine %s namespace %q; the first claimant keeps its workers",
		winner.Key, agent.Spec.FlowType, engine.Address, engine.Namespace)}
}
