package rollout

import (
	"cmp"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"slices"
	"strings"
	"time"
)

// Worker is what a worker pod runs: an image carrying one engine version.
type Worker struct {
	EngineVersion string
	Image         string
}

// BuildID names a worker version on the engine and in status: the engine
// version, for people, and a digest of the image, so two images of one
// engine version are two versions.
func (w Worker) BuildID() string {
	sum := sha256.Sum256([]byte(w.Image))
	return w.EngineVersion + "-" + hex.EncodeToString(sum[:])[:12]
}

// Strategy is how a rollout moves an Agent's workers to a new version.
type Strategy string

// Strategies.
const (
	// StrategyRolling starts new workers beside the old ones, which the
	// rules allow, and stops the old ones as the new become available.
	StrategyRolling Strategy = "Rolling"
	// StrategyStopOldFirst stops every worker the new version may not run
	// beside, waits until none exists and none polls the task queue, and
	// only then starts the new ones. Sessions wait meanwhile; none is run by
	// a worker that cannot replay it.
	StrategyStopOldFirst Strategy = "StopOldFirst"
)

// Action is what the executor does in one pass.
type Action string

// Actions.
const (
	// ActionApply applies the desired workers: their template and replicas.
	ActionApply Action = "Apply"
	// ActionStopWorkers scales the worker Deployment to zero and keeps its
	// template, so no new worker starts while old ones stop.
	ActionStopWorkers Action = "StopWorkers"
	// ActionWait changes nothing; the executor looks again after
	// Plan.RecheckAfter.
	ActionWait Action = "Wait"
)

// Phase is where a rollout stands; the Agent's Progressing condition
// reports it as its reason, so these names are stable.
type Phase string

// Phases.
const (
	// PhaseComplete: every desired worker is available and no other runs.
	PhaseComplete Phase = "RolloutComplete"
	// PhaseRollingUpdate: new workers start beside old ones the rules let
	// them run beside, or the desired workers are not all available yet.
	PhaseRollingUpdate Phase = "RollingUpdate"
	// PhaseWaitingForOldWorkersStopped: workers the new version may not run
	// beside are stopping, or may still poll the task queue; the new ones
	// start once none does.
	PhaseWaitingForOldWorkersStopped Phase = "WaitingForOldWorkersStopped"
)

// State is where one worker version stands in a rollout.
type State string

// States.
const (
	// StatePending: the desired version waits for old workers to stop.
	StatePending State = "Pending"
	// StateRamping: the desired version is starting.
	StateRamping State = "Ramping"
	// StateCurrent: the desired version runs, fully available.
	StateCurrent State = "Current"
	// StateDraining: an old version whose workers are stopping.
	StateDraining State = "Draining"
)

// Desired is the workers an Agent asks for.
type Desired struct {
	Worker
	Replicas int32
	// Versioned is true when the desired workers join the Agent's Worker
	// Deployment; see VersioningWanted.
	Versioned bool
}

// Deployment is the worker Deployment as observed.
type Deployment struct {
	// Template is the worker its pod template runs.
	Template Worker
	// Replicas is spec.replicas.
	Replicas int32
	// StatusReplicas counts its pods that are not terminating.
	StatusReplicas int32
	// TerminatingReplicas counts its terminating pods, when the API server
	// reports it (status.terminatingReplicas).
	TerminatingReplicas *int32
	// UpdatedReplicas and AvailableReplicas are as the Deployment reports.
	UpdatedReplicas, AvailableReplicas int32
	// Observed is true when the Deployment's status is of its current spec.
	Observed bool
}

// Pod is one worker pod.
type Pod struct {
	Name string
	Worker
	Ready       bool
	Terminating bool
	// Versioned is true for a pod of a versioned worker set.
	Versioned bool
}

// Poller is a worker the engine saw poll the Agent's task queue.
type Poller struct {
	Identity      string
	TaskQueueType string
	LastAccess    time.Time
}

// Gate is what is read fresh, straight from the API server and the engine,
// before new workers start where old ones may not run beside them.
type Gate struct {
	// Pods are every worker pod of the Agent, terminating ones included.
	Pods []Pod
	// Pollers are the task queue's pollers, workflow and activity.
	Pollers []Poller
	// PollersError says why the pollers could not be read; the gate stays
	// shut meanwhile.
	PollersError string
}

// VersionStatus is one worker version as status reports it.
type VersionStatus struct {
	Worker
	BuildID                                  string
	Replicas, ReadyReplicas, TerminatingPods int32
	State                                    State
	Since                                    time.Time
}

