package controller

import (
	"slices"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// claimant is an Agent that claims a Flow type on one engine namespace.
type claimant struct {
	key     types.NamespacedName
	created metav1.Time
	// holds is true when the Agent's applied worker configuration already
	// carries the claim: it runs, or ran, workers for it.
	holds bool
}

// electClaimant picks the one Agent that may run workers for a claim. An
// Agent that already holds it keeps it, so a newcomer never takes workers
// away; among equals the oldest wins, then the first by namespace and name,
// so every pass and every replica of the operator picks the same one.
func electClaimant(claimants []claimant) claimant {
	return slices.MinFunc(claimants, func(a, b claimant) int {
		switch {
		case a.holds != b.holds:
			if a.holds {
				return -1
			}
			return 1
		case !a.created.Equal(&b.created):
			if a.created.Before(&b.created) {
				return -1
			}
			return 1
		}
		return strings.Compare(a.key.String(), b.key.String())
	})
}
