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
	c := func(ns, name string, created metav1.Time) claimant {
		return claimant{key: types.NamespacedName{Namespace: ns, Name: name}, created: created}
	}
	tests := []struct {
		name       string
		holders    []claimant
		wantWinner string
	}{
		{"the oldest holder keeps the claim", []claimant{c("b", "young", t1), c("a", "old", t0)}, "a/old"},
		{"the same age falls back to namespace and name", []claimant{c("b", "x", t0), c("a", "y", t0)}, "a/y"},
		{"one holder keeps it alone", []claimant{c("a", "only", t1)}, "a/only"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := electClaimant(tt.holders).key.String(); got != tt.wantWinner {
				t.Errorf("winner = %s, want %s", got, tt.wantWinner)
			}
			// The order the holders were found in never matters.
			reversed := make([]claimant, len(tt.holders))
			for i, cl := range tt.holders {
				reversed[len(reversed)-1-i] = cl
			}
			if got := electClaimant(reversed).key.String(); got != tt.wantWinner {
				t.Errorf("winner of reversed list = %s, want %s", got, tt.wantWinner)
			}
		})
	}
}
