package rollout

import (
	"strings"
	"testing"
	"time"
)

var (
	now     = time.Date(2026, 12, 3, 12, 0, 0, 0, time.UTC)
	opts    = Options{PollerQuietPeriod: 75 * time.Second, RecheckInterval: 2 * time.Second}
	w030    = Worker{EngineVersion: "0.3.0", Image: "reg/agent-worker:0.3.0"}
	w040    = Worker{EngineVersion: "0.4.0", Image: "reg/agent-worker:0.4.0"}
	w040b   = Worker{EngineVersion: "0.4.0", Image: "reg/agent-worker:0.4.0-patched"}
	want040 = Desired{Worker: w040, Replicas: 2}
)

func deployment(template Worker, replicas, status int32, terminating ...int32) *Deployment {
	d := &Deployment{Template: template, Replicas: replicas, StatusReplicas: status,
		UpdatedReplicas: status, AvailableReplicas: status, Observed: true}
	if len(terminating) > 0 {
		d.TerminatingReplicas = &terminating[0]
	}
	return d
}

func pods(w Worker, n int, terminating bool) []Pod {
	var out []Pod
	for i := range n {
		out = append(out, Pod{Name: w.BuildID() + "-" + string(rune('a'+i)), Worker: w, Ready: !terminating, Terminating: terminating})
	}
	return out
}

func TestDecide(t *testing.T) {
	quietGate := &Gate{Pollers: []Poller{{Identity: "1@old-a@", TaskQueueType: "workflow", LastAccess: now.Add(-80 * time.Second)}}}
	for _, c := range []struct {
		name        string
		desired     Desired
		obs         Observed
		strategy    Strategy
		action      Action
		phase       Phase
		needsGate   bool
		message     string // a part of it
		recheckFrom time.Duration
	}{
		{
			name: "a new Agent: its workers start", desired: want040,
			obs:      Observed{},
			strategy: StrategyRolling, action: ActionApply, phase: PhaseRollingUpdate,
		},
		{
			name: "nothing changed: the rollout is complete", desired: want040,
			obs:      Observed{Deployment: deployment(w040, 2, 2), Pods: pods(w040, 2, false)},
			strategy: StrategyRolling, action: ActionApply, phase: PhaseComplete,
		},
		{
			name: "a new image of the same engine version rolls", desired: Desired{Worker: w040b, Replicas: 2},
			obs:      Observed{Deployment: deployment(w040, 2, 2), Pods: pods(w040, 2, false)},
			strategy: StrategyRolling, action: ActionApply, phase: PhaseRollingUpdate,
		},
		{
			name: "a new engine version the old may not run beside: stop the old first", desired: want040,
			obs:      Observed{Deployment: deployment(w030, 2, 2), Pods: pods(w030, 2, false)},
			strategy: StrategyStopOldFirst, action: ActionStopWorkers, phase: PhaseWaitingForOldWorkersStopped,
			message: "engine 0.4.0 may not run beside 0.3.0",
		},
		{
			name: "old pods still terminate: wait", desired: want040,
			obs:      Observed{Deployment: deployment(w030, 0, 0, 1), Pods: pods(w030, 1, true)},
			strategy: StrategyStopOldFirst, action: ActionWait, phase: PhaseWaitingForOldWorkersStopped,
			message: "1 old workers remain (1 terminating)",
		},
		{
			name: "the Deployment counts a terminating pod the cache has not seen", desired: want040,
			obs:      Observed{Deployment: deployment(w030, 0, 0, 1)},
			strategy: StrategyStopOldFirst, action: ActionWait, phase: PhaseWaitingForOldWorkersStopped,
			message: "1 old workers remain",
		},
		{
			name: "an old pod of another Deployment generation still runs after a compatible template was applied", desired: want040,
			obs:      Observed{Deployment: deployment(w040, 2, 2), Pods: append(pods(w040, 2, false), pods(w030, 1, false)...)},
			strategy: StrategyStopOldFirst, action: ActionStopWorkers, phase: PhaseWaitingForOldWorkersStopped,
		},
		{
			name: "no old pod as the cache sees it: read the gate", desired: want040,
			obs:      Observed{Deployment: deployment(w030, 0, 0, 0)},
			strategy: StrategyStopOldFirst, action: ActionWait, phase: PhaseWaitingForOldWorkersStopped, needsGate: true,
		},
		{
			name: "the live pod list still has an old pod", desired: want040,
			obs:      Observed{Deployment: deployment(w030, 0, 0), Gate: &Gate{Pods: pods(w030, 1, true)}},
			strategy: StrategyStopOldFirst, action: ActionWait, phase: PhaseWaitingForOldWorkersStopped,
			message: "as the API server lists them", recheckFrom: opts.RecheckInterval,
		},
		{
			name: "an old worker polled 10s ago: wait until it has been quiet for the period", desired: want040,
			obs: Observed{Deployment: deployment(w030, 0, 0), Now: now, Gate: &Gate{Pollers: []Poller{
				{Identity: "1@old-a@", TaskQueueType: "activity", LastAccess: now.Add(-10 * time.Second)},
				{Identity: "1@old-a@", TaskQueueType: "workflow", LastAccess: now.Add(-20 * time.Second)},
			}}},
			strategy: StrategyStopOldFirst, action: ActionWait, phase: PhaseWaitingForOldWorkersStopped,
			message: "workers 1@old-a@ polled the task queue 10s ago", recheckFrom: 65 * time.Second,
		},
		{
			name: "the pollers cannot be read: the gate stays shut", desired: want040,
			obs:      Observed{Deployment: deployment(w030, 0, 0), Now: now, Gate: &Gate{PollersError: "connection refused"}},
			strategy: StrategyStopOldFirst, action: ActionWait, phase: PhaseWaitingForOldWorkersStopped,
			message: "cannot tell whether old workers still poll the task queue: connection refused", recheckFrom: opts.RecheckInterval,
		},
		{
			name: "no old pod, no recent poller: start the new workers", desired: want040,
			obs:      Observed{Deployment: deployment(w030, 0, 0), Now: now, Gate: quietGate},
			strategy: StrategyStopOldFirst, action: ActionApply, phase: PhaseRollingUpdate,
			message: "starting engine 0.4.0",
		},
		{
			name: "a rollback while old workers stop: the old version is desired again and runs beside itself", desired: Desired{Worker: w030, Replicas: 2},
			obs:      Observed{Deployment: deployment(w030, 0, 0, 1), Pods: pods(w030, 1, true)},
			strategy: StrategyRolling, action: ActionApply, phase: PhaseRollingUpdate,
		},
		{
			name: "a rollback to an older engine version follows the same rules", desired: Desired{Worker: w030, Replicas: 2},
			obs:      Observed{Deployment: deployment(w040, 2, 2), Pods: pods(w040, 2, false)},
			strategy: StrategyStopOldFirst, action: ActionStopWorkers, phase: PhaseWaitingForOldWorkersStopped,
			message: "engine 0.3.0 may not run beside 0.4.0",
		},
		{
			name: "pods without an engine version label are stopped first", desired: want040,
			obs:      Observed{Deployment: deployment(w040, 2, 2), Pods: append(pods(w040, 2, false), Pod{Name: "x", Worker: Worker{Image: "mystery"}})},
			strategy: StrategyStopOldFirst, action: ActionStopWorkers, phase: PhaseWaitingForOldWorkersStopped,
			message: "an unlabelled version",
		},
		{
			name: "the Deployment was deleted while old pods stop", desired: want040,
			obs:      Observed{Pods: pods(w030, 1, true)},
			strategy: StrategyStopOldFirst, action: ActionWait, phase: PhaseWaitingForOldWorkersStopped,
		},
		{
			name: "the desired replicas changed: rolling, not complete", desired: Desired{Worker: w040, Replicas: 3},
			obs:      Observed{Deployment: deployment(w040, 2, 2), Pods: pods(w040, 2, false)},
			strategy: StrategyRolling, action: ActionApply, phase: PhaseRollingUpdate,
		},
	} {
		t.Run(c.name, func(t *testing.T) {
			p := Decide(c.desired, c.obs, opts)
			if p.Strategy != c.strategy || p.Action != c.action || p.Phase != c.phase || p.NeedsGate != c.needsGate {
				t.Errorf("plan = %s/%s/%s gate %v, want %s/%s/%s gate %v (%s)", p.Strategy, p.Action, p.Phase, p.NeedsGate,
					c.strategy, c.action, c.phase, c.needsGate, p.Message)
			}
			if !strings.Contains(p.Message, c.message) {
				t.Errorf("message %q does not say %q", p.Message, c.message)
			}
			if p.RecheckAfter != c.recheckFrom {
				t.Errorf("recheck after %s, want %s", p.RecheckAfter, c.recheckFrom)
			}
			if len(p.Versions) == 0 || p.Versions[0].Worker != c.desired.Worker {
				t.Errorf("the desired version is not listed first: %+v", p.Versions)
			}
		})
	}
}

