package controller

import (
	"context"
	"sync"
	"time"

	"github.com/stepwise-run/stepwise/internal/engineadmin"
	"github.com/stepwise-run/stepwise/internal/rollout"
)

// Engines does, through the operator's engine client, what rollouts need
// on an Agent's engine: its task queue's pollers and its Worker
// Deployment.
type Engines struct {
	Client *engineadmin.Client

	mu         sync.Mutex
	versioning map[string]versioningAnswer
	described  map[string]describedAnswer
	identities map[string]identityAnswer
}

// describedAnswer is a Worker Deployment as the engine last described it,
// kept for describedTTL: a rollout's passes come many to the second, and
// the engine limits the requests each Worker Deployment takes. A change
// the operator makes forgets it.
type describedAnswer struct {
	info rollout.WorkerDeploymentInfo
	at   time.Time
}

const describedTTL = 2 * time.Second

// versioningAnswer is an engine's answer about Worker Deployments, kept for
// versioningTTL: it changes only with a server upgrade or a namespace
// setting, and a rollout asks on every pass.
type versioningAnswer struct {
	supported bool
	reason    string
	at        time.Time
}

const versioningTTL = 5 * time.Minute

func (e *Engines) connection(target EngineTarget) (engineadmin.Connection, error) {
	return engineadmin.ConnectionFor(target.Resolved)
}

// Pollers implements TaskQueuePollers.
func (e *Engines) Pollers(ctx context.Context, target EngineTarget, taskQueue string) ([]rollout.Poller, error) {
	conn, err := e.connection(target)
	if err != nil {
		return nil, err
	}
	pollers, err := e.Client.Pollers(ctx, conn, taskQueue)
	if err != nil {
		return nil, err
	}
	out := make([]rollout.Poller, 0, len(pollers))
	for _, p := range pollers {
		out = append(out, rollout.Poller{Identity: p.Identity, TaskQueueType: p.TaskQueueType, LastAccess: p.LastAccess})
	}
	return out, nil
}

// Versioning implements WorkerDeployments.
func (e *Engines) Versioning(ctx context.Context, target EngineTarget) (bool, string, error) {
	conn, err := e.connection(target)
	if err != nil {
		return false, "", err
	}
	e.mu.Lock()
	answer, ok := e.versioning[conn.Key()]
	e.mu.Unlock()
	if ok && time.Since(answer.at) < versioningTTL {
		return answer.supported, answer.reason, nil
	}
	v, err := e.Client.Versioning(ctx, conn)
	if err != nil {
		return false, "", err
	}
	e.mu.Lock()
	if e.versioning == nil {
		e.versioning = map[string]versioningAnswer{}
	}
	e.versioning[conn.Key()] = versioningAnswer{supported: v.Supported, reason: v.Reason, at: time.Now()}
	e.mu.Unlock()
	return v.Supported, v.Reason, nil
}

// Describe implements WorkerDeployments.
func (e *Engines) Describe(ctx context.Context, target EngineTarget, name string) (rollout.WorkerDeploymentInfo, error) {
	conn, err := e.connection(target)
	if err != nil {
		return rollout.WorkerDeploymentInfo{}, err
	}
	key := conn.Key() + "\x00" + name
	e.mu.Lock()
	answer, ok := e.described[key]
	e.mu.Unlock()
	if ok && time.Since(answer.at) < describedTTL {
		return answer.info, nil
	}
	d, err := e.Client.WorkerDeployment(ctx, conn, name)
	if err != nil {
		return rollout.WorkerDeploymentInfo{}, err
	}
	out := rollout.WorkerDeploymentInfo{Current: d.CurrentBuildID}
	for _, v := range d.Versions {
		out.Versions = append(out.Versions, rollout.WorkerDeploymentVersion{
			BuildID: v.BuildID, Draining: v.Drainage == engineadmin.DrainageDraining, Drained: v.Drainage == engineadmin.DrainageDrained,
		})
	}
	e.mu.Lock()
	if e.described == nil {
		e.described = map[string]describedAnswer{}
	}
	e.described[key] = describedAnswer{info: out, at: time.Now()}
	e.mu.Unlock()
	return out, nil
}

// forget drops the kept description of a Worker Deployment the operator
// changes.
func (e *Engines) forget(conn engineadmin.Connection, name string) {
	e.mu.Lock()
	delete(e.described, conn.Key()+"\x00"+name)
	e.mu.Unlock()
}

// SetCurrentVersion implements WorkerDeployments.
func (e *Engines) SetCurrentVersion(ctx context.Context, target EngineTarget, name, buildID string) error {
	conn, err := e.connection(target)
	if err != nil {
		return err
	}
	defer e.forget(conn, name)
	return e.Client.SetCurrentVersion(ctx, conn, name, buildID)
}

// DeleteVersion implements WorkerDeployments.
func (e *Engines) DeleteVersion(ctx context.Context, target EngineTarget, name, buildID string) error {
	conn, err := e.connection(target)
	if err != nil {
		return err
	}
	defer e.forget(conn, name)
	return e.Client.DeleteVersion(ctx, conn, name, buildID)
}

// MoveSessions implements WorkerDeployments.
func (e *Engines) MoveSessions(ctx context.Context, target EngineTarget, name, buildID string) (int, error) {
	conn, ids, err := e.pinned(ctx, target, name, buildID)
	if err != nil || len(ids) == 0 {
		return 0, err
	}
	return e.Client.MoveSessions(ctx, conn, ids)
}

// Unpin implements WorkerDeployments.
func (e *Engines) Unpin(ctx context.Context, target EngineTarget, name, buildID string) (int, error) {
	conn, ids, err := e.pinned(ctx, target, name, buildID)
	if err != nil || len(ids) == 0 {
		return 0, err
	}
	return len(ids), e.Client.Unpin(ctx, conn, ids)
}

func (e *Engines) pinned(ctx context.Context, target EngineTarget, name, buildID string) (engineadmin.Connection, []string, error) {
	conn, err := e.connection(target)
	if err != nil {
		return conn, nil, err
	}
	ids, err := e.Client.PinnedSessions(ctx, conn, name, buildID)
	return conn, ids, err
}
