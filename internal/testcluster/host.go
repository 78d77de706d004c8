package testcluster

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
)

// changedSysctls are the kernel settings the kubelet (vm.*, kernel.*) and
// the CNI bridge (ip_forward) set on the host. They are recorded before the
// cluster starts and put back when it stops.
var changedSysctls = []string{
	"vm.overcommit_memory",
	"vm.panic_on_oom",
	"kernel.panic",
	"kernel.panic_on_oops",
	"kernel.keys.root_maxkeys",
	"kernel.keys.root_maxbytes",
	"net.ipv4.ip_forward",
	"net.ipv4.conf.all.forwarding",
}

// hostPaths are directories the kubelet, containerd and the CNI plugins use
// at fixed places whatever their configured roots. Those that did not exist
// before the cluster are removed when it stops.
var hostPaths = []string{
	"/var/lib/kubelet",
	"/var/lib/cni",
	"/run/containerd",
	"/var/run/netns",
	"/opt/cni",
}

// cgroupName is the cgroup the kubelet puts pods under, in each hierarchy.
const cgroupName = "kubepods"

// HostState is what the cluster changes on the host, as it was before.
type HostState struct {
	Sysctls      map[string]string `json:"sysctls"`
	AbsentPaths  []string          `json:"absentPaths"`
	Iptables     string            `json:"iptables"`
	Ip6tables    string            `json:"ip6tables"`
	AbsentGroups []string          `json:"absentCgroups"`
}

// RecordHost reads the host's state that the cluster will change.
func RecordHost() (HostState, error) {
	s := HostState{Sysctls: map[string]string{}}
	for _, name := range changedSysctls {
		v, err := os.ReadFile(sysctlPath(name))
		if err != nil {
			continue // not on this kernel: nothing to restore
		}
		s.Sysctls[name] = strings.TrimSpace(string(v))
	}
	for _, p := range hostPaths {
		if _, err := os.Lstat(p); errors.Is(err, os.ErrNotExist) {
			s.AbsentPaths = append(s.AbsentPaths, p)
		}
	}
	for _, dir := range cgroupRoots() {
		if _, err := os.Stat(filepath.Join(dir, cgroupName)); errors.Is(err, os.ErrNotExist) {
			s.AbsentGroups = append(s.AbsentGroups, filepath.Join(dir, cgroupName))
		}
	}
	var err error
	if s.Iptables, _, err = iptablesSave("iptables-save"); err != nil {
		return s, err
	}
	if s.Ip6tables, _, err = iptablesSave("ip6tables-save"); err != nil {
		return s, err
	}
	return s, nil
}

// Restore puts back what RecordHost read, and reports what it could not.
func (s HostState) Restore() error {
	var errs []error
	for _, name := range sortedNames(s.Sysctls) {
		if err := os.WriteFile(sysctlPath(name), []byte(s.Sysctls[name]), 0o644); err != nil {
			errs = append(errs, fmt.Errorf("restoring %s: %w", name, err))
		}
	}
	if err := iptablesRestore("iptables-save", "iptables-restore", s.Iptables); err != nil {
		errs = append(errs, err)
	}
	if err := iptablesRestore("ip6tables-save", "ip6tables-restore", s.Ip6tables); err != nil {
		errs = append(errs, err)
	}
	for _, group := range s.AbsentGroups {
		if err := removeCgroup(group); err != nil {
			errs = append(errs, err)
		}
	}
	for _, p := range s.AbsentPaths {
		unmountUnder(p)
		if err := os.RemoveAll(p); err != nil {
			errs = append(errs, fmt.Errorf("removing %s: %w", p, err))
		}
	}
	return errors.Join(errs...)
}

// Differences lists how the host now differs from s, for a check that a
// stopped cluster left nothing behind.
func (s HostState) Differences() ([]string, error) {
	now, err := RecordHost()
	if err != nil {
		return nil, err
	}
	var diffs []string
	for _, name := range sortedNames(s.Sysctls) {
		if now.Sysctls[name] != s.Sysctls[name] {
			diffs = append(diffs, fmt.Sprintf("sysctl %s is %s, was %s", name, now.Sysctls[name], s.Sysctls[name]))
		}
	}
	if now.Iptables != s.Iptables {
		diffs = append(diffs, "iptables rules differ:\n"+now.Iptables)
	}
	if now.Ip6tables != s.Ip6tables {
		diffs = append(diffs, "ip6tables rules differ:\n"+now.Ip6tables)
	}
	for _, p := range missing(s.AbsentPaths, now.AbsentPaths) {
		diffs = append(diffs, p+" exists")
	}
	for _, g := range missing(s.AbsentGroups, now.AbsentGroups) {
		diffs = append(diffs, "cgroup "+g+" exists")
	}
	return diffs, nil
}

