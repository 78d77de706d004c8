package flowclaim

import (
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/stepwise-run/stepwise/internal/tenancy"
)

func TestElect(t *testing.T) {
	t0 := metav1.NewTime(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	t1 := metav1.NewTime(t0.Add(time.Minute))
	c := func(ns, name string, created metav1.Time) Claimant {
		return Claimant{Key: types.NamespacedName{Namespace: ns, Name: name}, Created: created}
	}
	tests := []struct {
		name       string
		holders    []Claimant
		wantWinner string
	}{
		{"the oldest holder keeps the claim", []Claimant{c("b", "young", t1), c("a", "old", t0)}, "a/old"},
		{"the same age falls back to namespace and name", []Claimant{c("b", "x", t0), c("a", "y", t0)}, "a/y"},
		{"one holder keeps it alone", []Claimant{c("a", "only", t1)}, "a/only"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := Elect(tt.holders).Key.String(); got != tt.wantWinner {
				t.Errorf("winner = %s, want %s", got, tt.wantWinner)
			}
			// The order the holders were found in never matters.
			reversed := make([]Claimant, len(tt.holders))
			for i, cl := range tt.holders {
				reversed[len(reversed)-1-i] = cl
			}
			if got := Elect(reversed).Key.String(); got != tt.wantWinner {
				t.Errorf("winner of reversed list = %s, want %s", got, tt.wantWinner)
			}
		})
	}
}

func TestAClaimsLabelNamesOneEngineAndOneSetOfNames(t *testing.T) {
	holder := Claim{EngineID: "engine-1", Names: tenancy.Tenant("team-a", "SupportAgent")}.Label()
	if again := (Claim{EngineID: "engine-1", Names: tenancy.Tenant("team-a", "SupportAgent")}).Label(); again != holder {
		t.Errorf("one engine's claim of one Agent's names = %s, then %s", holder, again)
	}
	// A label value.
	if len(holder) != 32 || strings.Trim(holder, "0123456789abcdef") != "" {
		t.Errorf("claim = %q, want 32 hex digits", holder)
	}
	for name, other := range map[string]string{
		"another engine":    Claim{EngineID: "engine-2", Names: tenancy.Tenant("team-a", "SupportAgent")}.Label(),
		"another namespace": Claim{EngineID: "engine-1", Names: tenancy.Tenant("team-b", "SupportAgent")}.Label(),
		"another Flow type": Claim{EngineID: "engine-1", Names: tenancy.Tenant("team-a", "supportagent")}.Label(),
		"the shared names":  Claim{EngineID: "engine-1", Names: tenancy.Shared("SupportAgent")}.Label(),
	} {
		if other == holder {
			t.Errorf("%s shares the holder's claim", name)
		}
	}
}

func TestWorkersLabelTheirOwnNamesAndTheSharedOnesWhileTheyServeThem(t *testing.T) {
	own := tenancy.Tenant("team-a", "SupportAgent")
	alone := Labels(OfWorkers("engine-1", own, false))
	if len(alone) != 1 || alone[LabelFlowClaim] != (Claim{EngineID: "engine-1", Names: own}).Label() {
		t.Errorf("labels of workers on their own names = %v", alone)
	}
	moving := Labels(OfWorkers("engine-1", own, true))
	if moving[LabelFlowClaim] != alone[LabelFlowClaim] ||
		moving[LabelSharedFlowClaim] != (Claim{EngineID: "engine-1", Names: tenancy.Shared("SupportAgent")}).Label() {
		t.Errorf("labels of workers moving sessions from the shared names = %v", moving)
	}
}
