package rollout

import (
	"fmt"
	"slices"
	"strings"
	"time"
)

// StrategyVersioned runs one worker Deployment per worker version, each a
// version of the Agent's Temporal Worker Deployment. New sessions start on
// the current version; a running session stays pinned to the version that
// runs it and moves to the current one between turns, so no session waits
// for a rollout and no turn is replayed by another version's worker.
const StrategyVersioned Strategy = "Versioned"

// PhaseDraining says the desired version is current, and old versions keep
// their workers until the sessions pinned to them have moved; then their
// workers stop and their engine records are deleted.
const PhaseDraining Phase = "Draining"

// StateDrained is an old version without workers whose record the engine
// still keeps; it is deleted once the engine lets it.
const StateDrained State = "Drained"

// Unversioned is the key of the worker set that joins no Worker
// Deployment: the one Deployment of an Agent rolled without versioning.
const Unversioned = ""

// WorkerSet is one of an Agent's worker Deployments.
type WorkerSet struct {
	Deployment
	// Versioned is true for a Deployment whose workers join the Agent's
	// Worker Deployment as the version of their build ID.
	Versioned bool
}

// Key is the build ID of a versioned set, Unversioned otherwise.
func (s WorkerSet) Key() string { return keyOf(s.Template, s.Versioned) }

func keyOf(w Worker, versioned bool) string {
	if !versioned {
		return Unversioned
	}
	return w.BuildID()
}

// WorkerDeploymentVersion is one version of the Agent's Worker Deployment
// as Temporal keeps it.
type WorkerDeploymentVersion struct {
	BuildID string
	// Deployment names the Worker Deployment that keeps it: an Agent's
	// versions may be in its own and in the shared one of engine 0.7.0 and
	// earlier.
	Deployment string
	// Draining and Drained are what the engine says of the sessions
	// pinned to an old version; neither, until it has looked.
	Draining, Drained bool
}

// WorkerDeploymentInfo is the Agent's Worker Deployment as Temporal
// describes it.
type WorkerDeploymentInfo struct {
	// Error says why it could not be read; the rollout then changes
	// nothing on the engine and waits.
	Error string
	// Current is the build ID new sessions start on, Unversioned when
	// unversioned workers take them.
	Current string
	// Versions are the versions the engine keeps a record of.
	Versions []WorkerDeploymentVersion
}

func (e *WorkerDeploymentInfo) version(buildID string) (WorkerDeploymentVersion, bool) {
	for _, v := range e.Versions {
		if v.BuildID == buildID {
			return v, true
		}
	}
	return WorkerDeploymentVersion{}, false
}

// VersioningWanted says whether the desired workers run as a version of the
// Agent's Worker Deployment: the engine offers it, the operator allows it,
// and their engine version moves sessions between turns.
func VersioningWanted(engineVersion string, engineOffersIt bool) bool {
	return engineOffersIt && MovesBetweenTurnsIn(engineVersion)
}

// MayHandOver says whether sessions of an old worker version may be handed
// to the desired one while the old workers still run: where the two may run
// beside each other, or where both are versions whose sessions move between
// turns and the desired one is no older, so a session only ever carries its
// state forward. Otherwise the old workers stop first.
func MayHandOver(old Worker, oldVersioned bool, desired Desired) bool {
	if RunBeside(old.EngineVersion, desired.EngineVersion) {
		return true
	}
	return oldVersioned && desired.Versioned && MovesBetweenTurnsIn(old.EngineVersion) &&
		MovesBetweenTurnsIn(desired.EngineVersion) && !newerThan(old.EngineVersion, desired.EngineVersion)
}

// DecideVersioned plans one pass of a rollout among worker sets: into a
// Worker Deployment version, between versions, or out of versioning. Old
// sessions are handed over between turns where MayHandOver allows, and old
// workers stop first otherwise, as in stop-old-first; sessions left pinned
// to a version without workers are unpinned once the desired workers are
// current.
func DecideVersioned(desired Desired, obs Observed, opts Options) Plan {
	p := planVersioned(desired, obs, opts)
	p.Versions = versionedStatus(desired, obs, p)
	return p
}

