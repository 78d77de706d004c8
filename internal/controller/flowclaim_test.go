package controller

import (
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

func TestElectClaimant(t *testing.T) {
	t0 := metav1.NewTime(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	t1 := metav1.NewTime(t0.Add(time.Minute))
	c := func(ns, name string, created metav1.Time, holds bool) claimant {
		return claimant{key: types.NamespacedName{Namespace: ns, Name: name}, created: created, holds: holds}
	}
	tests := []struct {
		name       string
		claimants  []claimant
		wantWinner string
	}{
		{"the oldest wins when none holds", []claimant{c("a", "new", t1, false), c("a", "old", t0, false)}, "a/old"},
		{"a holder wins over an older Agent", []claimant{c("a", "old", t0, false), c("b", "holder", t1, true)}, "b/holder"},
		{"among holders, the oldest", []claimant{c("b", "young", t1, true), c("a", "old", t0, true)}, "a/old"},
		{"the same age falls back to namespace and name", []claimant{c("b", "x", t0, false), c("a", "y", t0, false)}, "a/y"},
		{"one claimant wins alone", []claimant{c("a", "only", t1, false)}, "a/only"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := electClaimant(tt.claimants).key.String(); got != tt.wantWinner {
				t.Errorf("winner = %s, want %s", got, tt.wantWinner)
			}
			// Order of discovery never matters.
			reversed := make([]claimant, len(tt.claimants))
			for i, cl := range tt.claimants {
				reversed[len(reversed)-1-i] = cl
			}
			if got := electClaimant(reversed).key.String(); got != tt.wantWinner {
				t.Errorf("winner of reversed list = %s, want %s", got, tt.wantWinner)
			}
		})
	}
}
