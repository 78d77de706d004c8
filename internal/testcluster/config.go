package testcluster

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
)

// cniBinDir is where Debian's containernetworking-plugins puts the plugins.
const cniBinDir = "/usr/lib/cni"

// writeContainerdConfig writes containerd's configuration: everything under
// dir, and the CRI settings a kubelet needs on a host without
// CAP_SYS_RESOURCE, without AppArmor, and without any registry.
func writeContainerdConfig(dir, sandboxImage string) (string, error) {
	cniConf := filepath.Join(dir, "cni", "net.d")
	if err := os.MkdirAll(cniConf, 0o755); err != nil {
		return "", err
	}
	// No masquerading and no port mapping: pods only talk to each other and
	// to the host on the bridge, so the plugin adds no iptables rules.
	conflist := map[string]any{
		"cniVersion": "0.4.0",
		"name":       "stepwise",
		"plugins": []any{map[string]any{
			"type":      "bridge",
			"bridge":    Bridge,
			"isGateway": true,
			"ipMasq":    false,
			"ipam": map[string]any{
				"type":   "host-local",
				"ranges": [][]map[string]string{{{"subnet": podSubnet, "gateway": GatewayIP}}},
				// Through the host: Service cluster IPs (the kubernetes
				// Service's rule) are off the bridge's subnet.
				"routes":  []map[string]string{{"dst": "0.0.0.0/0"}},
				"dataDir": filepath.Join(dir, "cni", "ipam"),
			},
		}},
	}
	data, err := json.MarshalIndent(conflist, "", "  ")
	if err != nil {
		return "", err
	}
	if err := os.WriteFile(filepath.Join(cniConf, "10-stepwise.conflist"), data, 0o644); err != nil {
		return "", err
	}
	config := fmt.Sprintf(`version = 2
root = %[1]q
state = %[2]q
disabled_plugins = ["io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.devmapper", "io.containerd.snapshotter.v1.zfs"]

[grpc]
  address = %[3]q

[plugins."io.containerd.internal.v1.opt"]
  path = %[4]q

[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = %[5]q
  disable_apparmor = true
  restrict_oom_score_adj = true
  netns_mounts_under_state_dir = true
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = %[6]q
    conf_dir = %[7]q
    max_conf_num = 1
`, filepath.Join(dir, "containerd-root"), filepath.Join(dir, "containerd-state"),
		filepath.Join(dir, "containerd-state", "containerd.sock"), filepath.Join(dir, "containerd-root", "opt"),
		sandboxImage, cniBinDir, cniConf)
	path := filepath.Join(dir, "containerd.toml")
	return path, os.WriteFile(path, []byte(config), 0o644)
}

// writeKubeletConfig writes the KubeletConfiguration: authenticated and
// authorized by the API server, on cgroupfs (cgroup v1 hosts included),
// with eviction and image garbage collection loose enough for small disks.
func writeKubeletConfig(dir, containerd, caFile string, port int) (string, error) {
	config := map[string]any{
		"apiVersion":               "kubelet.config.k8s.io/v1beta1",
		"kind":                     "KubeletConfiguration",
		"containerRuntimeEndpoint": "unix://" + containerd,
		"address":                  GatewayIP,
		"port":                     port,
		"readOnlyPort":             0,
		"healthzPort":              0,
		"authentication": map[string]any{
			"anonymous": map[string]any{"enabled": false},
			"webhook":   map[string]any{"enabled": true},
			"x509":      map[string]any{"clientCAFile": caFile},
		},
		"authorization":               map[string]any{"mode": "Webhook"},
		"cgroupDriver":                "cgroupfs",
		"failSwapOn":                  false,
		"failCgroupV1":                false,
		"podLogsDir":                  filepath.Join(dir, "pod-logs"),
		"imageGCHighThresholdPercent": 100,
		"imageGCLowThresholdPercent":  99,
		"evictionHard": map[string]string{
			"memory.available":  "1Mi",
			"nodefs.available":  "1%",
			"nodefs.inodesFree": "1%",
			"imagefs.available": "1%",
		},
		"serializeImagePulls":       false,
		"clusterDomain":             "cluster.local",
		"maxPods":                   110,
		"syncFrequency":             "10s",
		"fileCheckFrequency":        "10s",
		"nodeStatusReportFrequency": "1m",
	}
	data, err := json.MarshalIndent(config, "", "  ")
	if err != nil {
		return "", err
	}
	path := filepath.Join(dir, "kubelet.json")
	return path, os.WriteFile(path, data, 0o644)
}
