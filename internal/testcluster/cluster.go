// Package testcluster runs a real single-node Kubernetes cluster on this
// host for the end-to-end tests and `make cluster`: etcd, kube-apiserver,
// kube-controller-manager and kube-scheduler built from source, containerd
// and runc from the distribution, and a kubelet, all on a bridge that only
// this host reaches. It is not a cluster to run anything else on: one node,
// no kube-proxy (Service cluster IPs do not route) and no cluster DNS.
//
// Starting it changes the host the way any kubelet does (sysctls, iptables
// chains, cgroups, a few fixed directories); the state before is recorded in
// the cluster's directory and put back by Stop.
package testcluster

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

const (
	// Bridge is the network device pods attach to. Its address is the
	// host as pods see it; the API server listens there too.
	Bridge = "stepwise0"
	// GatewayIP is the host's address on Bridge: pods reach the API server
	// and anything else the host serves here.
	GatewayIP = "10.88.0.1"
	podSubnet = "10.88.0.0/16"
	// NodeName is the one node's name.
	NodeName = "stepwise-node"
	// serviceSubnet holds Service cluster IPs, which nothing routes but the
	// kubernetes Service's, kubernetesServiceIP.
	serviceSubnet       = "10.96.0.0/24"
	kubernetesServiceIP = "10.96.0.1"
	stateFile           = "state.json"
)

// Options say where the cluster lives and what it runs.
type Options struct {
	// Dir holds the cluster's configuration, data, logs and state.
	Dir string
	// KubeBin holds kube-apiserver, kube-controller-manager,
	// kube-scheduler, kubelet and kubectl.
	KubeBin string
	// Etcd is the etcd binary.
	Etcd string
	// Images are OCI image archives imported into containerd before the
	// kubelet starts; pods run them with imagePullPolicy IfNotPresent.
	Images []string
	// SandboxImage is the pause image's reference, one of Images.
	SandboxImage string
	// Log receives progress lines; nil discards them.
	Log func(format string, args ...any)
}

// Cluster is a running cluster.
type Cluster struct {
	state
	dir string
}

// state is what Stop needs, written to the cluster's directory as soon as
// anything on the host changes.
type state struct {
	Host           HostState `json:"host"`
	Processes      []process `json:"processes"`
	Containerd     string    `json:"containerd"`
	KubeconfigPath string    `json:"kubeconfig"`
	KubectlPath    string    `json:"kubectl"`
	BridgeMade     bool      `json:"bridgeMade"`
}

// Kubeconfig is the cluster administrator's kubeconfig file.
func (c *Cluster) Kubeconfig() string { return c.KubeconfigPath }

// Dir is the cluster's directory: logs are in its logs folder.
func (c *Cluster) Dir() string { return c.dir }

// RESTConfig is the administrator's client configuration.
func (c *Cluster) RESTConfig() (*rest.Config, error) {
	return clientcmd.BuildConfigFromFlags("", c.KubeconfigPath)
}

// Kubectl runs kubectl as the administrator.
func (c *Cluster) Kubectl(ctx context.Context, args ...string) *exec.Cmd {
	return exec.CommandContext(ctx, c.KubectlPath, append([]string{"--kubeconfig", c.KubeconfigPath}, args...)...)
}

// ContainerdAddress is the socket of the cluster's containerd, for ctr.
func (c *Cluster) ContainerdAddress() string { return c.Containerd }

