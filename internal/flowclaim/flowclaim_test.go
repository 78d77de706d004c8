package flowclaim

import (
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
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
