// Package rollout holds the worker version rules and the rollout planner.
//
// The rules are data: each engine version says which earlier versions its
// workers may run beside on one task queue, and which session features it
// brings. The planner turns an Agent's desired workers and what the cluster
// and the engine report into one plan; the controller carries it out. Both
// are plain Go, so every case is a table test without a cluster.
package rollout

import (
	"slices"
	"strconv"
	"strings"

	"github.com/stepwise-run/stepwise/internal/version"
)

// Feature is a session capability that only workers of some engine versions
// serve. A feature is in effect for a Flow type only while every worker that
// can take its sessions runs a version that has it.
type Feature string

// Session features, named as status lists them.
const (
	// FeatureSessionSettings: update_session_settings, and the model and
	// tool choices it carries.
	FeatureSessionSettings Feature = "sessionSettings"
	// FeatureSteering: steer_user_message, delete_queued_message and
	// cancel_turn.
	FeatureSteering Feature = "steering"
	// FeaturePlans: plan mode and execute_plan.
	FeaturePlans Feature = "plans"
	// FeatureOrderedWrites: writes of one model response that run one after
	// another, each after the one before it succeeded.
	FeatureOrderedWrites Feature = "orderedWrites"
	// FeatureImages: send_user_message with images, and tool results with
	// images, shown to the model from the agent's media store.
	FeatureImages Feature = "images"
)

// Release is one engine version's row of the rules.
type Release struct {
	// EngineVersion is the version this row describes.
	EngineVersion string
	// RunsBeside lists the earlier engine versions whose workers may poll
	// one task queue together with this version's: each can replay every
	// history the other writes while the features this version adds are
	// not in effect. Every earlier version not listed must be stopped
	// before a worker of this version starts.
	RunsBeside []string
	// Adds lists the session features this version brings.
	Adds []Feature
	// Changes says, for people, what this version changed in the session
	// Flow and why older workers cannot run beside it.
	Changes string
	// MovesBetweenTurns says the version's workers can join a Temporal
	// Worker Deployment: each session is pinned to the worker version that
	// started it and moves to the deployment's current version between
	// turns, by continuing as new, so no turn ever runs on two versions.
	// The versioned strategy needs it of the version it rolls from.
	MovesBetweenTurns bool
	// OwnNames says the version's workers keep an Agent's sessions under
	// names of its own Kubernetes namespace (internal/tenancy): its task
	// queue, its Worker Deployment, its sessions' workflow IDs and its
	// spend counter. Earlier versions know only the names one Flow type
	// shares across the whole Temporal namespace.
	OwnNames bool
	// FlowGraphDigest is the digest of this version's session Flow graph
	// document for the Flow type GraphCheckFlowType. A test recomputes it,
	// so a change to the session Flow that keeps the version fails until
	// the version is raised and its row added. The digests are of the
	// document as session.FlowGraphSchema spells it: a change of that
	// schema alone records every row's digest again and raises no version,
	// since no session runs differently (the replay tests hold that).
	FlowGraphDigest string
}

// GraphCheckFlowType is the Flow type whose graph digests the rules record.
const GraphCheckFlowType = "RulesCheck"