// Observed is everything the planner knows in one pass.
type Observed struct {
	// Deployment is the unversioned worker Deployment; nil when it does
	// not exist.
	Deployment *Deployment
	// Sets are the versioned worker Deployments, one per build ID.
	Sets []WorkerSet
	// WorkerDeployment is the Agent's Worker Deployment as Temporal
	// describes it; nil until the planner asks for it with
	// Plan.NeedsWorkerDeployment.
	WorkerDeployment *WorkerDeploymentInfo
	// Pods are the Agent's worker pods as last seen, terminating included.
	Pods []Pod
	// Gate is nil until the planner asks for it with Plan.NeedsGate.
	Gate *Gate
	// Previous is status.workerVersions before this pass; a version that
	// keeps its state keeps its Since.
	Previous []VersionStatus
	// Now is the time of the pass.
	Now time.Time
}

// Options tune the planner.
type Options struct {
	// PollerQuietPeriod is how long a worker must not have polled before it
	// counts as stopped. It exceeds the engine's long poll (a minute by
	// default), so a worker in the middle of a poll is never missed.
	PollerQuietPeriod time.Duration
	// RecheckInterval is how soon a waiting rollout looks again.
	RecheckInterval time.Duration
}

// Plan is one pass of a rollout: one action, and what status says.
type Plan struct {
	Strategy Strategy
	Action   Action
	// NeedsGate asks the executor to read the Gate and plan again; the
	// action meanwhile is ActionWait.
	NeedsGate bool
	Phase     Phase
	// Message says, for people, what the rollout waits for.
	Message string
	// RecheckAfter is set when only time tells the planner more, such as a
	// poller going quiet; zero leaves it to the watches.
	RecheckAfter time.Duration
	// Versions are the worker versions, the desired one first.
	Versions []VersionStatus

	// What a versioned rollout does besides applying the desired set;
	// worker sets are named by their key (WorkerSet.Key).

	// NeedsWorkerDeployment asks the executor to describe the Worker
	// Deployment and plan again.
	NeedsWorkerDeployment bool
	// MakeCurrent asks the executor to make CurrentBuildID the version new
	// sessions start on (Unversioned: the unversioned workers).
	MakeCurrent    bool
	CurrentBuildID string
	// Stop lists sets to scale to zero, keeping their template.
	Stop []string
	// Move lists versions whose pinned sessions get the move signal.
	Move []string
	// Unpin lists versions without workers whose pinned sessions the
	// current workers take.
	Unpin []string
	// Remove lists sets to delete: their sessions have moved.
	Remove []string
	// DeleteVersions lists engine records of versions without workers.
	DeleteVersions []string
}

// Decide plans one pass: rolling where the rules let every observed worker
// run beside the desired one, stop-old-first otherwise. It is the whole
// rollout decision, so it sees nothing the executor does not pass in.
func Decide(desired Desired, obs Observed, opts Options) Plan {
	p := planStep(desired, obs, opts)
	p.Versions = versions(desired, obs, p.Phase)
	return p
}

func planStep(desired Desired, obs Observed, opts Options) Plan {
	old := blocking(desired, obs)
	if len(old) == 0 {
		p := Plan{Strategy: StrategyRolling, Action: ActionApply, Phase: PhaseComplete}
		if !complete(desired, obs) {
			p.Phase = PhaseRollingUpdate
			p.Message = fmt.Sprintf("rolling to engine %s, image %s", desired.EngineVersion, desired.Image)
		}
		return p
	}
	p := Plan{Strategy: StrategyStopOldFirst, Phase: PhaseWaitingForOldWorkersStopped, Action: ActionWait}
	stopping := fmt.Sprintf("engine %s may not run beside %s", desired.EngineVersion, strings.Join(old, ", "))
	d := obs.Deployment
	if d == nil {
		d = &Deployment{} // deleted while its pods stop
	}
	if d.Replicas != 0 {
		p.Action = ActionStopWorkers
		p.Message = fmt.Sprintf("stopping every worker before starting engine %s: %s", desired.EngineVersion, stopping)
		return p
	}
	if n, terminating := remaining(obs.Pods, d); n > 0 {
		p.Message = fmt.Sprintf("%d old workers remain (%d terminating); %s", n, terminating, stopping)
		return p
	}
	if obs.Gate == nil {
		p.NeedsGate = true
		p.Message = "checking that no old worker remains or polls the task queue; " + stopping
		return p
	}
	if n := len(obs.Gate.Pods); n > 0 {
		p.Message = fmt.Sprintf("%d old workers remain, as the API server lists them; %s", n, stopping)
		p.RecheckAfter = opts.RecheckInterval
		return p
	}
	if obs.Gate.PollersError != "" {
		p.Message = "cannot tell whether old workers still poll the task queue: " + obs.Gate.PollersError
		p.RecheckAfter = opts.RecheckInterval
		return p
	}
	if live := livePollers(obs.Gate.Pollers, obs.Now, opts.PollerQuietPeriod); len(live) > 0 {
		latest := live[0].LastAccess
		for _, l := range live {
			if l.LastAccess.After(latest) {
				latest = l.LastAccess
			}
		}
		identities := make([]string, 0, len(live))
		for _, l := range live {
			identities = append(identities, l.Identity)
		}
		slices.Sort(identities)
		identities = slices.Compact(identities)
		p.Message = fmt.Sprintf("workers %s polled the task queue %s ago; new workers start once none has polled for %s",
			strings.Join(identities, ", "), obs.Now.Sub(latest).Round(time.Second), opts.PollerQuietPeriod)
		p.RecheckAfter = max(latest.Add(opts.PollerQuietPeriod).Sub(obs.Now), time.Second)
		return p
	}
	p.Action = ActionApply
	p.Phase = PhaseRollingUpdate
	p.Message = fmt.Sprintf("no old worker remains or polls the task queue; starting engine %s", desired.EngineVersion)
	return p
}

