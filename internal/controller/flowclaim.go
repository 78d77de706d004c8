package controller

import (
	"context"
	"fmt"

	"sigs.k8s.io/controller-runtime/pkg/client"

	agentsv1 "github.com/stepwise-run/stepwise/api/v1alpha1"
	"github.com/stepwise-run/stepwise/internal/flowclaim"
	"github.com/stepwise-run/stepwise/internal/render"
	"github.com/stepwise-run/stepwise/internal/tenancy"
)

// claimsOf are the claims a resolved Agent's workers make: its names on
// its engine, and the shared names as well while they move the Agent's
// sessions from them.
func claimsOf(r *render.Resolved) []flowclaim.Claim {
	claims := []flowclaim.Claim{{EngineID: r.EngineID, Names: r.Names}}
	if r.SharedTaskQueue != "" {
		claims = append(claims, flowclaim.Claim{EngineID: r.EngineID, Names: tenancy.Shared(r.Agent.Spec.FlowType)})
	}
	return claims
}

// checkFlowClaim refuses an Agent when another Agent runs workers for the
// same names on the same engine. The Agent that runs them keeps them,
// whatever its age; when none does, the claim goes to the Agent that
// reaches this check first, which is the first whose references all
// resolve. The message names no other Agent: under the shared names the
// holder may be another namespace's.
func (r *AgentReconciler) checkFlowClaim(ctx context.Context, agent *agentsv1.Agent, claim flowclaim.Claim) error {
	holders, err := flowclaim.Holders(ctx, r.Client, claim)
	if err != nil || len(holders) == 0 {
		return err
	}
	winner := flowclaim.Elect(holders)
	if winner.Key == client.ObjectKeyFromObject(agent) {
		return nil
	}
	holder := "another Agent of this namespace"
	if claim.Names.IsShared() {
		holder = "another Agent"
	}
	return &render.Blocker{Reason: agentsv1.ReasonFlowTypeConflict, Message: fmt.Sprintf(
		"%s already runs workers for Flow type %q on this engine (task queue %s); the first claimant keeps its workers",
		holder, agent.Spec.FlowType, claim.Names.TaskQueue())}
}