// Releases are the rules, oldest first; the last is this build's engine
// version. A release that changes the session Flow adds its row.
var Releases = []Release{
	{
		EngineVersion:   "0.1.0",
		Changes:         "The first session Flow.",
		FlowGraphDigest: "sha256:9d7a744c14d87cc47879e7ff55aefe2682784d1d8947e1f373bbdc82f052d1de",
	},
	{
		EngineVersion: "0.2.0",
		Adds:          []Feature{FeatureSessionSettings, FeatureSteering, FeaturePlans},
		Changes: "Updates replace signals for every session action, turns continue as new runs, and compaction, " +
			"tool tasks, steering, cancel_turn, plans and session settings arrive: a 0.1.0 worker cannot replay " +
			"a history with 0.2.0 updates.",
		FlowGraphDigest: "sha256:27014d4472ed7c668667414390c27bbac43349131cfd49e898da04ea01b7ff6d",
	},
	{
		EngineVersion: "0.3.0",
		Adds:          []Feature{FeatureOrderedWrites},
		Changes: "Ordered writes are kept in session state: a 0.2.0 worker must not replay a turn that holds " +
			"one, since it would run the queued writes at once.",
		FlowGraphDigest: "sha256:c87af292b2b5a6d2b76eca22f6fd13c7978f28bb3f3667dcd5c320b5d784d097",
	},
	{
		EngineVersion: "0.4.0",
		Changes: "The active Step types are written once per workflow task rather than once per change: a 0.3.0 " +
			"worker replaying a 0.4.0 history would write them more often and fail replay.",
		FlowGraphDigest: "sha256:e801422f13b21115399c54deb4951223914f75dd5c697c8159cabc7192115969",
	},
	{
		EngineVersion:     "0.5.0",
		RunsBeside:        []string{"0.4.0"},
		MovesBetweenTurns: true,
		Changes: "Workers can join a Temporal Worker Deployment: a session is pinned to the worker version that " +
			"started it and, between turns, continues as new on the current version, woken by the move signal " +
			"when idle. Without versioning its histories are 0.4.0's, so the two run beside each other.",
		FlowGraphDigest: "sha256:54841cbc9f78f0b8a6ded29a6463520c7bae61a7846925b042be9bd2dce16895",
	},
	{
		EngineVersion:     "0.6.0",
		RunsBeside:        []string{"0.4.0", "0.5.0"},
		Adds:              []Feature{FeatureImages},
		MovesBetweenTurns: true,
		Changes: "User messages and tool results carry image references, which the model sees with the bytes " +
			"read from the agent's media store. The Steps and commands are 0.5.0's, so the two run beside each " +
			"other, but a 0.5.0 worker drops the references of a session it takes: images wait until every " +
			"worker runs 0.6.0.",
		FlowGraphDigest: "sha256:da4d2a90804e064e3619abe84a2a8db5646a1d63295d6ee2e8ad6e25c193bf26",
	},
	{
		EngineVersion:     "0.7.0",
		MovesBetweenTurns: true,
		Changes: "A steered or cancelled turn asks no question for a tool: a tool that asks once its turn was " +
			"steered or cancelled, or whose question was answered before the steer, is rejected rather than run " +
			"again. A run records this revision in its version marker, which a 0.6.0 worker cannot replay, so " +
			"old workers stop first, or sessions move to 0.7.0 between turns in a Worker Deployment.",
		FlowGraphDigest: "sha256:9ec3542d1e737ae2c180cb136587106f8a3b52da12240338dc7d87f8a0e60229",
	},
	{
		EngineVersion:     "0.8.0",
		MovesBetweenTurns: true,
		OwnNames:          true,
		Changes: "Every name on the engine carries the Agent's Kubernetes namespace: a session starts under a " +
			"workflow ID, task queue and Worker Deployment of its Agent's own and records its owner, and a session " +
			"of the shared names of 0.7.0 and earlier moves to them between turns. A run records this revision in " +
			"its version marker, which a 0.7.0 worker cannot replay, so old workers stop first, or sessions move " +
			"to 0.8.0 between turns in a Worker Deployment.",
		FlowGraphDigest: "sha256:f9e74388022ef5231f06f2bff5980c00861160ff5561a94254ebd933d8fdbb35",
	},
}

// ReleaseOf returns the row of an engine version this build knows.
func ReleaseOf(engineVersion string) (Release, bool) {
	i := slices.IndexFunc(Releases, func(r Release) bool { return r.EngineVersion == engineVersion })
	if i < 0 {
		return Release{}, false
	}
	return Releases[i], true
}

// Known says whether the rules have a row for an engine version.
func Known(engineVersion string) bool {
	_, ok := ReleaseOf(engineVersion)
	return ok
}

// Current is this build's engine version.
func Current() string { return version.EngineVersion }