// Start starts a cluster in opts.Dir and waits until its node is Ready and
// pods can be created. On failure it stops what it started.
func Start(ctx context.Context, opts Options) (_ *Cluster, err error) {
	logf := opts.Log
	if logf == nil {
		logf = func(string, ...any) {}
	}
	if os.Geteuid() != 0 {
		return nil, errors.New("the test cluster needs root: the kubelet and containerd manage cgroups, mounts and network devices")
	}
	for _, tool := range []string{"containerd", "ctr", "runc", "ip", "iptables"} {
		if _, err := exec.LookPath(tool); err != nil {
			return nil, fmt.Errorf("the test cluster needs %s (Debian packages containerd, runc, containernetworking-plugins, iptables, iproute2): %w", tool, err)
		}
	}
	if _, err := os.Stat(filepath.Join(cniBinDir, "bridge")); err != nil {
		return nil, fmt.Errorf("the test cluster needs the CNI plugins in %s (Debian package containernetworking-plugins): %w", cniBinDir, err)
	}
	if _, err := net.InterfaceByName(Bridge); err == nil {
		live, err := listensOn(GatewayIP)
		if err != nil {
			return nil, fmt.Errorf("network device %s exists and its owner cannot be told: %w", Bridge, err)
		}
		if live {
			return nil, fmt.Errorf("network device %s exists: another test cluster runs on this host; stop it with "+
				"make cluster-down (CLUSTER_DIR=<its directory> for one not in the default place)", Bridge)
		}
		// A cluster whose processes died without Stop (a killed test
		// binary, a restarted host) leaves its bridge, pod links and
		// Service rule; nothing listens on the bridge, so nothing uses them.
		if err := stopAbandoned(logf); err != nil {
			return nil, fmt.Errorf("removing what a stopped test cluster left on the host: %w", err)
		}
	}
	dir, err := filepath.Abs(opts.Dir)
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	c := &Cluster{dir: dir}
	c.KubectlPath = filepath.Join(opts.KubeBin, "kubectl")
	if c.Host, err = RecordHost(); err != nil {
		return nil, fmt.Errorf("recording the host's state: %w", err)
	}
	if err := c.save(); err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			err = errors.Join(err, c.Stop())
		}
	}()

	logf("creating the pod network bridge %s at %s", Bridge, GatewayIP)
	if err := run("ip", "link", "add", Bridge, "type", "bridge"); err != nil {
		return nil, err
	}
	c.BridgeMade = true
	if err := c.save(); err != nil {
		return nil, err
	}
	if err := os.WriteFile(ownerFile, []byte(dir), 0o600); err != nil {
		return nil, fmt.Errorf("recording the bridge's owner: %w", err)
	}
	if err := run("ip", "addr", "add", GatewayIP+"/16", "dev", Bridge); err != nil {
		return nil, err
	}
	if err := run("ip", "link", "set", Bridge, "up"); err != nil {
		return nil, err
	}

	pki := filepath.Join(dir, "pki")
	if err := os.MkdirAll(pki, 0o700); err != nil {
		return nil, err
	}
	ca, err := newAuthority(pki)
	if err != nil {
		return nil, err
	}
	ports, err := freePorts(4)
	if err != nil {
		return nil, err
	}
	etcdPort, etcdPeerPort, apiPort, kubeletPort := ports[0], ports[1], ports[2], ports[3]
	apiURL := "https://" + net.JoinHostPort(GatewayIP, strconv.Itoa(apiPort))

	logf("starting etcd")
	etcdURL := "http://127.0.0.1:" + strconv.Itoa(etcdPort)
	if err := c.start(dir, "etcd", opts.Etcd,
		"--data-dir", filepath.Join(dir, "etcd"),
		"--listen-client-urls", etcdURL, "--advertise-client-urls", etcdURL,
		"--listen-peer-urls", "http://127.0.0.1:"+strconv.Itoa(etcdPeerPort),
		"--initial-advertise-peer-urls", "http://127.0.0.1:"+strconv.Itoa(etcdPeerPort),
		"--initial-cluster", "default=http://127.0.0.1:"+strconv.Itoa(etcdPeerPort),
		"--unsafe-no-fsync", "--log-level", "warn"); err != nil {
		return nil, err
	}
	if err := waitHTTP(ctx, http.DefaultClient, etcdURL+"/health", time.Minute); err != nil {
		return nil, fmt.Errorf("etcd: %w", err)
	}

	logf("starting kube-apiserver at %s", apiURL)
	serving, err := ca.issue("apiserver", "kube-apiserver", nil,
		[]string{"localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc", "kubernetes.default.svc.cluster.local"},
		[]net.IP{net.ParseIP(GatewayIP), net.ParseIP("127.0.0.1"), net.ParseIP(kubernetesServiceIP)})
	if err != nil {
		return nil, err
	}
	kubeletClient, err := ca.issue("apiserver-kubelet-client", "kube-apiserver-kubelet-client", []string{"system:masters"}, nil, nil)
	if err != nil {
		return nil, err
	}
	saKey, saPub, err := serviceAccountKeys(pki)
	if err != nil {
		return nil, err
	}
	if err := c.start(dir, "kube-apiserver", filepath.Join(opts.KubeBin, "kube-apiserver"),
		"--etcd-servers", etcdURL,
		"--bind-address", GatewayIP, "--advertise-address", GatewayIP, "--secure-port", strconv.Itoa(apiPort),
		"--endpoint-reconciler-type", "none",
		"--tls-cert-file", serving.Cert, "--tls-private-key-file", serving.Key,
		"--client-ca-file", ca.CertFile(),
		// No cluster DNS resolves the node's name.
		"--kubelet-preferred-address-types", "InternalIP",
		"--kubelet-client-certificate", kubeletClient.Cert, "--kubelet-client-key", kubeletClient.Key,
		"--service-account-key-file", saPub, "--service-account-signing-key-file", saKey,
		"--service-account-issuer", "https://kubernetes.default.svc.cluster.local",
		"--service-cluster-ip-range", serviceSubnet,
		"--authorization-mode", "Node,RBAC",
		"--cert-dir", filepath.Join(dir, "apiserver-certs")); err != nil {
		return nil, err
	}

	kubeconfig := func(name, user string, groups []string) (string, error) {
		id, err := ca.issue(name, user, groups, nil, nil)
		if err != nil {
			return "", err
		}
		path := filepath.Join(dir, name+".kubeconfig")
		return path, writeKubeconfig(path, apiURL, ca.CertFile(), id)
	}
	if c.KubeconfigPath, err = kubeconfig("admin", "admin", []string{"system:masters"}); err != nil {
		return nil, err
	}
	if err := c.save(); err != nil {
		return nil, err
	}
	cfg, err := c.RESTConfig()
	if err != nil {
		return nil, err
	}
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	if err := poll(ctx, 2*time.Minute, func() (bool, error) {
		body, err := client.Discovery().RESTClient().Get().AbsPath("/readyz").DoRaw(ctx)
		return err == nil && strings.TrimSpace(string(body)) == "ok", nil
	}); err != nil {
		return nil, fmt.Errorf("kube-apiserver did not become ready (see %s): %w", c.logPath("kube-apiserver"), err)
	}

	// With no kube-proxy, one rule does its job for the one Service pods
	// need: the kubernetes Service, so in-cluster clients such as the
	// operator reach the API server at its cluster IP.
	if err := run("iptables", "-t", "nat", "-A", "PREROUTING", "-d", kubernetesServiceIP+"/32", "-p", "tcp", "--dport", "443",
		"-j", "DNAT", "--to-destination", net.JoinHostPort(GatewayIP, strconv.Itoa(apiPort))); err != nil {
		return nil, err
	}

	logf("starting kube-controller-manager and kube-scheduler")
	kcmConfig, err := kubeconfig("controller-manager", "system:kube-controller-manager", nil)
	if err != nil {
		return nil, err
	}
	if err := c.start(dir, "kube-controller-manager", filepath.Join(opts.KubeBin, "kube-controller-manager"),
		"--kubeconfig", kcmConfig,
		"--controllers", "*,-nodeipam",
		"--use-service-account-credentials",
		"--root-ca-file", ca.CertFile(),
		"--service-account-private-key-file", saKey,
		"--leader-elect=false",
		"--bind-address", "127.0.0.1", "--secure-port", "0"); err != nil {
		return nil, err
	}
	schedulerConfig, err := kubeconfig("scheduler", "system:kube-scheduler", nil)
	if err != nil {
		return nil, err
	}
	if err := c.start(dir, "kube-scheduler", filepath.Join(opts.KubeBin, "kube-scheduler"),
		"--kubeconfig", schedulerConfig, "--leader-elect=false",
		"--bind-address", "127.0.0.1", "--secure-port", "0"); err != nil {
		return nil, err
	}

	logf("starting containerd")
	containerdConfig, err := writeContainerdConfig(dir, opts.SandboxImage)
	if err != nil {
		return nil, err
	}
	c.Containerd = filepath.Join(dir, "containerd-state", "containerd.sock")
	if err := c.save(); err != nil {
		return nil, err
	}
	containerd, err := exec.LookPath("containerd")
	if err != nil {
		return nil, err
	}
	if err := c.start(dir, "containerd", containerd, "--config", containerdConfig); err != nil {
		return nil, err
	}
	if err := poll(ctx, time.Minute, func() (bool, error) {
		return exec.CommandContext(ctx, "ctr", "--address", c.Containerd, "version").Run() == nil, nil
	}); err != nil {
		return nil, fmt.Errorf("containerd did not start (see %s): %w", c.logPath("containerd"), err)
	}
	for _, image := range opts.Images {
		logf("importing %s", filepath.Base(image))
		if err := c.Import(ctx, image); err != nil {
			return nil, err
		}
	}

	logf("starting the kubelet")
	kubeletConfig, err := kubeconfig("kubelet", "system:node:"+NodeName, []string{"system:nodes"})
	if err != nil {
		return nil, err
	}
	kubeletSettings, err := writeKubeletConfig(dir, c.Containerd, ca.CertFile(), kubeletPort)
	if err != nil {
		return nil, err
	}
	if err := c.start(dir, "kubelet", filepath.Join(opts.KubeBin, "kubelet"),
		"--config", kubeletSettings, "--kubeconfig", kubeletConfig,
		"--root-dir", filepath.Join(dir, "kubelet"),
		"--hostname-override", NodeName, "--node-ip", GatewayIP); err != nil {
		return nil, err
	}
	if err := poll(ctx, 2*time.Minute, func() (bool, error) {
		node, err := client.CoreV1().Nodes().Get(ctx, NodeName, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		for _, cond := range node.Status.Conditions {
			if cond.Type == corev1.NodeReady {
				return cond.Status == corev1.ConditionTrue, nil
			}
		}
		return false, nil
	}); err != nil {
		return nil, fmt.Errorf("node %s did not become Ready (see %s): %w", NodeName, c.logPath("kubelet"), err)
	}
	// Pods wait for their namespace's default ServiceAccount, which the
	// controller manager creates.
	if err := poll(ctx, 2*time.Minute, func() (bool, error) {
		_, err := client.CoreV1().ServiceAccounts("default").Get(ctx, "default", metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return false, nil
		}
		return err == nil, nil
	}); err != nil {
		return nil, fmt.Errorf("the default ServiceAccount did not appear (see %s): %w", c.logPath("kube-controller-manager"), err)
	}
	logf("node %s is Ready", NodeName)
	return c, nil
}

