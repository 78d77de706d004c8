package controller

import (
	"context"
	"fmt"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/labels"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/stepwise-run/stepwise/internal/render"
)

// CacheOptions limits the manager's cache of built-in kinds to the objects
// the operator manages, so it never holds every ConfigMap or Deployment of
// a large cluster. Secrets are watched by metadata only and read directly.
func CacheOptions() cache.Options {
	managed := labels.SelectorFromSet(labels.Set{render.LabelManagedBy: render.ManagedBy})
	return cache.Options{ByObject: map[client.Object]cache.ByObject{
		&corev1.ConfigMap{}:             {Label: managed},
		&corev1.ServiceAccount{}:        {Label: managed},
		&appsv1.Deployment{}:            {Label: managed},
		&appsv1.ReplicaSet{}:            {Label: managed},
		&corev1.Pod{}:                   {Label: managed},
		&policyv1.PodDisruptionBudget{}: {Label: managed},
		&networkingv1.NetworkPolicy{}:   {Label: managed},
	}}
}

// Options configure the controllers.
type Options struct {
	// Defaults are the operator-wide settings Agents fall back to.
	Defaults render.Defaults
	// RecheckInterval is how soon an Agent blocked by an object the operator
	// cannot watch, such as someone else's ConfigMap in the way, is checked
	// again. Zero means a minute.
	RecheckInterval time.Duration
	// OperatorNamespace is where the ClusterEngines' Secrets are.
	OperatorNamespace string
	// Engines reads who polls an Agent's task queue, for stop-old-first
	// rollouts, does a versioned rollout's part on the engine, and moves
	// sessions off the shared names.
	Engines interface {
		TaskQueuePollers
		WorkerDeployments
		SpendCounters
		SharedNames
	}
	// Probe asks engines who they are and prepares them for sessions, for
	// ClusterEngines and Agents' own engines.
	Probe EngineProbe
	// SharedSettle is how long new sessions start on an Agent's own task
	// queue before it gives up the shared one; zero means
	// DefaultSharedSettle.
	SharedSettle time.Duration
	// SpendRecheck is how often an Agent with an agent budget reads its
	// spend counter for status; zero means DefaultSpendRecheck.
	SpendRecheck time.Duration
	// VersionedRollouts lets Agents roll as versions of a Temporal Worker
	// Deployment where the engine offers it.
	VersionedRollouts bool
	// PollerQuietPeriod is how long a worker must not have polled to count
	// as stopped; zero means DefaultPollerQuietPeriod.
	PollerQuietPeriod time.Duration
	// GatewayGrants, when set, is the ConfigMap of the operator's namespace
	// the application tokens' grants are published in for the gateways.
	GatewayGrants string
}

// Setup registers the field indexes and every reconciler with a manager.
func Setup(ctx context.Context, mgr ctrl.Manager, opts Options) error {
	if err := SetupIndexes(ctx, mgr, opts.Defaults); err != nil {
		return err
	}
	if opts.RecheckInterval == 0 {
		opts.RecheckInterval = time.Minute
	}
	reader := mgr.GetAPIReader()
	agents := &AgentReconciler{Client: mgr.GetClient(), APIReader: reader, Defaults: opts.Defaults, RecheckInterval: opts.RecheckInterval,
		PollerQuietPeriod: opts.PollerQuietPeriod, VersionedRollouts: opts.VersionedRollouts, SpendRecheck: opts.SpendRecheck,
		OperatorNamespace: opts.OperatorNamespace, SharedSettle: opts.SharedSettle}
	if opts.Engines != nil {
		agents.Pollers, agents.WorkerDeployments, agents.Spend, agents.Shared = opts.Engines, opts.Engines, opts.Engines, opts.Engines
	}
	if opts.Probe != nil {
		agents.Identities = opts.Probe
	}
	if err := agents.SetupWithManager(mgr); err != nil {
		return fmt.Errorf("setting up the Agent controller: %w", err)
	}
	engines := &ClusterEngineReconciler{Client: mgr.GetClient(), APIReader: reader, OperatorNamespace: opts.OperatorNamespace, Engines: opts.Probe}
	if err := engines.SetupWithManager(mgr); err != nil {
		return fmt.Errorf("setting up the ClusterEngine controller: %w", err)
	}
	if err := (&ToolSourceReconciler{Client: mgr.GetClient(), APIReader: reader}).SetupWithManager(mgr); err != nil {
		return fmt.Errorf("setting up the ToolSource controller: %w", err)
	}
	mediaStores := &MediaStoreReconciler{Client: mgr.GetClient(), APIReader: reader, HostPathRoots: opts.Defaults.MediaHostPathRoots}
	if err := mediaStores.SetupWithManager(mgr); err != nil {
		return fmt.Errorf("setting up the MediaStore controller: %w", err)
	}
	if opts.GatewayGrants != "" {
		grants := &GrantsPublisher{Client: mgr.GetClient(), APIReader: reader, Namespace: opts.OperatorNamespace, Name: opts.GatewayGrants}
		if err := grants.SetupWithManager(mgr); err != nil {
			return fmt.Errorf("setting up the gateway grants publisher: %w", err)
		}
	}
	return nil
}
