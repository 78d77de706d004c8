package render

import (
	"crypto/sha256"
	"encoding/hex"

	appsv1ac "k8s.io/client-go/applyconfigurations/apps/v1"
	metav1ac "k8s.io/client-go/applyconfigurations/meta/v1"

	"github.com/stepwise-run/stepwise/internal/rollout"
	"github.com/stepwise-run/stepwise/internal/tenancy"
)

// LabelBuildID marks a versioned worker Deployment, its selector and its
// pods with the build ID of the worker version they run; an unversioned
// worker has none.
const LabelBuildID = "agents.stepwise.run/build-id"

// VersionedWorkerName is the name of the worker Deployment of one version:
// the unversioned name with a digest of the build ID, so every version gets
// its own, even one image declared as two engine versions.
func VersionedWorkerName(agentName, buildID string) string {
	sum := sha256.Sum256([]byte(buildID))
	return WorkerName(agentName) + "-" + hex.EncodeToString(sum[:])[:12]
}

// Versioned turns the rendered worker Deployment into the Deployment of its
// worker version: its own name, selector and pod label, and the two worker
// flags that make its workers that version of the Agent's Worker
// Deployment. The flags' values come from the Agent's names and the image
// and engine version, none of them free text.
func Versioned(d *appsv1ac.DeploymentApplyConfiguration, agentName string, names tenancy.Names) *appsv1ac.DeploymentApplyConfiguration {
	spec := d.Spec.Template.Spec
	container := &spec.Containers[0]
	engineVersion := d.Spec.Template.Labels[LabelEngineVersion]
	buildID := rollout.Worker{EngineVersion: engineVersion, Image: *container.Image}.BuildID()

	d.WithName(VersionedWorkerName(agentName, buildID)).WithLabels(map[string]string{LabelBuildID: buildID})
	selector := SelectorLabels(agentName)
	selector[LabelBuildID] = buildID
	d.Spec.WithSelector(metav1ac.LabelSelector().WithMatchLabels(selector))
	d.Spec.Template.WithLabels(map[string]string{LabelBuildID: buildID})
	container.WithArgs("--deployment-name="+names.WorkerDeployment(), "--build-id="+buildID)
	return d
}

// IsVersioned says whether labels are those of a versioned worker
// Deployment or pod, and names its build ID.
func IsVersioned(labels map[string]string) (buildID string, ok bool) {
	buildID, ok = labels[LabelBuildID]
	return buildID, ok
}