// blocking lists, in order, the engine versions of workers that exist or
// would start and may not run beside the desired version: pods, terminating
// ones included, and the Deployment's template.
func blocking(desired Desired, obs Observed) []string {
	var old []string
	add := func(v string) {
		if !RunBeside(v, desired.EngineVersion) && !slices.Contains(old, v) {
			old = append(old, v)
		}
	}
	for _, pod := range obs.Pods {
		add(pod.EngineVersion)
	}
	if d := obs.Deployment; d != nil {
		add(d.Template.EngineVersion)
	}
	for i, v := range old {
		if v == "" {
			old[i] = "an unlabelled version"
		}
	}
	slices.Sort(old)
	return old
}

// remaining counts the workers still there after the Deployment was
// scaled to zero: its own count, and the pod list, whichever sees more.
func remaining(pods []Pod, d *Deployment) (n, terminating int) {
	for _, p := range pods {
		if p.Terminating {
			terminating++
		}
	}
	fromDeployment := int(d.StatusReplicas)
	if d.TerminatingReplicas != nil {
		fromDeployment += int(*d.TerminatingReplicas)
		terminating = max(terminating, int(*d.TerminatingReplicas))
	}
	return max(len(pods), fromDeployment), terminating
}

func livePollers(pollers []Poller, now time.Time, quiet time.Duration) []Poller {
	var live []Poller
	for _, p := range pollers {
		if now.Sub(p.LastAccess) < quiet {
			live = append(live, p)
		}
	}
	return live
}

// complete says whether the desired workers are all there and available,
// and nothing else runs.
func complete(desired Desired, obs Observed) bool {
	d := obs.Deployment
	if d == nil || d.Template != desired.Worker || d.Replicas != desired.Replicas || !d.Observed {
		return false
	}
	if d.UpdatedReplicas < desired.Replicas || d.AvailableReplicas < desired.Replicas {
		return false
	}
	for _, p := range obs.Pods {
		if p.Worker != desired.Worker || p.Terminating {
			return false
		}
	}
	return true
}

// versions reports the desired version and every version with pods.
func versions(desired Desired, obs Observed, phase Phase) []VersionStatus {
	byID := map[string]*VersionStatus{}
	get := func(w Worker) *VersionStatus {
		id := w.BuildID()
		v, ok := byID[id]
		if !ok {
			v = &VersionStatus{Worker: w, BuildID: id, State: StateDraining}
			byID[id] = v
		}
		return v
	}
	want := get(desired.Worker)
	switch phase {
	case PhaseComplete:
		want.State = StateCurrent
	case PhaseWaitingForOldWorkersStopped:
		want.State = StatePending
	default:
		want.State = StateRamping
	}
	for _, pod := range obs.Pods {
		v := get(pod.Worker)
		switch {
		case pod.Terminating:
			v.TerminatingPods++
		case pod.Ready:
			v.Replicas++
			v.ReadyReplicas++
		default:
			v.Replicas++
		}
	}
	out := make([]VersionStatus, 0, len(byID))
	for _, v := range byID {
		v.Since = obs.Now
		for _, prev := range obs.Previous {
			if prev.BuildID == v.BuildID && prev.State == v.State && !prev.Since.IsZero() {
				v.Since = prev.Since
			}
		}
		out = append(out, *v)
	}
	slices.SortFunc(out, func(a, b VersionStatus) int {
		if a.BuildID == want.BuildID || b.BuildID == want.BuildID {
			return boolRank(b.BuildID == want.BuildID) - boolRank(a.BuildID == want.BuildID)
		}
		return cmp.Compare(a.BuildID, b.BuildID)
	})
	return out
}

func boolRank(b bool) int {
	if b {
		return 1
	}
	return 0
}