// Open finds the cluster a previous Start left running in dir.
func Open(dir string) (*Cluster, error) {
	dir, err := filepath.Abs(dir)
	if err != nil {
		return nil, err
	}
	data, err := os.ReadFile(filepath.Join(dir, stateFile))
	if err != nil {
		return nil, fmt.Errorf("no test cluster in %s: %w", dir, err)
	}
	c := &Cluster{dir: dir}
	if err := json.Unmarshal(data, &c.state); err != nil {
		return nil, fmt.Errorf("reading %s: %w", filepath.Join(dir, stateFile), err)
	}
	return c, nil
}

// Import imports an OCI image archive into the cluster's containerd, where
// the kubelet finds it.
func (c *Cluster) Import(ctx context.Context, archive string) error {
	out, err := exec.CommandContext(ctx, "ctr", "--address", c.Containerd, "--namespace", "k8s.io",
		"images", "import", "--no-unpack=false", archive).CombinedOutput()
	if err != nil {
		return fmt.Errorf("importing %s: %w: %s", archive, err, out)
	}
	return nil
}

func (c *Cluster) start(dir, name, binary string, args ...string) error {
	p, err := startProcess(dir, name, binary, args)
	if err != nil {
		return err
	}
	c.Processes = append(c.Processes, p)
	return c.save()
}

func (c *Cluster) save() error {
	data, err := json.MarshalIndent(c.state, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(c.dir, stateFile), data, 0o600)
}

func (c *Cluster) logPath(name string) string { return filepath.Join(c.dir, "logs", name+".log") }
