package controller

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	agentsv1 "github.com/stepwise-run/stepwise/api/v1alpha1"
	"github.com/stepwise-run/stepwise/internal/render"
	"github.com/stepwise-run/stepwise/internal/session"
)

// publishGraph writes the Flow graph ConfigMap only when the published
// document differs from the graph, and returns it as published.
func (r *AgentReconciler) publishGraph(ctx context.Context, agent *agentsv1.Agent, graph *render.PublishedGraph) (*corev1.ConfigMap, error) {
	current := &corev1.ConfigMap{}
	err := r.Get(ctx, client.ObjectKey{Namespace: agent.Namespace, Name: render.GraphConfigMapName(agent.Name)}, current)
	switch {
	case err == nil && isControlledBy(current, agent) &&
		current.Annotations[render.AnnotationGraphDigest] == graph.Digest &&
		session.Digest([]byte(current.Data[render.GraphFileName])) == graph.Digest:
		return current, nil
	case err != nil && !apierrors.IsNotFound(err):
		return nil, fmt.Errorf("reading the session Flow graph ConfigMap: %w", err)
	}
	if err := r.apply(ctx, graph.ConfigMap); err != nil {
		return nil, err
	}
	return render.Convert[corev1.ConfigMap](graph.ConfigMap)
}

// applyChanged applies an owned object unless live, the object as read,
// already holds exactly the fields this operator would apply: such an
// apply would change nothing, so a pass where nothing changed sends no
// request. It reports whether it applied.
func (r *AgentReconciler) applyChanged(ctx context.Context, obj applyConfiguration, live client.Object) (bool, error) {
	unchanged, err := appliedAlready(obj, live)
	if err != nil {
		return false, err
	}
	if unchanged {
		return false, nil
	}
	return true, r.apply(ctx, obj)
}

// applyConfiguration is an apply configuration the client can apply.
type applyConfiguration interface {
	IsApplyConfiguration()
}

// apply writes an owned object with server-side apply. The API server
// refusing the object is a spec the schema could not catch: a blocker, not
// something to retry.
func (r *AgentReconciler) apply(ctx context.Context, obj applyConfiguration) error {
	err := r.Apply(ctx, obj, client.FieldOwner(render.FieldOwner), client.ForceOwnership)
	switch {
	case apierrors.IsInvalid(err):
		return &render.Blocker{Reason: agentsv1.ReasonInvalidSpec, Message: fmt.Sprintf("the API server refused the rendered %T: %v", obj, err)}
	case err != nil:
		return fmt.Errorf("applying %T: %w", obj, err)
	}
	return nil
}
