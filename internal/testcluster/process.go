package testcluster

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// process is a component the cluster started, recorded so that another
// command (make cluster-down) can stop it.
type process struct {
	Name   string `json:"name"`
	PID    int    `json:"pid"`
	Binary string `json:"binary"`
}

// startProcess runs binary in its own session, so that it outlives the
// command that started the cluster, with its output in logs/<name>.log.
// The recorded PID is the component's own, never a wrapper's.
func startProcess(dir, name, binary string, args []string) (process, error) {
	binary, err := filepath.Abs(binary)
	if err != nil {
		return process{}, err
	}
	if err := os.MkdirAll(filepath.Join(dir, "logs"), 0o755); err != nil {
		return process{}, err
	}
	logFile, err := os.OpenFile(filepath.Join(dir, "logs", name+".log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return process{}, err
	}
	defer func() { _ = logFile.Close() }()
	cmd := exec.Command(binary, args...)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		return process{}, fmt.Errorf("starting %s: %w", name, err)
	}
	// Reap it when it ends, so a stop in this same process sees it gone.
	go func() { _ = cmd.Wait() }()
	return process{Name: name, PID: cmd.Process.Pid, Binary: binary}, nil
}

// alive reports whether p still runs the binary it was started with; a PID
// the kernel gave to another program since is not p.
func (p process) alive() bool {
	exe, err := os.Readlink("/proc/" + strconv.Itoa(p.PID) + "/exe")
	if err != nil {
		return false
	}
	if strings.TrimSuffix(exe, " (deleted)") != p.Binary {
		return false
	}
	stat, err := os.ReadFile("/proc/" + strconv.Itoa(p.PID) + "/stat")
	if err != nil {
		return false
	}
	// The state follows the parenthesised command name; Z is a zombie.
	if i := strings.LastIndexByte(string(stat), ')'); i >= 0 && i+2 < len(stat) && stat[i+2] == 'Z' {
		return false
	}
	return true
}

// stop sends SIGTERM, waits up to grace for p to end, then kills it.
func (p process) stop(grace time.Duration) error {
	if !p.alive() {
		return nil
	}
	_ = syscall.Kill(p.PID, syscall.SIGTERM)
	if waitGone(p, grace) {
		return nil
	}
	_ = syscall.Kill(p.PID, syscall.SIGKILL)
	if waitGone(p, 10*time.Second) {
		return nil
	}
	return fmt.Errorf("%s (pid %d) did not stop", p.Name, p.PID)
}

func waitGone(p process, d time.Duration) bool {
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) {
		if !p.alive() {
			return true
		}
		time.Sleep(50 * time.Millisecond)
	}
	return !p.alive()
}

// killShims ends the containerd shims (and so every container) started for
// the containerd at address: a shim outlives containerd on purpose.
func killShims(address string) error {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return err
	}
	var errs []error
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		cmdline, err := os.ReadFile("/proc/" + e.Name() + "/cmdline")
		if err != nil {
			continue
		}
		args := strings.Split(string(cmdline), "\x00")
		if len(args) == 0 || !strings.HasPrefix(filepath.Base(args[0]), "containerd-shim") {
			continue
		}
		for i, a := range args {
			if a == "-address" && i+1 < len(args) && args[i+1] == address {
				if err := syscall.Kill(pid, syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
					errs = append(errs, fmt.Errorf("killing containerd shim %d: %w", pid, err))
				}
			}
		}
	}
	return errors.Join(errs...)
}

// killCgroup kills every process in the cgroup dir and below it: what a pod
// runs outlives the kubelet and containerd, and a killed shim leaves its
// container running.
func killCgroup(dir string) {
	for range 3 {
		found := false
		_ = filepath.WalkDir(dir, func(path string, d os.DirEntry, err error) error {
			if err != nil || d.IsDir() || d.Name() != "cgroup.procs" {
				return nil
			}
			data, err := os.ReadFile(path)
			if err != nil {
				return nil
			}
			for _, field := range strings.Fields(string(data)) {
				if pid, err := strconv.Atoi(field); err == nil {
					found = true
					_ = syscall.Kill(pid, syscall.SIGKILL)
				}
			}
			return nil
		})
		if !found {
			return
		}
		time.Sleep(200 * time.Millisecond)
	}
}
