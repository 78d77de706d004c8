// Package controller holds the operator's reconcilers: of Agents,
// ToolSources, MediaStores and ClusterEngines, and the publisher of the
// gateway's application token grants. They read the cluster, hand what
// they read to the pure packages (render, rollout, session, flowclaim),
// apply the result with server-side apply, and write status once per pass.
package controller

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	agentsv1 "github.com/stepwise-run/stepwise/api/v1alpha1"
	"github.com/stepwise-run/stepwise/internal/flowclaim"
	"github.com/stepwise-run/stepwise/internal/render"
	"github.com/stepwise-run/stepwise/internal/tenancy"
)

// Field indexes, so a change to a referenced object finds the objects that
// reference it without listing everything.
const (
	// indexAgentToolSource: an Agent by the names of its ToolSources.
	indexAgentToolSource = "agents.stepwise.run/tool-source"
	// indexAgentMediaStore: an Agent by the name of its MediaStore.
	indexAgentMediaStore = "agents.stepwise.run/media-store"
	// indexSecret: an Agent, ToolSource or MediaStore by the Secrets it
	// references itself (an Agent's engine included).
	indexSecret = "agents.stepwise.run/secret"
	// indexAgentFlowClaim: an Agent by the claims its status says it makes,
	// cluster-wide.
	indexAgentFlowClaim = "agents.stepwise.run/flow-claim"
	// indexAgentClusterEngine: an Agent by the ClusterEngine it uses.
	indexAgentClusterEngine = "agents.stepwise.run/cluster-engine"
	// indexClusterEngineSecret: a ClusterEngine by the Secrets, in the
	// operator's namespace, it takes values from.
	indexClusterEngineSecret = "agents.stepwise.run/cluster-engine-secret"
)

// SetupIndexes registers every field index the reconcilers use.
func SetupIndexes(ctx context.Context, mgr ctrl.Manager, defaults render.Defaults) error {
	indexer := mgr.GetFieldIndexer()
	indexes := []struct {
		obj     client.Object
		field   string
		extract client.IndexerFunc
	}{
		{&agentsv1.Agent{}, indexAgentToolSource, func(o client.Object) []string {
			var names []string
			for _, ref := range o.(*agentsv1.Agent).Spec.ToolSources {
				names = append(names, ref.Name)
			}
			return names
		}},
		{&agentsv1.Agent{}, indexAgentMediaStore, func(o client.Object) []string {
			if ref := o.(*agentsv1.Agent).Spec.MediaStore; ref != nil {
				return []string{ref.Name}
			}
			return nil
		}},
		{&agentsv1.Agent{}, indexSecret, func(o client.Object) []string {
			return secretNames(render.AgentSecretUses(o.(*agentsv1.Agent)))
		}},
		{&agentsv1.Agent{}, indexAgentFlowClaim, func(o client.Object) []string {
			return statusClaims(o.(*agentsv1.Agent))
		}},
		{&agentsv1.Agent{}, indexAgentClusterEngine, func(o client.Object) []string {
			if name := render.ClusterEngineName(o.(*agentsv1.Agent), defaults); name != "" {
				return []string{name}
			}
			return nil
		}},
		{&agentsv1.ClusterEngine{}, indexClusterEngineSecret, func(o client.Object) []string {
			return secretNames(render.EngineSecretUses("", render.ClusterEngineSpecOf(o.(*agentsv1.ClusterEngine))))
		}},
		{&agentsv1.ToolSource{}, indexSecret, func(o client.Object) []string {
			return secretNames(render.ToolSourceSecretUses(o.(*agentsv1.ToolSource), ""))
		}},
		{&agentsv1.MediaStore{}, indexSecret, func(o client.Object) []string {
			return secretNames(render.MediaStoreSecretUses(o.(*agentsv1.MediaStore), ""))
		}},
	}
	for _, ix := range indexes {
		if err := indexer.IndexField(ctx, ix.obj, ix.field, ix.extract); err != nil {
			return fmt.Errorf("indexing %T by %s: %w", ix.obj, ix.field, err)
		}
	}
	return nil
}

// statusClaims are the claims an Agent makes as its status records them:
// the engine the operator found, its own names there, and the shared names
// while its sessions run under them. A rival waiting for a claim is
// woken when the claim's holder lets it go.
func statusClaims(agent *agentsv1.Agent) []string {
	id := agent.Status.EngineID
	if id == "" {
		return nil
	}
	claims := []string{flowclaim.Claim{EngineID: id, Names: tenancy.Tenant(agent.Namespace, agent.Spec.FlowType)}.Label()}
	if flowclaim.KeepsSharedNames(agent) {
		claims = append(claims, flowclaim.Claim{EngineID: id, Names: tenancy.Shared(agent.Spec.FlowType)}.Label())
	}
	return claims
}

func secretNames(uses []render.SecretUse) []string {
	set := map[string]bool{}
	for _, u := range uses {
		set[u.Secret] = true
	}
	return keys(set)
}

func keys(set map[string]bool) []string {
	out := make([]string, 0, len(set))
	for k := range set {
		out = append(out, k)
	}
	return out
}

// secretsByName reads the named Secrets; a missing one is left out.
func secretsByName(ctx context.Context, reader client.Reader, namespace string, names []string) (map[string]*corev1.Secret, error) {
	out := map[string]*corev1.Secret{}
	for _, name := range names {
		if _, seen := out[name]; seen {
			continue
		}
		secret := &corev1.Secret{}
		if err := reader.Get(ctx, client.ObjectKey{Namespace: namespace, Name: name}, secret); err != nil {
			if client.IgnoreNotFound(err) != nil {
				return nil, fmt.Errorf("reading Secret %s/%s: %w", namespace, name, err)
			}
			continue
		}
		out[name] = secret
	}
	return out, nil
}