// RunBeside says whether workers of two engine versions may poll one task
// queue together. The newer version's row decides; a version the rules do
// not know runs beside nothing but itself, because nothing says it can.
func RunBeside(a, b string) bool {
	if a == b {
		return true
	}
	ra, okA := rank(a)
	rb, okB := rank(b)
	if !okA || !okB {
		return false
	}
	older, newer := Releases[min(ra, rb)], Releases[max(ra, rb)]
	return slices.Contains(newer.RunsBeside, older.EngineVersion)
}

// Features lists the session features workers of an engine version serve:
// what it and every version before it added. An unknown version serves
// none.
func Features(engineVersion string) []Feature {
	r, ok := rank(engineVersion)
	if !ok {
		return nil
	}
	var out []Feature
	for _, release := range Releases[:r+1] {
		out = append(out, release.Adds...)
	}
	return out
}

// FeaturesInEffect lists the features every given engine version serves, in
// the order the rules add them: what a session may use while workers of all
// these versions can take it. No versions means no workers, and nothing is
// in effect.
func FeaturesInEffect(engineVersions []string) []Feature {
	if len(engineVersions) == 0 {
		return nil
	}
	out := Features(engineVersions[0])
	for _, v := range engineVersions[1:] {
		has := Features(v)
		out = slices.DeleteFunc(out, func(f Feature) bool { return !slices.Contains(has, f) })
	}
	return out
}

// Lacking returns the first of the given engine versions whose workers do
// not serve a feature, for the message that refuses it.
func Lacking(feature Feature, engineVersions []string) (string, bool) {
	for _, v := range engineVersions {
		if !slices.Contains(Features(v), feature) {
			return v, true
		}
	}
	return "", false
}

func rank(engineVersion string) (int, bool) {
	i := slices.IndexFunc(Releases, func(r Release) bool { return r.EngineVersion == engineVersion })
	return i, i >= 0
}

// Serves says whether workers of an engine version serve a feature. A
// version newer than every row, from a newer release than this build, is
// taken to serve every feature this build knows: releases only add.
func Serves(engineVersion string, feature Feature) bool {
	if Known(engineVersion) {
		return slices.Contains(Features(engineVersion), feature)
	}
	return newerThan(engineVersion, Releases[len(Releases)-1].EngineVersion)
}

// MovesBetweenTurnsIn says whether sessions on workers of an engine version
// move to a Worker Deployment's current version between turns. A version
// newer than every row is taken to, as releases only add.
func MovesBetweenTurnsIn(engineVersion string) bool {
	if r, ok := ReleaseOf(engineVersion); ok {
		return r.MovesBetweenTurns
	}
	return newerThan(engineVersion, Releases[len(Releases)-1].EngineVersion)
}

// OwnNamesIn says whether workers of an engine version keep an Agent's
// sessions under its own names. A version newer than every row is taken
// to, as releases only add.
func OwnNamesIn(engineVersion string) bool {
	if r, ok := ReleaseOf(engineVersion); ok {
		return r.OwnNames
	}
	return newerThan(engineVersion, Releases[len(Releases)-1].EngineVersion)
}

// Since is the engine version that brought a feature.
func Since(feature Feature) string {
	for _, r := range Releases {
		if slices.Contains(r.Adds, feature) {
			return r.EngineVersion
		}
	}
	return ""
}

// newerThan compares two versions MAJOR.MINOR.PATCH; a pre-release or a
// malformed version is never newer, since nothing says what it serves.
func newerThan(a, b string) bool {
	pa, okA := versionParts(a)
	pb, okB := versionParts(b)
	if !okA || !okB {
		return false
	}
	return slices.Compare(pa, pb) > 0
}

func versionParts(v string) ([]int, bool) {
	fields := strings.Split(strings.TrimPrefix(v, "v"), ".")
	if len(fields) != 3 {
		return nil, false
	}
	out := make([]int, 3)
	for i, f := range fields {
		n, err := strconv.Atoi(f)
		if err != nil || n < 0 {
			return nil, false
		}
		out[i] = n
	}
	return out, true
}
