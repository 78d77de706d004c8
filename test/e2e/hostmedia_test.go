package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"

	agentsv1 "github.com/stepwise-run/stepwise/api/v1alpha1"
	"github.com/stepwise-run/stepwise/internal/version"
)

// hostMediaRoot is the host directory the chart allows MediaStores of the
// node in this step: each namespace gets hostMediaRoot/<namespace>.
const hostMediaRoot = "/srv/stepwise-e2e-media"

// hostMediaAgent is an Agent of the stock worker with a MediaStore on the
// node at root.
func hostMediaAgent(name, flowType, root string) string {
	return fmt.Sprintf(`apiVersion: agents.stepwise.run/v1alpha1
kind: MediaStore
metadata: {name: %[1]s, namespace: default}
spec:
  localDirectory: {root: %[2]s}
---
apiVersion: agents.stepwise.run/v1alpha1
kind: Agent
metadata: {name: %[1]s, namespace: default}
spec:
  flowType: %[3]s
  instructions: You look at pictures.
  model: {provider: scripted, name: demo}
  mediaStore: {name: %[1]s}
  workers: {image: %[4]s, engineVersion: %[5]s, replicas: 1}
`, name, root, flowType, image("agent-worker"), version.EngineVersion)
}

// hostMediaStoresPerNamespace allows the node's directories per namespace
// and shows, in real pods, that a store of namespace default reached
// through a symbolic link into another namespace's directory never starts
// a worker, while a plain one does, and that another namespace's
// directory is refused before any pod.
func hostMediaStoresPerNamespace(t *testing.T) {
	mine, theirs := filepath.Join(hostMediaRoot, "default"), filepath.Join(hostMediaRoot, "team-b")
	// A run that was stopped may have left its directories.
	if err := os.RemoveAll(hostMediaRoot); err != nil {
		t.Fatal(err)
	}
	for _, dir := range []string{filepath.Join(mine, "store"), filepath.Join(theirs, "secret-store")} {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		// The workers' user writes images there.
		if err := os.Chmod(dir, 0o777); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() { _ = os.RemoveAll(hostMediaRoot) })
	// A team that may write in its own directory links to another's.
	if err := os.Symlink(filepath.Join(theirs, "secret-store"), filepath.Join(mine, "link")); err != nil {
		t.Fatal(err)
	}
	helm(t, "upgrade", "stepwise", thisChart, "--namespace", operatorNamespace, "--reuse-values",
		"--set", "mediaHostPathRoots={"+hostMediaRoot+"}", "--wait", "--timeout", wait.String())

	apply(t, hostMediaAgent("plain", "HostMediaPlain", filepath.Join(mine, "store")))
	apply(t, hostMediaAgent("linked", "HostMediaLinked", filepath.Join(mine, "link")))
	apply(t, hostMediaAgent("theirs", "HostMediaTheirs", filepath.Join(theirs, "secret-store")))
	t.Cleanup(func() {
		for _, name := range []string{"plain", "linked", "theirs"} {
			_, _ = kubectlErr("delete", "agent,mediastore", "-n", "default", name, "--wait=false")
		}
	})

	waitAgent(t, "plain", func(a *agentsv1.Agent) bool {
		return meta.IsStatusConditionTrue(a.Status.Conditions, agentsv1.ConditionReady) && a.Status.ReadyReplicas == 1
	})
	waitAgent(t, "theirs", func(a *agentsv1.Agent) bool {
		c := meta.FindStatusCondition(a.Status.Conditions, agentsv1.ConditionReady)
		return c != nil && c.Status == "False" && c.Reason == agentsv1.ReasonMediaStoreNotReady
	})
	if pods, err := listWorkerPods("theirs"); err != nil || len(pods) != 0 {
		t.Fatalf("an Agent on another namespace's directory has pods: %d, %v", len(pods), err)
	}

	// The kubelet follows the link on the node; the init check in the pod
	// sees it and the worker never starts.
	var failed *corev1.Pod
	waitFor(t, "the linked store's media root check to fail", func() (bool, error) {
		pods, err := listWorkerPods("linked")
		if err != nil || len(pods) == 0 {
			return false, err
		}
		for _, s := range pods[0].Status.InitContainerStatuses {
			term := s.State.Terminated
			if term == nil {
				term = s.LastTerminationState.Terminated
			}
			if s.Name == "media-root-check" && term != nil && term.ExitCode == 1 {
				failed = &pods[0]
				return true, nil
			}
		}
		return false, nil
	})
	for _, s := range failed.Status.ContainerStatuses {
		if s.State.Running != nil || s.Ready {
			t.Fatalf("the worker of a store reached through a link runs: %+v", s.State)
		}
	}
	logs := kubectl(t, "logs", "-n", "default", failed.Name, "-c", "media-root-check")
	if want := `component "link" of the store's root is a symbolic link`; !strings.Contains(logs, want) {
		t.Errorf("the check's log %q does not say %q", logs, want)
	}
	if linked := waitAgent(t, "linked", func(*agentsv1.Agent) bool { return true }); linked.Status.ReadyReplicas != 0 {
		t.Errorf("the linked Agent has %d ready workers", linked.Status.ReadyReplicas)
	}
}