func TestVersionStatusCountsPodsAndKeepsSince(t *testing.T) {
	earlier := now.Add(-time.Hour)
	obs := Observed{
		Deployment: deployment(w030, 0, 0, 1),
		Pods:       append(pods(w030, 1, true), Pod{Name: "b", Worker: w030, Ready: true}, Pod{Name: "c", Worker: w030}),
		Now:        now,
		Previous: []VersionStatus{
			{Worker: w030, BuildID: w030.BuildID(), State: StateDraining, Since: earlier},
			{Worker: w040, BuildID: w040.BuildID(), State: StateRamping, Since: earlier},
		},
	}
	p := Decide(want040, obs, opts)
	if len(p.Versions) != 2 {
		t.Fatalf("versions = %+v", p.Versions)
	}
	desired, old := p.Versions[0], p.Versions[1]
	if desired.BuildID != w040.BuildID() || desired.State != StatePending || !desired.Since.Equal(now) {
		t.Errorf("the desired version = %+v, want Pending since now (it was Ramping)", desired)
	}
	if old.BuildID != w030.BuildID() || old.State != StateDraining || !old.Since.Equal(earlier) {
		t.Errorf("the old version = %+v, want Draining since an hour ago", old)
	}
	if old.Replicas != 2 || old.ReadyReplicas != 1 || old.TerminatingPods != 1 {
		t.Errorf("the old version counts %d replicas, %d ready, %d terminating; want 2, 1, 1", old.Replicas, old.ReadyReplicas, old.TerminatingPods)
	}
}

func TestBuildIDsTellImagesOfOneEngineVersionApart(t *testing.T) {
	if w040.BuildID() == w040b.BuildID() {
		t.Error("two images of engine 0.4.0 have one build ID")
	}
	if !strings.HasPrefix(w040.BuildID(), "0.4.0-") || len(w040.BuildID()) > 63 {
		t.Errorf("build ID %q does not start with the engine version or does not fit a label", w040.BuildID())
	}
	if w040.BuildID() != (Worker{EngineVersion: "0.4.0", Image: "reg/agent-worker:0.4.0"}).BuildID() {
		t.Error("a build ID is not stable")
	}
}
