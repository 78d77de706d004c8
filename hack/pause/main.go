//go:build linux

// Command pause is the pod sandbox of the project's test cluster: it holds
// the pod's namespaces open, reaps the orphans handed to it as the pod's
// first process, and exits 0 when told to stop (SIGTERM or SIGINT). It is
// static and has nothing else in it, so its image builds from this module
// alone; containerd names it as its sandbox_image.
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	signals := make(chan os.Signal, 1)
	signal.Notify(signals, syscall.SIGTERM, syscall.SIGINT, syscall.SIGCHLD)
	for sig := range signals {
		if sig != syscall.SIGCHLD {
			os.Exit(0)
		}
		reapChildren()
	}
}

// reapChildren collects every exited child, so that processes of a pod
// sharing its PID namespace leave no zombies behind.
func reapChildren() {
	for {
		var status syscall.WaitStatus
		pid, err := syscall.Wait4(-1, &status, syscall.WNOHANG, nil)
		if pid <= 0 || err != nil {
			return
		}
	}
}
