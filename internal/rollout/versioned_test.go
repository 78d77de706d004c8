package rollout

import (
	"slices"
	"strings"
	"testing"
)

var (
	w050    = Worker{EngineVersion: "0.5.0", Image: "reg/agent-worker:0.5.0"}
	w050b   = Worker{EngineVersion: "0.5.0", Image: "reg/agent-worker:0.5.0-patched"}
	want050 = Desired{Worker: w050, Replicas: 2, Versioned: true}
)

func set(template Worker, replicas, available int32) WorkerSet {
	return WorkerSet{Versioned: true, Deployment: Deployment{Template: template, Replicas: replicas,
		StatusReplicas: available, UpdatedReplicas: available, AvailableReplicas: available, Observed: true}}
}

func versionedPods(w Worker, n int) []Pod {
	out := pods(w, n, false)
	for i := range out {
		out[i].Versioned = true
	}
	return out
}

func current(buildID string, versions ...WorkerDeploymentVersion) *WorkerDeploymentInfo {
	return &WorkerDeploymentInfo{Current: buildID, Versions: versions}
}

// withFutureRelease adds a release after the current one whose workers
// move sessions between turns but run beside no earlier version, for the
// cases only an incompatible later version shows.
func withFutureRelease(t *testing.T) string {
	t.Helper()
	saved := Releases
	Releases = append(slices.Clone(Releases), Release{EngineVersion: "9.0.0", MovesBetweenTurns: true, Changes: "a later, incompatible version"})
	t.Cleanup(func() { Releases = saved })
	return "9.0.0"
}

func TestMayHandOver(t *testing.T) {
	future := withFutureRelease(t)
	for _, c := range []struct {
		old          Worker
		oldVersioned bool
		desired      Desired
		want         bool
	}{
		{w040, false, want050, true},  // 0.5.0 runs beside 0.4.0
		{w030, false, want050, false}, // it does not beside 0.3.0
		{w050, true, Desired{Worker: w050b, Versioned: true}, true},
		{Worker{EngineVersion: "0.6.0"}, true, want050, true}, // 0.6.0 runs beside 0.5.0
		{Worker{EngineVersion: future}, true, want050, false}, // never back to older code by a move
		{w050, true, Desired{Worker: Worker{EngineVersion: future}, Versioned: true}, true},
		{w050, false, Desired{Worker: Worker{EngineVersion: future}, Versioned: true}, false}, // unversioned sessions move mid-turn
		{w050, true, Desired{Worker: w030}, false},
		{w050, true, Desired{Worker: w040}, true},
	} {
		if got := MayHandOver(c.old, c.oldVersioned, c.desired); got != c.want {
			t.Errorf("MayHandOver(%s versioned=%v, %s versioned=%v) = %v, want %v",
				c.old.EngineVersion, c.oldVersioned, c.desired.EngineVersion, c.desired.Versioned, got, c.want)
		}
	}
}

