package rollout

import (
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/stepwise-run/stepwise/internal/session"
	"github.com/stepwise-run/stepwise/internal/version"
)

// The rules have one row per engine version the build knows, in order, the
// last being this build's, and each row only names versions before it.
func TestTheRulesHaveARowForEveryEngineVersion(t *testing.T) {
	var rows []string
	for i, r := range Releases {
		rows = append(rows, r.EngineVersion)
		for _, beside := range r.RunsBeside {
			if j, ok := rank(beside); !ok || j >= i {
				t.Errorf("%s runs beside %s, which is not an earlier version in the rules", r.EngineVersion, beside)
			}
		}
		if r.Changes == "" {
			t.Errorf("%s does not say what it changed", r.EngineVersion)
		}
	}
	if !slices.Equal(rows, version.EngineVersions) {
		t.Fatalf("the rules have rows %v; the engine versions are %v: a release that changes the session Flow adds its row to Releases", rows, version.EngineVersions)
	}
	if Current() != rows[len(rows)-1] {
		t.Errorf("the current engine version %s is not the last row", Current())
	}
}

// A change to the session Flow graph that keeps the engine version fails
// here: the graph of every version must be the one its row recorded.
func TestEachRowRecordsItsVersionsSessionFlowGraph(t *testing.T) {
	for _, r := range Releases {
		graph, err := session.Graph(GraphCheckFlowType, r.EngineVersion)
		if err != nil {
			t.Fatal(err)
		}
		_, digest, err := graph.Document()
		if err != nil {
			t.Fatal(err)
		}
		if digest != r.FlowGraphDigest {
			t.Errorf("the session Flow graph of engine %s has digest %s, the rules recorded %s: a change to the session Flow "+
				"raises the engine version (internal/version) and adds its row to Releases, with this digest", r.EngineVersion, digest, r.FlowGraphDigest)
		}
	}
}

// Every row has the histories its version recorded, which every later
// version's replay test replays; and no recorded histories lack a row.
func TestEveryRowHasRecordedHistories(t *testing.T) {
	dir := filepath.Join("..", "engine", "testdata", "histories")
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var recorded []string
	for _, e := range entries {
		if e.IsDir() {
			recorded = append(recorded, e.Name())
		}
	}
	var rows []string
	for _, r := range Releases {
		rows = append(rows, r.EngineVersion)
	}
	if !slices.Equal(recorded, rows) {
		t.Errorf("recorded histories are for %v, the rules have %v: `make record-histories` records the current version's", recorded, rows)
	}
}

func TestRunBeside(t *testing.T) {
	saved := Releases
	t.Cleanup(func() { Releases = saved })
	Releases = []Release{
		{EngineVersion: "1.0.0"},
		{EngineVersion: "1.1.0", RunsBeside: []string{"1.0.0"}},
		{EngineVersion: "2.0.0", RunsBeside: []string{"1.1.0"}},
	}
	for _, c := range []struct {
		a, b string
		want bool
	}{
		{"1.0.0", "1.0.0", true},
		{"1.0.0", "1.1.0", true},
		{"1.1.0", "1.0.0", true}, // either order: the newer row decides
		{"1.1.0", "2.0.0", true},
		{"1.0.0", "2.0.0", false}, // not listed: stop first
		{"2.0.0", "1.0.0", false}, // a rollback follows the same rule
		{"3.0.0", "2.0.0", false}, // unknown: nothing says it can
		{"3.0.0", "3.0.0", true},
		{"", "1.0.0", false},
	} {
		if got := RunBeside(c.a, c.b); got != c.want {
			t.Errorf("RunBeside(%q, %q) = %v, want %v", c.a, c.b, got, c.want)
		}
	}
}

func TestTheRulesOfTheReleasedVersions(t *testing.T) {
	for _, c := range []struct {
		a, b string
		want bool
	}{
		{"0.1.0", "0.2.0", false}, // 0.1.0 cannot replay 0.2.0 updates
		{"0.2.0", "0.3.0", false}, // 0.2.0 must not replay an ordered write
		{"0.3.0", "0.4.0", false},
		{"0.4.0", "0.4.0", true},
	} {
		if got := RunBeside(c.a, c.b); got != c.want {
			t.Errorf("RunBeside(%q, %q) = %v, want %v", c.a, c.b, got, c.want)
		}
	}
	if got := Features("0.1.0"); len(got) != 0 {
		t.Errorf("0.1.0 serves %v, want nothing beyond the first Flow", got)
	}
	if got := Features("0.3.0"); !slices.Equal(got, []Feature{FeatureSessionSettings, FeatureSteering, FeaturePlans, FeatureOrderedWrites}) {
		t.Errorf("0.3.0 serves %v", got)
	}
}