func planVersioned(desired Desired, obs Observed, opts Options) Plan {
	key := keyOf(desired.Worker, desired.Versioned)
	sets := allSets(obs)
	desiredSet := findSet(sets, key)
	started := desiredSet != nil && (desiredSet.Replicas > 0 || podsOf(obs.Pods, key) > 0)

	// Old workers that may not hand their sessions over stop first, and
	// the desired ones with them if they run: the gate then holds every
	// worker until none polls, and the desired workers start alone. Old
	// sets keep their template at zero replicas until the desired workers
	// are current, which is how a later pass knows the gate was passed.
	if blockers, running := blockingSets(desired, obs, sets); running || (len(blockers) > 0 && !started) {
		return stopOldSets(desired, obs, opts, sets, blockers)
	}

	p := Plan{Strategy: StrategyVersioned, Action: ActionApply, Phase: PhaseRollingUpdate}
	if !desired.Versioned && len(sets) == 1 && key == Unversioned && obs.WorkerDeployment == nil {
		p.Strategy = StrategyRolling
	}
	// A version's own Deployment rolls in place on a change that keeps its
	// build ID (configuration, a rotated Secret): ready means every worker
	// runs its newest template.
	ready := desiredSet != nil && desiredSet.Template == desired.Worker && desiredSet.Observed && desiredSet.Replicas == desired.Replicas &&
		desiredSet.UpdatedReplicas >= desired.Replicas && desiredSet.AvailableReplicas >= desired.Replicas && desired.Replicas > 0
	if obs.WorkerDeployment == nil {
		p.NeedsWorkerDeployment = true
		p.Message = "reading the Worker Deployment from the engine"
		return p
	}
	if obs.WorkerDeployment.Error != "" {
		p.Message = "cannot read the Worker Deployment from the engine: " + obs.WorkerDeployment.Error
		p.RecheckAfter = opts.RecheckInterval
		return p
	}
	engineKnows := len(obs.WorkerDeployment.Versions) > 0
	if obs.WorkerDeployment.Current != key && (desired.Versioned || engineKnows) {
		if !ready {
			p.Message = fmt.Sprintf("starting %s; it becomes current once its %d workers are available", describeKey(key, desired.Worker), desired.Replicas)
			return p
		}
		p.MakeCurrent, p.CurrentBuildID = true, key
		p.Message = fmt.Sprintf("making %s current", describeKey(key, desired.Worker))
		p.RecheckAfter = opts.RecheckInterval
		return p
	}

	// The desired workers are current: old sets drain and go.
	var waits []string
	for _, s := range sets {
		k := s.Key()
		if k == key {
			continue
		}
		running := s.Replicas > 0 || podsOf(obs.Pods, k) > 0
		switch {
		case k == Unversioned:
			// Unversioned sessions go to the current version with their
			// next task; what runs on the old workers finishes as they stop.
			p.Remove = append(p.Remove, k)
		case !running:
			p.Unpin = append(p.Unpin, k)
			p.Remove = append(p.Remove, k)
		default:
			v, _ := obs.WorkerDeployment.version(k)
			if v.Drained {
				p.Remove = append(p.Remove, k)
				continue
			}
			p.Move = append(p.Move, k)
			waits = append(waits, fmt.Sprintf("sessions pinned to %s to move between turns", k))
		}
	}
	oldPods := slices.ContainsFunc(obs.Pods, func(pod Pod) bool { return keyOf(pod.Worker, pod.Versioned) != key })
	if len(p.Remove) > 0 || oldPods {
		waits = append(waits, "old workers to stop")
	}
	for _, v := range obs.WorkerDeployment.Versions {
		if v.BuildID == key || findSet(sets, v.BuildID) != nil || podsOf(obs.Pods, v.BuildID) > 0 {
			continue
		}
		p.Unpin = appendNew(p.Unpin, v.BuildID)
		p.DeleteVersions = append(p.DeleteVersions, v.BuildID)
		waits = append(waits, fmt.Sprintf("the engine to let the record of %s go", v.BuildID))
	}
	switch {
	case len(waits) > 0:
		p.Phase = PhaseDraining
		p.Message = "waiting for " + strings.Join(waits, "; ")
		p.RecheckAfter = max(opts.RecheckInterval, drainRecheck)
	case !ready || !onlyDesiredPods(obs.Pods, key, desired.Worker):
		p.Message = fmt.Sprintf("rolling %s to its desired workers", describeKey(key, desired.Worker))
	default:
		p.Phase = PhaseComplete
	}
	return p
}

