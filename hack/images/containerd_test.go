package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A private containerd (the runtime of the project's test cluster) imports
// each archive under its full reference and digest.
func TestContainerdImportsArchives(t *testing.T) {
	for _, tool := range []string{"containerd", "ctr"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("%s is not installed (apt-get install containerd): %v", tool, err)
		}
	}
	if os.Geteuid() != 0 {
		t.Skip("containerd needs root")
	}
	_, built := sharedImages(t)

	ctr := startContainerd(t)
	for _, b := range built {
		out, err := ctr.run("images", "import", b.Archive)
		require.NoError(t, err, "ctr images import %s:\n%s", b.Archive, out)
		t.Logf("ctr -n k8s.io images import %s:\n%s", filepath.Base(b.Archive), out)
	}

	out, err := ctr.run("images", "ls")
	require.NoError(t, err, "ctr images ls:\n%s", out)
	t.Logf("ctr -n k8s.io images ls:\n%s", out)
	listed := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(out), "\n")[1:] {
		fields := strings.Fields(line)
		require.GreaterOrEqual(t, len(fields), 3, line)
		listed[fields[0]] = fields[2]
	}
	want := map[string]string{}
	for _, b := range built {
		want[b.Reference] = b.Digest.String()
	}
	assert.Equal(t, want, listed, "the images containerd lists, with their digests")

	for _, b := range built {
		out, err := ctr.run("images", "check", "name=="+b.Reference)
		require.NoError(t, err, "ctr images check:\n%s", out)
		assert.Contains(t, out, "complete", "%s: all its content is present", b.Reference)
	}

	// The pause image runs as the sandbox of a pod would: as 65532, until
	// SIGTERM, which it answers by exiting 0.
	var pause builtImage
	for _, b := range built {
		if b.Spec.Name == "pause" {
			pause = b
		}
	}
	run := ctr.command("run", "--rm", pause.Reference, "pause-test")
	var runOutput strings.Builder
	run.Stdout = &runOutput
	run.Stderr = &runOutput
	require.NoError(t, run.Start())
	exited := make(chan error, 1)
	go func() { exited <- run.Wait() }()
	t.Cleanup(func() {
		// A container still running after a failed assertion would outlive
		// containerd.
		_, _ = ctr.run("tasks", "kill", "--signal", "SIGKILL", "pause-test")
		_, _ = ctr.run("tasks", "delete", "--force", "pause-test")
		_, _ = ctr.run("containers", "delete", "pause-test")
	})

	var pid string
	deadline := time.Now().Add(time.Minute)
	for pid == "" {
		out, _ := ctr.run("tasks", "ls")
		for _, line := range strings.Split(out, "\n") {
			if fields := strings.Fields(line); len(fields) == 3 && fields[0] == "pause-test" && fields[2] == "RUNNING" {
				pid = fields[1]
			}
		}
		if pid == "" {
			require.True(t, time.Now().Before(deadline), "the pause container did not start within a minute:\n%s", runOutput.String())
			time.Sleep(100 * time.Millisecond)
		}
	}
	status, err := os.ReadFile("/proc/" + pid + "/status")
	require.NoError(t, err)
	assert.Regexp(t, `(?m)^Uid:\s+65532\s+65532\s+65532\s+65532$`, string(status))
	assert.Regexp(t, `(?m)^Gid:\s+65532\s+65532\s+65532\s+65532$`, string(status))

	out, err = ctr.run("tasks", "kill", "--signal", "SIGTERM", "pause-test")
	require.NoError(t, err, "ctr tasks kill:\n%s", out)
	select {
	case err := <-exited:
		require.NoError(t, err, "the pause container's exit after SIGTERM (ctr run gives its status):\n%s", runOutput.String())
	case <-time.After(time.Minute):
		t.Fatal("the pause container did not exit within a minute of SIGTERM")
	}
}

// ctrClient runs ctr against one containerd, in the k8s.io namespace, where
// the kubelet looks for images.
type ctrClient struct {
	socket string
}

// command is not bound to the test's context, so that cleanups can run it
// too.
func (c ctrClient) command(args ...string) *exec.Cmd {
	return exec.Command("ctr", append([]string{"--address", c.socket, "--namespace", "k8s.io"}, args...)...)
}

func (c ctrClient) run(args ...string) (string, error) {
	out, err := c.command(args...).CombinedOutput()
	return string(out), err
}

// startContainerd runs containerd with its root, state and socket under a
// temporary directory (short, for the socket's path), and returns a ctr
// client for it.
func startContainerd(t *testing.T) ctrClient {
	t.Helper()
	dir, err := os.MkdirTemp("", "ctrd-")
	require.NoError(t, err)
	socket := filepath.Join(dir, "containerd.sock")
	config := filepath.Join(dir, "config.toml")
	require.NoError(t, os.WriteFile(config, fmt.Appendf(nil, `version = 2
root = %q
state = %q
disabled_plugins = ["io.containerd.grpc.v1.cri"]

[grpc]
  address = %q

[ttrpc]
  address = %q
`, filepath.Join(dir, "root"), filepath.Join(dir, "state"), socket, socket+".ttrpc"), 0o600))

	logFile, err := os.Create(filepath.Join(dir, "containerd.log"))
	require.NoError(t, err)
	daemon := exec.Command("containerd", "--config", config)
	daemon.Stdout = logFile
	daemon.Stderr = logFile
	require.NoError(t, daemon.Start())
	t.Cleanup(func() {
		_ = daemon.Process.Signal(os.Interrupt)
		done := make(chan error, 1)
		go func() { done <- daemon.Wait() }()
		select {
		case err := <-done:
			t.Logf("containerd stopped: %v", err)
		case <-time.After(time.Minute):
			_ = daemon.Process.Kill()
			t.Logf("containerd killed after a minute: %v", <-done)
		}
		_ = logFile.Close()
		if t.Failed() {
			if log, err := os.ReadFile(logFile.Name()); err == nil {
				t.Logf("containerd log:\n%s", log)
			}
		}
		_ = os.RemoveAll(dir)
	})

	ctr := ctrClient{socket: socket}
	deadline := time.Now().Add(time.Minute)
	for {
		out, err := ctr.run("version")
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("containerd did not answer within a minute: %v\n%s", err, out)
		}
		time.Sleep(100 * time.Millisecond)
	}
	return ctr
}