func TestFeaturesInEffectAreWhatEveryLiveVersionServes(t *testing.T) {
	for _, c := range []struct {
		name     string
		versions []string
		want     []Feature
	}{
		{"no workers", nil, nil},
		{"one version", []string{"0.2.0"}, []Feature{FeatureSessionSettings, FeatureSteering, FeaturePlans}},
		{"an older version still runs", []string{"0.3.0", "0.2.0"}, []Feature{FeatureSessionSettings, FeatureSteering, FeaturePlans}},
		{"the oldest decides", []string{"0.4.0", "0.1.0"}, nil},
		{"an unknown version serves nothing", []string{"0.4.0", "9.9.9"}, nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			if got := FeaturesInEffect(c.versions); !slices.Equal(got, c.want) {
				t.Errorf("FeaturesInEffect(%v) = %v, want %v", c.versions, got, c.want)
			}
		})
	}
	if v, ok := Lacking(FeatureOrderedWrites, []string{"0.4.0", "0.2.0"}); !ok || v != "0.2.0" {
		t.Errorf("Lacking(orderedWrites) = %q, %v; want 0.2.0", v, ok)
	}
	if _, ok := Lacking(FeatureSteering, []string{"0.4.0", "0.2.0"}); ok {
		t.Error("steering is served by 0.2.0 and 0.4.0, but Lacking names a version")
	}
}

func TestServesAndIdentities(t *testing.T) {
	for _, c := range []struct {
		version string
		feature Feature
		want    bool
	}{
		{"0.1.0", FeatureSteering, false},
		{"0.2.0", FeatureSteering, true},
		{"0.2.0", FeatureOrderedWrites, false},
		{"99.0.0", FeatureOrderedWrites, true}, // a newer release than this build serves what this build knows
		{"0.4.1-rc.1", FeatureSteering, false}, // a pre-release nothing describes
		{"0.0.9", FeatureSteering, false},
		{"garbage", FeatureSteering, false},
	} {
		if got := Serves(c.version, c.feature); got != c.want {
			t.Errorf("Serves(%q, %s) = %v, want %v", c.version, c.feature, got, c.want)
		}
	}
	if Since(FeatureOrderedWrites) != "0.3.0" || Since("nothing") != "" {
		t.Errorf("Since(orderedWrites) = %q", Since(FeatureOrderedWrites))
	}
	id := WorkerIdentity(42, "support-worker-7d9f8-abcde", "0.4.0")
	if id != "42@support-worker-7d9f8-abcde@engine-0.4.0" {
		t.Errorf("identity = %q", id)
	}
	if v, ok := EngineVersionOfIdentity(id); !ok || v != "0.4.0" {
		t.Errorf("EngineVersionOfIdentity(%q) = %q, %v", id, v, ok)
	}
	for _, other := range []string{"42@host@", "42@host", "", "1@engine-x@", "1@h@engine-"} {
		if v, ok := EngineVersionOfIdentity(other); ok {
			t.Errorf("EngineVersionOfIdentity(%q) = %q, want none", other, v)
		}
	}
}

// Only workers that move their sessions between turns may be rolled by
// worker versioning: a session pinned to any other version would stay on it
// until it ends, and its version could never drain.
func TestMovesBetweenTurnsIn(t *testing.T) {
	for _, c := range []struct {
		version string
		want    bool
	}{
		{"0.4.0", false},
		{"0.5.0", true},
		{"99.0.0", true}, // releases only add
		{"0.5.1-rc.1", false},
		{"garbage", false},
	} {
		if got := MovesBetweenTurnsIn(c.version); got != c.want {
			t.Errorf("MovesBetweenTurnsIn(%q) = %v, want %v", c.version, got, c.want)
		}
	}
	if !RunBeside("0.4.0", "0.5.0") {
		t.Error("0.5.0 runs beside 0.4.0: without versioning their histories are the same")
	}
}
