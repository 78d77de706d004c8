package e2e

import (
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
)

func securityContext(t *testing.T) {
	for _, p := range append(workerPods(t, "support", 2), workerPods(t, "exporter", 2)...) {
		sc := p.Spec.SecurityContext
		if sc == nil || sc.RunAsNonRoot == nil || !*sc.RunAsNonRoot {
			t.Fatalf("pod %s does not set runAsNonRoot", p.Name)
		}
		c := p.Spec.Containers[0].SecurityContext
		if c == nil || c.ReadOnlyRootFilesystem == nil || !*c.ReadOnlyRootFilesystem ||
			c.Capabilities == nil || len(c.Capabilities.Drop) != 1 || c.Capabilities.Drop[0] != "ALL" ||
			c.AllowPrivilegeEscalation == nil || *c.AllowPrivilegeEscalation {
			t.Fatalf("pod %s container security context is %+v", p.Name, c)
		}
		// What the kernel says of the running worker process.
		pid := containerPID(t, &p)
		status := readProc(t, pid, "status")
		for _, want := range []string{"Uid:\t65532\t65532\t65532\t65532", "Gid:\t65532\t65532\t65532\t65532",
			"CapEff:\t0000000000000000", "CapPrm:\t0000000000000000", "NoNewPrivs:\t1"} {
			if !strings.Contains(status, want) {
				t.Fatalf("pod %s: the worker process (pid %d) status lacks %q:\n%s", p.Name, pid, want, status)
			}
		}
		mounts := readProc(t, pid, "mountinfo")
		rootReadOnly, tmpWritable := false, false
		for _, line := range strings.Split(mounts, "\n") {
			f := strings.Fields(line)
			if len(f) < 6 {
				continue
			}
			opts := "," + f[5] + ","
			switch f[4] {
			case "/":
				rootReadOnly = strings.Contains(opts, ",ro,")
			case "/tmp":
				tmpWritable = strings.Contains(opts, ",rw,")
			}
		}
		if !rootReadOnly || !tmpWritable {
			t.Fatalf("pod %s: root read-only %v, /tmp (the declared volume) writable %v; mounts:\n%s", p.Name, rootReadOnly, tmpWritable, mounts)
		}
	}
}

// containerPID finds the host PID of the pod's worker container through
// containerd, where the pod's processes really run.
func containerPID(t *testing.T, p *corev1.Pod) int {
	t.Helper()
	if len(p.Status.ContainerStatuses) == 0 {
		t.Fatalf("pod %s has no container status", p.Name)
	}
	id := strings.TrimPrefix(p.Status.ContainerStatuses[0].ContainerID, "containerd://")
	out, err := exec.Command("ctr", "--address", cluster.ContainerdAddress(), "--namespace", "k8s.io", "tasks", "ls").CombinedOutput()
	if err != nil {
		t.Fatalf("ctr tasks ls: %v\n%s", err, out)
	}
	for _, line := range strings.Split(string(out), "\n") {
		f := strings.Fields(line)
		if len(f) >= 2 && f[0] == id {
			pid, err := strconv.Atoi(f[1])
			if err != nil {
				t.Fatal(err)
			}
			return pid
		}
	}
	t.Fatalf("containerd runs no task %s for pod %s:\n%s", id, p.Name, out)
	return 0
}

func readProc(t *testing.T, pid int, name string) string {
	t.Helper()
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/%s", pid, name))
	if err != nil {
		t.Fatal(err)
	}
	return string(data)
}