// drainRecheck is how often a draining rollout looks again and signals the
// sessions still pinned to an old version.
const drainRecheck = 10 * time.Second

// stopOldSets scales every old set to zero and waits, as stop-old-first
// does, until no old worker exists or polls; then the desired set starts.
func stopOldSets(desired Desired, obs Observed, opts Options, sets []WorkerSet, blockers []string) Plan {
	p := Plan{Strategy: StrategyStopOldFirst, Phase: PhaseWaitingForOldWorkersStopped, Action: ActionWait}
	stopping := fmt.Sprintf("engine %s may not take over the sessions of %s", desired.EngineVersion, strings.Join(blockers, ", "))
	for _, s := range sets {
		if s.Replicas > 0 {
			p.Stop = append(p.Stop, s.Key())
		}
	}
	if len(p.Stop) > 0 {
		p.Action = ActionStopWorkers
		p.Message = fmt.Sprintf("stopping every worker before starting engine %s: %s", desired.EngineVersion, stopping)
		return p
	}
	n, terminating := len(obs.Pods), 0
	for _, pod := range obs.Pods {
		if pod.Terminating {
			terminating++
		}
	}
	for _, s := range sets {
		if s.TerminatingReplicas != nil {
			n = max(n, int(s.StatusReplicas+*s.TerminatingReplicas))
		}
	}
	if n > 0 {
		p.Message = fmt.Sprintf("%d old workers remain (%d terminating); %s", n, terminating, stopping)
		return p
	}
	gate := gatePlan(obs, opts, stopping)
	if gate != nil {
		gate.Strategy, gate.Phase, gate.Action = StrategyStopOldFirst, PhaseWaitingForOldWorkersStopped, ActionWait
		return *gate
	}
	p.Action = ActionApply
	p.Phase = PhaseRollingUpdate
	p.Message = fmt.Sprintf("no old worker remains or polls the task queue; starting engine %s", desired.EngineVersion)
	return p
}

// gatePlan is the last check before new workers start where old ones may
// not run beside them, or nil once it passes.
func gatePlan(obs Observed, opts Options, stopping string) *Plan {
	p := &Plan{}
	switch {
	case obs.Gate == nil:
		p.NeedsGate = true
		p.Message = "checking that no old worker remains or polls the task queue; " + stopping
	case len(obs.Gate.Pods) > 0:
		p.Message = fmt.Sprintf("%d old workers remain, as the API server lists them; %s", len(obs.Gate.Pods), stopping)
		p.RecheckAfter = opts.RecheckInterval
	case obs.Gate.PollersError != "":
		p.Message = "cannot tell whether old workers still poll the task queue: " + obs.Gate.PollersError
		p.RecheckAfter = opts.RecheckInterval
	default:
		live := livePollers(obs.Gate.Pollers, obs.Now, opts.PollerQuietPeriod)
		if len(live) == 0 {
			return nil
		}
		latest := live[0].LastAccess
		identities := make([]string, 0, len(live))
		for _, l := range live {
			if l.LastAccess.After(latest) {
				latest = l.LastAccess
			}
			identities = append(identities, l.Identity)
		}
		slices.Sort(identities)
		p.Message = fmt.Sprintf("workers %s polled the task queue %s ago; new workers start once none has polled for %s",
			strings.Join(slices.Compact(identities), ", "), obs.Now.Sub(latest).Round(time.Second), opts.PollerQuietPeriod)
		p.RecheckAfter = max(latest.Add(opts.PollerQuietPeriod).Sub(obs.Now), time.Second)
	}
	return p
}

// allSets is every worker set: the unversioned Deployment, if any, and the
// versioned ones.
func allSets(obs Observed) []WorkerSet {
	var out []WorkerSet
	if obs.Deployment != nil {
		out = append(out, WorkerSet{Deployment: *obs.Deployment})
	}
	return append(out, obs.Sets...)
}

func findSet(sets []WorkerSet, key string) *WorkerSet {
	for i := range sets {
		if sets[i].Key() == key {
			return &sets[i]
		}
	}
	return nil
}