func TestDecideVersioned(t *testing.T) {
	a, b := w050.BuildID(), w050b.BuildID()
	wantB := Desired{Worker: w050b, Replicas: 2, Versioned: true}
	quietGate := &Gate{}
	for _, c := range []struct {
		name    string
		desired Desired
		obs     Observed
		want    Plan // the fields compared; Message is a part of the plan's
		states  []State
	}{
		{
			name: "the engine is read before anything moves on it", desired: want050,
			obs:  Observed{Deployment: deployment(w040, 2, 2), Pods: pods(w040, 2, false)},
			want: Plan{Strategy: StrategyVersioned, Action: ActionApply, Phase: PhaseRollingUpdate, NeedsWorkerDeployment: true},
		},
		{
			name: "into versioning beside 0.4.0: the new version starts beside the unversioned workers", desired: want050,
			obs:    Observed{Deployment: deployment(w040, 2, 2), Pods: pods(w040, 2, false), WorkerDeployment: &WorkerDeploymentInfo{}},
			want:   Plan{Strategy: StrategyVersioned, Action: ActionApply, Phase: PhaseRollingUpdate, Message: "becomes current once its 2 workers"},
			states: []State{StateRamping, StateCurrent},
		},
		{
			name: "into versioning: once available, the new version becomes current", desired: want050,
			obs: Observed{Deployment: deployment(w040, 2, 2), Sets: []WorkerSet{set(w050, 2, 2)},
				Pods: append(pods(w040, 2, false), versionedPods(w050, 2)...), WorkerDeployment: &WorkerDeploymentInfo{Versions: []WorkerDeploymentVersion{{BuildID: a}}}},
			want: Plan{Strategy: StrategyVersioned, Action: ActionApply, Phase: PhaseRollingUpdate, MakeCurrent: true, CurrentBuildID: a},
		},
		{
			name: "into versioning: the unversioned workers go once the version is current", desired: want050,
			obs: Observed{Deployment: deployment(w040, 2, 2), Sets: []WorkerSet{set(w050, 2, 2)},
				Pods: append(pods(w040, 2, false), versionedPods(w050, 2)...), WorkerDeployment: current(a, WorkerDeploymentVersion{BuildID: a})},
			want:   Plan{Strategy: StrategyVersioned, Action: ActionApply, Phase: PhaseDraining, Remove: []string{Unversioned}},
			states: []State{StateCurrent, StateDraining},
		},
		{
			name: "a versioned rollout completes", desired: want050,
			obs:    Observed{Sets: []WorkerSet{set(w050, 2, 2)}, Pods: versionedPods(w050, 2), WorkerDeployment: current(a, WorkerDeploymentVersion{BuildID: a})},
			want:   Plan{Strategy: StrategyVersioned, Action: ActionApply, Phase: PhaseComplete},
			states: []State{StateCurrent},
		},
		{
			name: "a new image: the new version starts beside the old one", desired: wantB,
			obs:    Observed{Sets: []WorkerSet{set(w050, 2, 2)}, Pods: versionedPods(w050, 2), WorkerDeployment: current(a, WorkerDeploymentVersion{BuildID: a})},
			want:   Plan{Strategy: StrategyVersioned, Action: ActionApply, Phase: PhaseRollingUpdate},
			states: []State{StateRamping, StateCurrent},
		},
		{
			name: "the old version drains: its pinned sessions are told to move", desired: wantB,
			obs: Observed{Sets: []WorkerSet{set(w050, 2, 2), set(w050b, 2, 2)}, Pods: append(versionedPods(w050, 2), versionedPods(w050b, 2)...),
				WorkerDeployment: current(b, WorkerDeploymentVersion{BuildID: a, Draining: true}, WorkerDeploymentVersion{BuildID: b})},
			want:   Plan{Strategy: StrategyVersioned, Action: ActionApply, Phase: PhaseDraining, Move: []string{a}, Message: "to move between turns"},
			states: []State{StateCurrent, StateDraining},
		},
		{
			name: "a drained version's workers go", desired: wantB,
			obs: Observed{Sets: []WorkerSet{set(w050, 2, 2), set(w050b, 2, 2)}, Pods: append(versionedPods(w050, 2), versionedPods(w050b, 2)...),
				WorkerDeployment: current(b, WorkerDeploymentVersion{BuildID: a, Drained: true}, WorkerDeploymentVersion{BuildID: b})},
			want:   Plan{Strategy: StrategyVersioned, Action: ActionApply, Phase: PhaseDraining, Remove: []string{a}, Message: "old workers to stop"},
			states: []State{StateCurrent, StateDrained},
		},
		{
			name: "a change that keeps the build ID rolls the version in place: not complete until every worker runs the newest template", desired: wantB,
			obs: Observed{Sets: []WorkerSet{{Versioned: true, Deployment: Deployment{Template: w050b, Replicas: 2, StatusReplicas: 2,
				UpdatedReplicas: 1, AvailableReplicas: 2, Observed: true}}}, Pods: versionedPods(w050b, 2), WorkerDeployment: current(b, WorkerDeploymentVersion{BuildID: b})},
			want:   Plan{Strategy: StrategyVersioned, Action: ActionApply, Phase: PhaseRollingUpdate, Message: "rolling version"},
			states: []State{StateCurrent},
		},
		{
			name: "then its engine record is deleted", desired: wantB,
			obs: Observed{Sets: []WorkerSet{set(w050b, 2, 2)}, Pods: versionedPods(w050b, 2),
				WorkerDeployment: current(b, WorkerDeploymentVersion{BuildID: a, Drained: true}, WorkerDeploymentVersion{BuildID: b})},
			want:   Plan{Strategy: StrategyVersioned, Action: ActionApply, Phase: PhaseDraining, Unpin: []string{a}, DeleteVersions: []string{a}},
			states: []State{StateCurrent, StateDrained},
		},
		{
			name: "a rollback below versioning that may not run beside stops every worker first", desired: Desired{Worker: w030, Replicas: 2},
			obs:    Observed{Sets: []WorkerSet{set(w050, 2, 2)}, Pods: versionedPods(w050, 2)},
			want:   Plan{Strategy: StrategyStopOldFirst, Action: ActionStopWorkers, Phase: PhaseWaitingForOldWorkersStopped, Stop: []string{a}},
			states: []State{StatePending, StateDraining},
		},
		{
			name: "the rollback waits for the old pods", desired: Desired{Worker: w030, Replicas: 2},
			obs:  Observed{Sets: []WorkerSet{set(w050, 0, 0)}, Pods: versionedPods(w050, 1)},
			want: Plan{Strategy: StrategyStopOldFirst, Action: ActionWait, Phase: PhaseWaitingForOldWorkersStopped, Message: "1 old workers remain"},
		},
		{
			name: "the rollback asks the engine whether old workers still poll", desired: Desired{Worker: w030, Replicas: 2},
			obs:  Observed{Sets: []WorkerSet{set(w050, 0, 0)}},
			want: Plan{Strategy: StrategyStopOldFirst, Action: ActionWait, Phase: PhaseWaitingForOldWorkersStopped, NeedsGate: true},
		},
		{
			name: "the rollback starts the unversioned workers once none polls", desired: Desired{Worker: w030, Replicas: 2},
			obs:  Observed{Sets: []WorkerSet{set(w050, 0, 0)}, Gate: quietGate},
			want: Plan{Strategy: StrategyStopOldFirst, Action: ActionApply, Phase: PhaseRollingUpdate},
		},
		{
			name: "the rollback gives new sessions to the unversioned workers once they are available", desired: Desired{Worker: w030, Replicas: 2},
			obs: Observed{Deployment: deployment(w030, 2, 2), Sets: []WorkerSet{set(w050, 0, 0)}, Pods: pods(w030, 2, false),
				WorkerDeployment: current(a, WorkerDeploymentVersion{BuildID: a})},
			want: Plan{Strategy: StrategyVersioned, Action: ActionApply, Phase: PhaseRollingUpdate, MakeCurrent: true, CurrentBuildID: Unversioned},
		},
		{
			name: "the rollback unpins the sessions left on the stopped version", desired: Desired{Worker: w030, Replicas: 2},
			obs: Observed{Deployment: deployment(w030, 2, 2), Sets: []WorkerSet{set(w050, 0, 0)}, Pods: pods(w030, 2, false),
				WorkerDeployment: current(Unversioned, WorkerDeploymentVersion{BuildID: a, Draining: true})},
			want: Plan{Strategy: StrategyVersioned, Action: ActionApply, Phase: PhaseDraining, Unpin: []string{a}, Remove: []string{a}},
		},
		{
			name: "an unreadable engine holds the rollout", desired: wantB,
			obs:  Observed{Sets: []WorkerSet{set(w050, 2, 2), set(w050b, 2, 2)}, WorkerDeployment: &WorkerDeploymentInfo{Error: "connection refused"}},
			want: Plan{Strategy: StrategyVersioned, Action: ActionApply, Phase: PhaseRollingUpdate, Message: "connection refused"},
		},
	} {
		t.Run(c.name, func(t *testing.T) {
			c.obs.Now = now
			got := DecideVersioned(c.desired, c.obs, opts)
			if got.Strategy != c.want.Strategy || got.Action != c.want.Action || got.Phase != c.want.Phase ||
				got.NeedsWorkerDeployment != c.want.NeedsWorkerDeployment || got.NeedsGate != c.want.NeedsGate ||
				got.MakeCurrent != c.want.MakeCurrent || got.CurrentBuildID != c.want.CurrentBuildID ||
				!slices.Equal(got.Stop, c.want.Stop) || !slices.Equal(got.Move, c.want.Move) || !slices.Equal(got.Unpin, c.want.Unpin) ||
				!slices.Equal(got.Remove, c.want.Remove) || !slices.Equal(got.DeleteVersions, c.want.DeleteVersions) {
				t.Fatalf("plan = %+v\nwant  %+v", got, c.want)
			}
			if !strings.Contains(got.Message, c.want.Message) {
				t.Errorf("message %q lacks %q", got.Message, c.want.Message)
			}
			if got.Phase != PhaseComplete && got.Action != ActionStopWorkers && got.RecheckAfter == 0 && !got.NeedsWorkerDeployment && !got.NeedsGate &&
				got.Phase != PhaseRollingUpdate && got.Phase != PhaseWaitingForOldWorkersStopped {
				t.Errorf("a draining plan sets no recheck")
			}
			if c.states != nil {
				var states []State
				for _, v := range got.Versions {
					states = append(states, v.State)
				}
				if !slices.Equal(states, c.states) {
					t.Errorf("version states = %v, want %v", states, c.states)
				}
			}
			if got.Versions[0].BuildID != c.desired.BuildID() {
				t.Errorf("the first version is %s, want the desired %s", got.Versions[0].BuildID, c.desired.BuildID())
			}
		})
	}
}
