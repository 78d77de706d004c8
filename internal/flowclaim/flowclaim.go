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
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"slices"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	agentsv1 "github.com/stepwise-run/stepwise/api/v1alpha1"
	"github.com/stepwise-run/stepwise/internal/tenancy"
)

// The labels that find a claim's holders. What a label says is checked
// against the Agent that controls the Deployment, never believed alone.
const (
	// LabelFlowClaim marks an Agent's worker Deployment with the claim of
	// the names its workers serve.
	LabelFlowClaim = "agents.stepwise.run/flow-claim"
	// LabelSharedFlowClaim marks a worker Deployment whose workers also
	// serve the shared names, moving the Agent's sessions from them.
	LabelSharedFlowClaim = "agents.stepwise.run/shared-flow-claim"
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

// Label is the claim's label value on the Deployments that serve it: at
// most one Agent may run workers for it. The engine is named by its own
// ID, so two addresses of one engine make one claim.
func (c Claim) Label() string {
	sum := sha256.Sum256([]byte(c.EngineID + "\x00" + c.Names.TaskQueue()))
	return hex.EncodeToString(sum[:16])
}

// OfWorkers are the claims an Agent's workers make on an engine: its own
// names there, and the shared names as well while the workers move the
// Agent's sessions from them. The first is labeled LabelFlowClaim, the
// second LabelSharedFlowClaim.
func OfWorkers(engineID string, names tenancy.Names, servesShared bool) []Claim {
	claims := []Claim{{EngineID: engineID, Names: names}}
	if servesShared {
		claims = append(claims, Claim{EngineID: engineID, Names: tenancy.Shared(names.FlowType)})
	}
	return claims
}

// Labels are the labels of a worker Deployment whose workers make claims,
// as OfWorkers gives them.
func Labels(claims []Claim) map[string]string {
	labels := map[string]string{}
	for i, key := range []string{LabelFlowClaim, LabelSharedFlowClaim} {
		if i < len(claims) {
			labels[key] = claims[i].Label()
		}
	}
	return labels
}

// KeepsSharedNames says whether an Agent's sessions run under the shared
// names: the status this operator writes says so, or an earlier operator,
// which knew only the shared names, gave its workers their task queue.
// No tenant writes an Agent's status, so no namespace can claim them.
func KeepsSharedNames(agent *agentsv1.Agent) bool {
	shared := tenancy.Shared(agent.Spec.FlowType).TaskQueue()
	return agent.Status.SharedTaskQueue == shared || agent.Status.TaskQueue == shared
}

// Refusal is what an Agent that lost a claim is told. It names no other
// Agent: under the shared names the holder may be another namespace's.
func Refusal(agent *agentsv1.Agent, claim Claim) string {
	holder := "another Agent of this namespace"
	if claim.Names.IsShared() {
		holder = "another Agent"
	}
	return fmt.Sprintf("%s already runs workers for Flow type %q on this engine (task queue %s); the first claimant keeps its workers",
		holder, agent.Spec.FlowType, claim.Names.TaskQueue())
}

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
	for _, label := range []string{LabelFlowClaim, LabelSharedFlowClaim} {
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
		return KeepsSharedNames(agent)
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
