package render

import (
	"slices"
	"strings"
	"testing"

	"github.com/stepwise-run/stepwise/internal/rollout"
	"github.com/stepwise-run/stepwise/internal/tenancy"
)

func TestVersionedWorkerDeployment(t *testing.T) {
	agent := testAgent()
	w := render(t, agent, Observed{})
	container := w.Deployment.Spec.Template.Spec.Containers[0]
	unversionedArgs := slices.Clone(container.Args)
	buildID := rollout.Worker{EngineVersion: w.Deployment.Spec.Template.Labels[LabelEngineVersion], Image: *container.Image}.BuildID()

	names := tenancy.Tenant(agent.Namespace, agent.Spec.FlowType)
	d := Versioned(w.Deployment, agent.Name, names)
	if got, want := *d.Name, VersionedWorkerName(agent.Name, buildID); got != want || !strings.HasPrefix(got, WorkerName(agent.Name)+"-") {
		t.Errorf("name = %s, want %s", got, want)
	}
	for what, labels := range map[string]map[string]string{
		"Deployment": d.Labels, "selector": d.Spec.Selector.MatchLabels, "pod": d.Spec.Template.Labels,
	} {
		if labels[LabelBuildID] != buildID {
			t.Errorf("%s label %s = %q, want %s", what, LabelBuildID, labels[LabelBuildID], buildID)
		}
	}
	for k, v := range SelectorLabels(agent.Name) {
		if d.Spec.Selector.MatchLabels[k] != v {
			t.Errorf("the selector lost %s=%s: the disruption budget selects every version's pods by it", k, v)
		}
	}
	args := d.Spec.Template.Spec.Containers[0].Args
	want := append(slices.Clone(unversionedArgs), "--deployment-name=stepwise/team/SupportAgent", "--build-id="+buildID)
	if !slices.Equal(args, want) {
		t.Errorf("args = %q, want %q", args, want)
	}
	if name := names.WorkerDeployment(); strings.Contains(name, ".") {
		t.Errorf("Worker Deployment name %q holds a \".\", which Temporal refuses", name)
	}
	if got, ok := IsVersioned(d.Spec.Template.Labels); !ok || got != buildID {
		t.Errorf("IsVersioned(pod labels) = %q, %v", got, ok)
	}
	if _, ok := IsVersioned(SelectorLabels(agent.Name)); ok {
		t.Error("unversioned labels read as versioned")
	}
}

func TestVersionedWorkerNameIsPerBuildID(t *testing.T) {
	image := "registry.example/worker:1"
	a := rollout.Worker{EngineVersion: "0.5.0", Image: image}.BuildID()
	b := rollout.Worker{EngineVersion: "0.6.0", Image: image}.BuildID()
	if VersionedWorkerName("support", a) == VersionedWorkerName("support", b) {
		t.Errorf("one image declared as two engine versions gets one Deployment name, %s", VersionedWorkerName("support", a))
	}
}
