package testcluster

import (
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"
)

// Stop stops every component in order (kubelet and pods, containerd, the
// scheduler and controller manager, the API server, etcd last), removes
// what they left on the host and puts back the host's recorded state. The
// logs stay in the cluster's directory.
func (c *Cluster) Stop() error {
	var errs []error
	stop := func(name string, grace time.Duration) {
		for _, p := range c.Processes {
			if p.Name == name {
				if err := p.stop(grace); err != nil {
					errs = append(errs, err)
				}
			}
		}
	}
	stop("kubelet", 10*time.Second)
	for _, root := range cgroupRoots() {
		killCgroup(filepath.Join(root, cgroupName))
	}
	if c.Containerd != "" {
		if err := killShims(c.Containerd); err != nil {
			errs = append(errs, err)
		}
	}
	stop("containerd", 10*time.Second)
	stop("kube-scheduler", 5*time.Second)
	stop("kube-controller-manager", 5*time.Second)
	stop("kube-apiserver", 10*time.Second)
	stop("etcd", 5*time.Second)

	unmountUnder(c.dir)
	if c.BridgeMade {
		if err := removePodNetwork(); err != nil {
			errs = append(errs, err)
		}
		if owner, err := os.ReadFile(ownerFile); err == nil && string(owner) == c.dir {
			_ = os.Remove(ownerFile)
		}
	}
	if err := c.Host.Restore(); err != nil {
		errs = append(errs, err)
	}
	for _, sub := range []string{"kubelet", "containerd-root", "containerd-state", "etcd", "cni"} {
		if err := os.RemoveAll(filepath.Join(c.dir, sub)); err != nil {
			errs = append(errs, err)
		}
	}
	c.Processes = nil
	c.BridgeMade = false
	errs = append(errs, c.save())
	return errors.Join(errs...)
}

// ownerFile names the directory of the cluster that made the bridge, so a
// later Start can stop a cluster whose processes died without Stop. It is
// under /run, which, like the bridge, does not outlive the host's boot.
const ownerFile = "/run/stepwise-test-cluster"

// stopAbandoned removes what a cluster whose processes are gone left: all
// of it, host state put back, when its directory is still there; otherwise
// the pod network and the kubernetes Service rule, which would send pods to
// an API server that no longer runs.
func stopAbandoned(logf func(string, ...any)) error {
	if dir, err := os.ReadFile(ownerFile); err == nil {
		if stale, err := Open(string(dir)); err == nil {
			logf("stopping the test cluster in %s, whose processes are gone: nothing listens on %s", dir, GatewayIP)
			return stale.Stop()
		}
	}
	logf("removing the pod network %s and Service rule a stopped test cluster left: nothing listens on %s", Bridge, GatewayIP)
	if err := removePodNetwork(); err != nil {
		return err
	}
	out, err := exec.Command("iptables", "-t", "nat", "-S", "PREROUTING").Output()
	if err != nil {
		return fmt.Errorf("iptables -t nat -S PREROUTING: %w", err)
	}
	for _, rule := range strings.Split(string(out), "\n") {
		if strings.HasPrefix(rule, "-A PREROUTING -d "+kubernetesServiceIP+"/32 ") && strings.Contains(rule, "-j DNAT") {
			args := append([]string{"-t", "nat", "-D"}, strings.Fields(strings.TrimPrefix(rule, "-A "))...)
			if err := run("iptables", args...); err != nil {
				return err
			}
		}
	}
	return nil
}

// removePodNetwork deletes the pods' links on the bridge, then the bridge.
// Pod network namespaces' veth ends go with their namespaces, but a host
// end outlives a namespace kept by a mount and would keep the pod's
// address taken; once the bridge is gone they have no master to be found
// by, so they go first.
func removePodNetwork() error {
	links, err := net.Interfaces()
	if err != nil {
		return err
	}
	for _, l := range links {
		if strings.HasPrefix(l.Name, "veth") {
			if master, err := os.Readlink("/sys/class/net/" + l.Name + "/master"); err == nil && filepath.Base(master) == Bridge {
				_ = run("ip", "link", "delete", l.Name)
			}
		}
	}
	if _, err := net.InterfaceByName(Bridge); err == nil {
		return run("ip", "link", "delete", Bridge)
	}
	return nil
}

// listensOn reports whether any TCP socket in this network namespace
// listens on ip: a running cluster's API server and engine forwards do.
// The kernel's socket table is per network namespace, so it answers for
// clusters started from another process or mount namespace too.
func listensOn(ip string) (bool, error) {
	data, err := os.ReadFile("/proc/net/tcp")
	if err != nil {
		return false, err
	}
	want := net.ParseIP(ip).To4()
	if want == nil {
		return false, fmt.Errorf("%s is not an IPv4 address", ip)
	}
	// Addresses are the IPv4 bytes in host order, as hex: on the
	// little-endian hosts the cluster runs on, 10.88.0.1 is 010058 0A.
	hexIP := fmt.Sprintf("%02X%02X%02X%02X", want[3], want[2], want[1], want[0])
	for _, line := range strings.Split(string(data), "\n")[1:] {
		fields := strings.Fields(line)
		if len(fields) < 4 {
			continue
		}
		local, state := fields[1], fields[3]
		if state == "0A" && strings.HasPrefix(local, hexIP+":") {
			return true, nil
		}
	}
	return false, nil
}
