package controller_test

import (
	"context"
	"slices"
	"strings"
	"sync"

	"github.com/stepwise-run/stepwise/internal/controller"
	"github.com/stepwise-run/stepwise/internal/rollout"
	"github.com/stepwise-run/stepwise/internal/spend"
	"github.com/stepwise-run/stepwise/internal/tenancy"
)

// fakeEngine stands in for the engine's task queue pollers, per task
// queue, and for its Worker Deployments: no kubelet runs here, so no worker
// polls and no version could exist on a real engine. The end-to-end suite
// runs versioned rollouts on a real one.
type fakeEngine struct {
	mu      sync.Mutex
	pollers map[string][]rollout.Poller
	errs    map[string]error
	// offered lists the Worker Deployment names whose engine offers
	// versioning; deployments holds their state.
	offered     map[string]bool
	deployments map[string]*rollout.WorkerDeploymentInfo
	// calls records what a versioned rollout did, as "<op> <build ID>".
	calls map[string][]string
	// counters are the spend counters by Flow type.
	counters map[string]spend.Counter
	// shared are the sessions left under the shared names, by Flow type.
	shared map[string][]string
}

var testEngine = &fakeEngine{
	pollers: map[string][]rollout.Poller{}, errs: map[string]error{},
	offered: map[string]bool{}, deployments: map[string]*rollout.WorkerDeploymentInfo{}, calls: map[string][]string{},
	counters: map[string]spend.Counter{}, shared: map[string][]string{},
}

// spent sets what a Flow type's spend counter holds.
func (f *fakeEngine) spent(flowType string, c spend.Counter) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.counters[flowType] = c
}

func (f *fakeEngine) SpendCounter(_ context.Context, target controller.EngineTarget) (spend.Counter, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.counters[target.Resolved.Agent.Spec.FlowType], nil
}

// leaveShared says which sessions are left under the shared names of a
// Flow type.
func (f *fakeEngine) leaveShared(flowType string, ids ...string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.shared[flowType] = ids
}

func (f *fakeEngine) SharedSessions(_ context.Context, target controller.EngineTarget) ([]string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.shared[target.Resolved.Agent.Spec.FlowType]), nil
}

func (f *fakeEngine) WakeSessions(_ context.Context, target controller.EngineTarget, ids []string) (int, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.record(tenancy.Shared(target.Resolved.Agent.Spec.FlowType).WorkerDeployment(), "wake "+strings.Join(ids, ","))
	return len(ids), nil
}

func (f *fakeEngine) RetireSharedNames(_ context.Context, target controller.EngineTarget) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.record(tenancy.Shared(target.Resolved.Agent.Spec.FlowType).WorkerDeployment(), "retire")
	return nil
}

func (f *fakeEngine) set(taskQueue string, pollers ...rollout.Poller) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.pollers[taskQueue], f.errs[taskQueue] = pollers, nil
}

func (f *fakeEngine) fail(taskQueue string, err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.errs[taskQueue] = err
}

func (f *fakeEngine) Pollers(_ context.Context, _ controller.EngineTarget, taskQueue string) ([]rollout.Poller, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.pollers[taskQueue], f.errs[taskQueue]
}

// offer makes the engine offer Worker Deployments to a Flow type's Agents.
func (f *fakeEngine) offer(flowType string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.offered[flowType] = true
}

// drain marks a version of a Worker Deployment drained, as the engine does
// once no session is pinned to it.
func (f *fakeEngine) drain(name, buildID string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	d := f.deployments[name]
	for i := range d.Versions {
		if d.Versions[i].BuildID == buildID {
			d.Versions[i].Draining, d.Versions[i].Drained = false, true
		}
	}
}

// workerDeploymentState returns a Worker Deployment, and what the operator did on
// it.
func (f *fakeEngine) workerDeploymentState(name string) (rollout.WorkerDeploymentInfo, []string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out rollout.WorkerDeploymentInfo
	if d := f.deployments[name]; d != nil {
		out = *d
		out.Versions = slices.Clone(d.Versions)
	}
	return out, slices.Clone(f.calls[name])
}

func (f *fakeEngine) record(name, call string) {
	if calls := f.calls[name]; len(calls) == 0 || calls[len(calls)-1] != call {
		f.calls[name] = append(calls, call)
	}
}

func (f *fakeEngine) Versioning(_ context.Context, target controller.EngineTarget) (bool, string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.offered[target.Resolved.Agent.Spec.FlowType] {
		return true, "", nil
	}
	return false, "the test engine offers no Worker Deployments", nil
}

func (f *fakeEngine) Describe(_ context.Context, _ controller.EngineTarget, name string) (rollout.WorkerDeploymentInfo, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	d := f.deployments[name]
	if d == nil {
		return rollout.WorkerDeploymentInfo{}, nil
	}
	out := *d
	out.Versions = slices.Clone(d.Versions)
	return out, nil
}

func (f *fakeEngine) SetCurrentVersion(_ context.Context, _ controller.EngineTarget, name, buildID string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	d := f.deployments[name]
	if d == nil {
		d = &rollout.WorkerDeploymentInfo{}
		f.deployments[name] = d
	}
	for i := range d.Versions {
		if d.Versions[i].BuildID == d.Current && d.Current != "" {
			d.Versions[i].Draining = true
		}
	}
	d.Current = buildID
	if buildID != "" && !slices.ContainsFunc(d.Versions, func(v rollout.WorkerDeploymentVersion) bool { return v.BuildID == buildID }) {
		d.Versions = append(d.Versions, rollout.WorkerDeploymentVersion{BuildID: buildID})
	}
	f.record(name, "current "+buildID)
	return nil
}

func (f *fakeEngine) DeleteVersion(_ context.Context, _ controller.EngineTarget, name, buildID string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if d := f.deployments[name]; d != nil {
		d.Versions = slices.DeleteFunc(d.Versions, func(v rollout.WorkerDeploymentVersion) bool { return v.BuildID == buildID })
	}
	f.record(name, "delete "+buildID)
	return nil
}

func (f *fakeEngine) MoveSessions(_ context.Context, _ controller.EngineTarget, name, buildID string) (int, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.record(name, "move "+buildID)
	return 1, nil
}

func (f *fakeEngine) Unpin(_ context.Context, _ controller.EngineTarget, name, buildID string) (int, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.record(name, "unpin "+buildID)
	return 1, nil
}
