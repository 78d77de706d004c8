package main

import (
	"context"
	"fmt"
	"os"
	"time"

	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8sruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/yaml"

	"github.com/stepwise-run/stepwise/internal/controller"
	"github.com/stepwise-run/stepwise/internal/engineadmin"
	"github.com/stepwise-run/stepwise/internal/render"
	"github.com/stepwise-run/stepwise/internal/version"
)

// operatorUser is the identity the operator runs as; the audit log records
// this user's writes only.
const operatorUser = "stepwise-operator"

// unlimited turns off client-side rate limiting, as cmd/manager's
// configuration does: the API server's priority and fairness limit.
func unlimited(cfg *rest.Config) *rest.Config {
	cfg = rest.CopyConfig(cfg)
	cfg.QPS, cfg.Burst = -1, 0
	return cfg
}

// operatorIdentity binds the generated ClusterRole to the operator's own
// user and returns that user's configuration.
func operatorIdentity(env *envtest.Environment, c client.Client, rolePath string) (*rest.Config, error) {
	data, err := os.ReadFile(rolePath)
	if err != nil {
		return nil, err
	}
	role := &rbacv1.ClusterRole{}
	if err := yaml.Unmarshal(data, role); err != nil {
		return nil, fmt.Errorf("reading %s: %w", rolePath, err)
	}
	ctx := context.Background()
	if err := c.Create(ctx, role); err != nil {
		return nil, err
	}
	if err := c.Create(ctx, &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: operatorUser},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role.Name},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: operatorUser}},
	}); err != nil {
		return nil, err
	}
	user, err := env.AddUser(envtest.User{Name: operatorUser}, nil)
	if err != nil {
		return nil, err
	}
	return unlimited(user.Config()), nil
}

// runningOperator is the operator's manager running in this process.
type runningOperator struct {
	cancel context.CancelFunc
	done   chan error
}

// startOperator runs the controllers as cmd/manager does, with a default
// engine so Agents without spec.engine resolve. A syncPeriod of zero keeps
// the manager's default.
func startOperator(ctx context.Context, cfg *rest.Config, scheme *k8sruntime.Scheme, syncPeriod time.Duration) (*runningOperator, error) {
	cacheOptions := controller.CacheOptions()
	if syncPeriod > 0 {
		cacheOptions.SyncPeriod = &syncPeriod
	}
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme:                 scheme,
		Cache:                  cacheOptions,
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
		// The benchmark runs a second manager after the first stops.
		Controller: config.Controller{SkipNameValidation: ptr.To(true)},
	})
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(ctx)
	defaults := render.Defaults{
		DefaultEngine:       benchEngine,
		WorkerImage:         "ghcr.io/stepwise-run/agent-worker:" + version.Operator,
		WorkerEngineVersion: version.EngineVersion,
		MediaHostPathRoots:  []string{mediaRoot},
	}
	if err := controller.Setup(ctx, mgr, controller.Options{Defaults: defaults, OperatorNamespace: benchNamespace, Probe: fixedEngine{}}); err != nil {
		cancel()
		return nil, err
	}
	op := &runningOperator{cancel: cancel, done: make(chan error, 1)}
	go func() { op.done <- mgr.Start(ctx) }()
	return op, nil
}

// benchEngine is the ClusterEngine every benchmark Agent uses.
const benchEngine = "bench"

// fixedEngine answers for an engine no Agent's workers reach: the
// benchmark measures the operator, which asks the engine who it is once
// per ClusterEngine.
type fixedEngine struct{}

func (fixedEngine) Identity(context.Context, engineadmin.Connection) (engineadmin.Identity, error) {
	return engineadmin.Identity{NamespaceID: "00000000-0000-0000-0000-00000000bench", ServerVersion: "1.32.0"}, nil
}

func (fixedEngine) EnsureSearchAttributes(context.Context, engineadmin.Connection) error { return nil }

// stop stops the manager and waits until it has.
func (o *runningOperator) stop() error {
	if o.cancel == nil {
		return nil
	}
	o.cancel()
	o.cancel = nil
	return <-o.done
}
