package controller

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	agentsv1 "github.com/stepwise-run/stepwise/api/v1alpha1"
	"github.com/stepwise-run/stepwise/internal/hub"
	"github.com/stepwise-run/stepwise/internal/render"
)

// publishToken keeps the Agent's event hub publish token while it is
// signed by the current key for this Agent and far from its expiry, and
// signs a new one otherwise. It returns the Agent's live token Secret, or
// the one in the way of it, which applyOwnedSecret deletes once the Agent
// needs no token.
func (r *AgentReconciler) publishToken(ctx context.Context, agent *agentsv1.Agent, resolved *render.Resolved, pass *agentPass) (*corev1.Secret, error) {
	eventHub := resolved.EventHub
	live, err := r.ownedSecret(ctx, agent, render.EventHubSecretName(agent.Name), eventHub != nil)
	if err != nil || eventHub == nil {
		return live, err
	}
	var current string
	if live != nil {
		current = string(live.Data[render.EventHubTokenKey])
	}
	want := hub.PublishClaims{Namespace: agent.Namespace, Agent: agent.Name, AgentUID: string(agent.UID)}
	resolved.EventHubToken, pass.renewTokenAt = eventHub.Keys().Renew(current, want, r.now(), eventHub.TokenLifetime)
	return live, nil
}

// ownedSecret reads a Secret the Agent would own; nil when it does not
// exist, or when another owner has it and the Agent does not need it. One
// in the way of a Secret the Agent needs blocks it.
func (r *AgentReconciler) ownedSecret(ctx context.Context, agent *agentsv1.Agent, name string, needed bool) (*corev1.Secret, error) {
	secret := &corev1.Secret{}
	err := r.APIReader.Get(ctx, client.ObjectKey{Namespace: agent.Namespace, Name: name}, secret)
	switch {
	case apierrors.IsNotFound(err):
		return nil, nil
	case err != nil:
		return nil, fmt.Errorf("reading Secret %s: %w", name, err)
	case !isControlledBy(secret, agent):
		if needed {
			return nil, &render.Blocker{Reason: agentsv1.ReasonOwnedObjectConflict, Message: fmt.Sprintf(
				"Secret %q exists and is not owned by this Agent; the operator will not take it over: rename or delete it", name)}
		}
		return nil, nil
	}
	return secret, nil
}

// applyOwnedSecret writes a Secret the Agent owns, such as its publish
// token or its engine's credentials, or deletes the one it owns once it
// needs it no more, so no token of a retired hub key and no credential of
// an engine the Agent left lingers.
func (r *AgentReconciler) applyOwnedSecret(ctx context.Context, desired *corev1ac.SecretApplyConfiguration, live *corev1.Secret) error {
	if desired != nil {
		_, err := r.applyChanged(ctx, desired, live)
		return err
	}
	if live == nil {
		return nil
	}
	if err := r.Delete(ctx, live, client.Preconditions{UID: &live.UID}); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("deleting Secret %s: %w", live.Name, err)
	}
	return nil
}
