// Package flowclaim says which Agent holds a claim of names on an engine.
// An Agent's names on the engine carry its Kubernetes namespace and Flow
// type (internal/tenancy), so a claim is contested only within one
// namespace; the names workers of engine 0.7.0 and earlier share are the
// exception, contested across namespaces. The operator refuses every Agent
// but the holder, and the gateway serves only the holder.
//
// A claim is keyed by the engine's own ID of its Temporal namespace, never
// by the address an Agent spells, and held only by workers whose
// Deployment an Agent controls that claims the same names on the same
// engine itself: a label on a Deployment finds candidates, and the
// controlling Agent decides.
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
	"github.com/stepwise-run/stepwise/internal/tenancy"
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

// Claim is a claim of names on one engine.
type Claim struct {
	// EngineID is the engine's ID of its Temporal namespace.
	EngineID string
	Names    tenancy.Names
}

// Label is the claim's label value on the Deployments that serve it.
func (c Claim) Label() string { return render.FlowClaim(c.EngineID, c.Names) }

// Holders lists the live Agents whose worker Deployments serve a claim.
// The Deployment's label, not the Agent's spec, says which names its
// workers serve now: an Agent whose spec moved on still holds its old
// claim until its new workers are applied. But the label alone holds
// nothing: the Deployment must be controlled by an Agent of the claim's
// Flow type, which the operator found on the claim's engine, and, for
// names of a namespace, in that namespace; and for the shared names, an
// Agent whose sessions run under them.
func Holders(ctx context.Context, c client.Reader, claim Claim) ([]Claimant, error) {
	var opts []client.ListOption
	if !claim.Names.IsShared() {
		opts = append(opts, client.InNamespace(claim.Names.Namespace))
	}
	seen := map[types.NamespacedName]bool{}
	var holders []Claimant
	for _, label := range []string{render.LabelFlowClaim, render.LabelSharedFlowClaim} {
		var deployments appsv1.DeploymentList
		if err := c.List(ctx, &deployments, append(opts, client.MatchingLabels{label: claim.Label()})...); err != nil {
			return nil, fmt.Errorf("listing worker Deployments of a Flow type claim: %w", err)
		}
		for i := range deployments.Items {
			owner, err := ControllingAgent(ctx, c, &deployments.Items[i])
			if err != nil {
				return nil, err
			}
			if owner == nil || !mayHold(owner, claim) {
				continue
			}
			key := client.ObjectKeyFromObject(owner)
			if seen[key] {
				continue
			}
			seen[key] = true
			holders = append(holders, Claimant{Key: key, Created: owner.CreationTimestamp})
		}
	}
	return holders, nil
}

// mayHold says whether an Agent is one that could have made a claim: of its
// Flow type, on its engine as the operator found it, and of names it may
// have.
func mayHold(agent *agentsv1.Agent, claim Claim) bool {
	switch {
	case agent.Spec.FlowType != claim.Names.FlowType || agent.Status.EngineID != claim.EngineID:
		return false
	case claim.Names.IsShared():
		return render.KeepsSharedNames(agent)
	}
	return agent.Namespace == claim.Names.Namespace
}

// Holder returns the Agent that holds a claim; ok is false when no Agent
// runs workers for it.
func Holder(ctx context.Context, c client.Reader, claim Claim) (holder types.NamespacedName, ok bool, err error) {
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