// blockingSets lists the old worker versions whose sessions may not be
// handed over to the desired workers, and says whether any of them runs:
// has replicas or pods.
func blockingSets(desired Desired, obs Observed, sets []WorkerSet) (names []string, running bool) {
	key := keyOf(desired.Worker, desired.Versioned)
	var out []string
	add := func(w Worker, versioned, runs bool) {
		if keyOf(w, versioned) == key || MayHandOver(w, versioned, desired) {
			return
		}
		running = running || runs
		name := "engine " + w.EngineVersion
		if w.EngineVersion == "" {
			name = "an unlabelled version"
		}
		if !slices.Contains(out, name) {
			out = append(out, name)
		}
	}
	for _, s := range sets {
		add(s.Template, s.Versioned, s.Replicas > 0)
	}
	for _, pod := range obs.Pods {
		add(pod.Worker, pod.Versioned, true)
	}
	slices.Sort(out)
	return out, running
}

func podsOf(pods []Pod, key string) int {
	n := 0
	for _, p := range pods {
		if keyOf(p.Worker, p.Versioned) == key {
			n++
		}
	}
	return n
}

func onlyDesiredPods(pods []Pod, key string, w Worker) bool {
	for _, p := range pods {
		if keyOf(p.Worker, p.Versioned) != key || p.Worker != w || p.Terminating {
			return false
		}
	}
	return true
}

func appendNew(list []string, s string) []string {
	if slices.Contains(list, s) {
		return list
	}
	return append(list, s)
}

func describeKey(key string, w Worker) string {
	if key == Unversioned {
		return fmt.Sprintf("the unversioned workers of engine %s", w.EngineVersion)
	}
	return "version " + key
}

// versionedStatus reports the desired version first, then every other
// version with a set, pods, or an engine record. An unversioned set and a
// versioned one of the same image are one version: the same code.
func versionedStatus(desired Desired, obs Observed, p Plan) []VersionStatus {
	var out []VersionStatus
	get := func(w Worker, buildID string) *VersionStatus {
		for i := range out {
			if out[i].BuildID == buildID {
				return &out[i]
			}
		}
		out = append(out, VersionStatus{Worker: w, BuildID: buildID, State: StateDraining})
		return &out[len(out)-1]
	}
	want := get(desired.Worker, desired.BuildID())
	switch p.Phase {
	case PhaseComplete, PhaseDraining:
		want.State = StateCurrent
	case PhaseWaitingForOldWorkersStopped:
		want.State = StatePending
	default:
		// A current version that rolls in place stays current.
		want.State = StateRamping
		if obs.WorkerDeployment != nil && obs.WorkerDeployment.Error == "" && obs.WorkerDeployment.Current == keyOf(desired.Worker, desired.Versioned) &&
			(desired.Versioned || len(obs.WorkerDeployment.Versions) > 0) {
			want.State = StateCurrent
		}
	}
	for _, s := range allSets(obs) {
		e := get(s.Template, s.Template.BuildID())
		// Until the desired version takes over, the engine's current one
		// still takes new sessions.
		if e != want && obs.WorkerDeployment != nil && obs.WorkerDeployment.Error == "" && s.Key() == obs.WorkerDeployment.Current && want.State != StateCurrent {
			e.State = StateCurrent
		}
	}
	for _, pod := range obs.Pods {
		e := get(pod.Worker, pod.BuildID())
		switch {
		case pod.Terminating:
			e.TerminatingPods++
		case pod.Ready:
			e.Replicas++
			e.ReadyReplicas++
		default:
			e.Replicas++
		}
	}
	// A set this pass removes has no worker left to drain: the next pass,
	// which no longer sees the set, finds the version in the status and
	// deletes its engine record.
	for _, k := range p.Remove {
		for i := range out {
			if out[i].BuildID == k && k != Unversioned && out[i].State == StateDraining {
				out[i].State = StateDrained
			}
		}
	}
	if obs.WorkerDeployment != nil {
		for _, v := range obs.WorkerDeployment.Versions {
			e := get(Worker{}, v.BuildID)
			if e.Image == "" && e.State == StateDraining {
				e.State = StateDrained
				e.EngineVersion, _, _ = strings.Cut(v.BuildID, "-")
			}
		}
	}
	for i := range out {
		out[i].Since = obs.Now
		for _, prev := range obs.Previous {
			if prev.BuildID == out[i].BuildID && prev.State == out[i].State && !prev.Since.IsZero() {
				out[i].Since = prev.Since
			}
		}
	}
	slices.SortStableFunc(out[1:], func(a, b VersionStatus) int { return strings.Compare(a.BuildID, b.BuildID) })
	return out
}
