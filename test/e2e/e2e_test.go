package e2e

import (
	"testing"
	"time"
)

const (
	operatorNamespace = "stepwise-system"
	// wait bounds every wait on the cluster: generous, because a shared
	// two-core machine may be slow, and never an assertion on speed.
	wait = 4 * time.Minute
	// pollerQuietPeriod is the operator's, above the engine's long poll.
	pollerQuietPeriod = 15 * time.Second
)

// TestOperatorOnRealPods walks what a platform team does, in order: install
// the previous release and upgrade it to this one, apply the samples, run a
// session, scale, change task slots, rotate a Secret, lose a pod during a
// tool call, roll workers, and keep two teams apart on one engine.
func TestOperatorOnRealPods(t *testing.T) {
	steps := []struct {
		name string
		run  func(t *testing.T)
	}{
		{"the previous release installs and leaves sessions mid-turn and waiting for approval", installPreviousRelease},
		{"the chart upgrades to this build and every session moves to its Agent's own names, none lost, no export repeated", upgradeFromPreviousRelease},
		{"the samples' support workers become Ready and run the demo session", supportDemo},
		{"the gateway runs a session of the worker pods for a user with the verbs, streams its events, and refuses a user without", gatewayOnPods},
		{"kubectl scale moves running pods", scaleAgent},
		{"a HorizontalPodAutoscaler scales the Agent through its scale subresource", autoscaleAgent},
		{"task slots reach the worker", taskSlots},
		{"a rotated Secret rolls the pods and the session continues", rotateSecret},
		{"a pod deleted during a tool call finishes the Step and the session goes on", podDeletedDuringToolCall},
		{"pods run with the rendered security context", securityContext},
		{"a rollback and an upgrade across engine versions stop every old worker first, under load", stopOldFirstUnderLoad},
		{"a new image and its revert roll as Worker Deployment versions while sessions keep answering", versionedUpgradeUnderLoad},
		{"a session feature is refused while a worker of an engine without it polls, and allowed once it stops", featureGateOnTheCluster},
		{"an upgrade across an incompatible engine version moves each session at its next turn while sessions keep answering", upgradeAcrossEngineVersions},
		{"an Agent with an S3 MediaStore shows the model a PNG from the CLI and an MCP tool's image", imagesOnTheCluster},
		{"two namespaces on one Temporal namespace never reach each other's sessions, workers or credentials", tenantsApart},
		{"a store on the node is its namespace's alone, and one reached through a symbolic link never starts a worker", hostMediaStoresPerNamespace},
	}
	for _, s := range steps {
		if !t.Run(s.name, s.run) {
			t.Fatalf("stopping after %q failed", s.name)
		}
	}
}