// missing lists what want has and got does not.
func missing(want, got []string) []string {
	have := map[string]bool{}
	for _, g := range got {
		have[g] = true
	}
	var out []string
	for _, w := range want {
		if !have[w] {
			out = append(out, w)
		}
	}
	return out
}

func sysctlPath(name string) string {
	return filepath.Join("/proc/sys", strings.ReplaceAll(name, ".", "/"))
}

func sortedNames(m map[string]string) []string {
	names := make([]string, 0, len(m))
	for k := range m {
		names = append(names, k)
	}
	sort.Strings(names)
	return names
}

// iptablesSave returns the host's rules without comment lines, counters,
// and tables that hold nothing (only built-in chains that accept), which
// iptables-nft keeps once anything touched them; empty when iptables is
// absent. The second result lists every table the host has now.
func iptablesSave(cmd string) (string, []string, error) {
	if _, err := exec.LookPath(cmd); err != nil {
		return "", nil, nil
	}
	out, err := exec.Command(cmd).Output()
	if err != nil {
		return "", nil, fmt.Errorf("%s: %w", cmd, err)
	}
	var b strings.Builder
	var tables, section []string
	empty := true
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "#") || line == "":
			continue
		case strings.HasPrefix(line, "*"):
			tables = append(tables, line[1:])
			section, empty = nil, true
			continue // written again with the section at COMMIT
		case strings.HasPrefix(line, ":"): // ":CHAIN POLICY [packets:bytes]"
			fields := strings.Fields(line)
			if len(fields) >= 2 && fields[1] != "ACCEPT" {
				empty = false // a user chain ("-") or a built-in that drops
			}
			if i := strings.LastIndex(line, " ["); i > 0 {
				line = line[:i] + " [0:0]"
			}
		case line == "COMMIT":
			if !empty {
				b.WriteString("*" + tables[len(tables)-1] + "\n" + strings.Join(section, "\n") + "\nCOMMIT\n")
			}
			continue
		default:
			empty = false
		}
		section = append(section, line)
	}
	return b.String(), tables, sc.Err()
}

// iptablesRestore sets the rules back to saved: every table the host has
// now is replaced, and one saved holds nothing becomes empty.
func iptablesRestore(save, restore, saved string) error {
	if _, err := exec.LookPath(restore); err != nil {
		return nil
	}
	_, tables, err := iptablesSave(save)
	if err != nil {
		return err
	}
	input := saved
	for _, t := range tables {
		if !strings.Contains(saved, "*"+t+"\n") {
			input += "*" + t + "\nCOMMIT\n"
		}
	}
	cmd := exec.Command(restore)
	cmd.Stdin = strings.NewReader(input)
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("%s: %w: %s", restore, err, out)
	}
	return nil
}

// cgroupRoots lists the mounted cgroup hierarchies: each v1 controller's
// and the v2 one.
func cgroupRoots() []string {
	data, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return nil
	}
	var roots []string
	for _, line := range strings.Split(string(data), "\n") {
		fields := strings.Fields(line)
		sep := -1
		for i, f := range fields {
			if f == "-" {
				sep = i
				break
			}
		}
		if sep < 0 || sep+1 >= len(fields) {
			continue
		}
		if t := fields[sep+1]; t == "cgroup" || t == "cgroup2" {
			roots = append(roots, fields[4])
		}
	}
	sort.Strings(roots)
	return roots
}

// removeCgroup removes a cgroup and everything under it, deepest first:
// a cgroup directory is removed with rmdir, never by deleting its files.
func removeCgroup(dir string) error {
	var dirs []string
	_ = filepath.WalkDir(dir, func(path string, d os.DirEntry, err error) error {
		if err == nil && d.IsDir() {
			dirs = append(dirs, path)
		}
		return nil
	})
	var errs []error
	for i := len(dirs) - 1; i >= 0; i-- {
		if err := syscall.Rmdir(dirs[i]); err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, fmt.Errorf("removing cgroup %s: %w", dirs[i], err))
		}
	}
	return errors.Join(errs...)
}

// unmountUnder detaches every mount at or below dir, deepest first, so the
// directory can be removed: pod volumes, network namespaces and container
// root file systems are mounts.
func unmountUnder(dir string) {
	data, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return
	}
	var points []string
	for _, line := range strings.Split(string(data), "\n") {
		fields := strings.Fields(line)
		if len(fields) < 5 {
			continue
		}
		p := unescapeMount(fields[4])
		if p == dir || strings.HasPrefix(p, dir+"/") {
			points = append(points, p)
		}
	}
	sort.Slice(points, func(i, j int) bool { return len(points[i]) > len(points[j]) })
	for _, p := range points {
		_ = syscall.Unmount(p, syscall.MNT_DETACH)
	}
}

// unescapeMount undoes mountinfo's octal escapes of spaces and the like.
func unescapeMount(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			var v int
			if _, err := fmt.Sscanf(s[i+1:i+4], "%o", &v); err == nil {
				b.WriteByte(byte(v))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}
