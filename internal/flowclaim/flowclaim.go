// Package flowclaim says which Agent holds a Flow type on an engine
// namespace. Session IDs are unique per engine namespace, so the Agent that
// holds a Flow type is the only one whose workers, and whose callers, may
// reach that Flow type's sessions; the operator refuses every other Agent
// that claims it, and the gateway serves only the holder.
package flowclaim

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

// Claimant is an Agent whose worker Deployment serves a Flow type claim.
type Claimant struct {
	Key     types.NamespacedName
	Created metav1.Time
}

// Elect picks, among Agents that all run workers for one claim, the one
// that keeps them: the oldest, then the first by namespace and name, so
// every pass and every replica picks the same one. Two holders happen only
// when two Agents claimed at the same time.
func Elect(holders []Claimant) Claimant {
	return slices.MinFunc(holders, func(a, b Claimant) int {
		if !a.Created.Equal(&b.Created) {
			if a.Created.Before(&b.Created) {
				return -1
			}
			return 1
		}
		return strings.Compare(a.Key.String(), b.Key.String())
	})
}

// Holders lists the live Agents whose worker Deployments serve a claim.
// The Deployment's label, not the Agent's spec, says what its workers serve
// now: an Agent whose spec moved on still holds its old claim until its new
// workers are applied.
func Holders(ctx context.Context, c client.Reader, claim string) ([]Claimant, error) {
	var deployments appsv1.DeploymentList
	if err := c.List(ctx, &deployments, client.MatchingLabels{render.LabelFlowClaim: claim}); err != nil {
		return nil, fmt.Errorf("listing worker Deployments of a Flow type claim: %w", err)
	}
	var holders []Claimant
	for i := range deployments.Items {
		owner, err := ControllingAgent(ctx, c, &deployments.Items[i])
		if err != nil {
			return nil, err
		}
		if owner != nil {
			holders = append(holders, Claimant{Key: client.ObjectKeyFromObject(owner), Created: owner.CreationTimestamp})
		}
	}
	return holders, nil
}

// Holder returns the Agent that holds a claim; ok is false when no Agent
// runs workers for it.
func Holder(ctx context.Context, c client.Reader, claim string) (holder types.NamespacedName, ok bool, err error) {
	holders, err := Holders(ctx, c, claim)
	if err != nil || len(holders) == 0 {
		return types.NamespacedName{}, false, err
	}
	return Elect(holders).Key, true, nil
}

// ControllingAgent returns the live Agent that controls an object, or nil.
func ControllingAgent(ctx context.Context, c client.Reader, obj client.Object) (*agentsv1.Agent, error) {
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
