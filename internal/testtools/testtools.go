// Package testtools is the one place that names the external tools the
// tests run (a real API server, the Temporal server, the MCP and S3 servers,
// Helm, a browser) and the variables that point at them. A test asks for a
// tool here: run alone without it, the test is skipped, naming the make target
// that builds it; under `make test`, which sets RequiredEnv, a missing tool
// fails the test instead, so CI never passes by skipping.
package testtools

import (
	"fmt"
	"os"
	"testing"
)

// RequiredEnv names the variable that, set to any value, makes a missing
// tool fail the test that needs it instead of skipping it; `make test` and
// `make e2e` set it.
const RequiredEnv = "STEPWISE_TEST_TOOLS_REQUIRED"

// Tool is an external program or directory tests use, named by a variable.
type Tool struct {
	// Env is the variable that names the tool's path.
	Env string
	// What says what the path holds, for the message of a missing tool.
	What string
	// Get is the command that builds or installs it.
	Get string
}

// The tools, with the variables `make test` sets.
var (
	// APIServer is the directory of kube-apiserver, etcd and kubectl that
	// envtest starts.
	APIServer = Tool{Env: "KUBEBUILDER_ASSETS", What: "the directory of kube-apiserver, etcd and kubectl", Get: "make envtest"}
	// Temporal is the Temporal server binary, run as a dev server.
	Temporal = Tool{Env: "STEPWISE_TEMPORAL_SERVER", What: "the Temporal server binary", Get: "make temporal"}
	// MCPServers is the directory of the reference MCP servers' commands.
	MCPServers = Tool{Env: "STEPWISE_MCP_SERVERS", What: "the directory of the reference MCP servers' commands", Get: "make mcp-servers"}
	// S3Server is the versitygw binary, an S3 server over a directory.
	S3Server = Tool{Env: "STEPWISE_VERSITYGW", What: "the versitygw binary", Get: "make versitygw"}
	// Helm is the helm binary.
	Helm = Tool{Env: "STEPWISE_HELM", What: "the helm binary", Get: "make helm"}
	// Kubeconform is the kubeconform binary.
	Kubeconform = Tool{Env: "STEPWISE_KUBECONFORM", What: "the kubeconform binary", Get: "make chart-check"}
	// KubeSchemas is the directory of the API server's schemas for
	// kubeconform.
	KubeSchemas = Tool{Env: "STEPWISE_KUBESCHEMAS", What: "the directory of the API server's JSON schemas", Get: "make chart-check"}
	// MonitoringCRDs is the directory of the Prometheus Operator's
	// PodMonitor and ServiceMonitor CRDs.
	MonitoringCRDs = Tool{Env: "STEPWISE_MONITORING_CRDS", What: "the directory of the PodMonitor and ServiceMonitor CRDs", Get: "make monitoring-crds"}
	// BrowserDriver is playwright-core's node_modules directory.
	BrowserDriver = Tool{Env: "STEPWISE_BROWSER_DRIVER", What: "playwright-core's node_modules directory", Get: "make browser-driver"}
	// Chromium is the headless Chromium the browser driver runs; .ci/run
	// installs Debian's.
	Chromium = Tool{Env: "STEPWISE_CHROMIUM", What: "the chromium binary", Get: "apt-get install chromium"}
)

// The end-to-end suite's tools: what its single-node cluster runs, the
// images it imports, and the previous release it upgrades from. `make e2e`
// sets them all.
var (
	// KubeBin is the directory of the cluster's Kubernetes binaries.
	KubeBin = Tool{Env: "STEPWISE_E2E_KUBE_BIN", What: "the directory of the kubelet, kube-apiserver, kube-controller-manager and kube-scheduler", Get: "make cluster-tools"}
	// Etcd is the cluster's etcd binary.
	Etcd = Tool{Env: "STEPWISE_E2E_ETCD", What: "the etcd binary", Get: "make cluster-tools"}
	// Images is the directory of the release's image archives.
	Images = Tool{Env: "STEPWISE_E2E_IMAGES", What: "the directory of the image archives", Get: "make images"}
	// PreviousRelease is the previous engine version's images and chart.
	PreviousRelease = Tool{Env: "STEPWISE_E2E_PREVIOUS_RELEASE", What: "the previous release's images and chart", Get: "make previous-release"}
)

// All are every tool above, for the check that no test reads their
// variables but through this package.
var All = []Tool{APIServer, Temporal, MCPServers, S3Server, Helm, Kubeconform, KubeSchemas, MonitoringCRDs,
	BrowserDriver, Chromium, KubeBin, Etcd, Images, PreviousRelease}

// ArtifactsEnv names the directory where tests keep what a person reads
// after a run, such as the web page's screenshots; without it they go to a
// temporary directory.
const ArtifactsEnv = "STEPWISE_TEST_ARTIFACTS"

// Lookup returns the tool's path, or false when its variable is unset.
func (tool Tool) Lookup() (string, bool) {
	path := os.Getenv(tool.Env)
	return path, path != ""
}

// Path returns the tool's path. Without it the test is skipped, or fails
// under RequiredEnv, naming the variable and how to get the tool.
func (tool Tool) Path(t testing.TB) string {
	t.Helper()
	if path, ok := tool.Lookup(); ok {
		return path
	}
	if msg := tool.Missing(); Required() {
		t.Fatal(msg)
	} else {
		t.Skip(msg)
	}
	return ""
}

// Missing says which variable to set and how to get the tool, for suites that check their tools before any test runs.
func (tool Tool) Missing() string {
	return fmt.Sprintf("%s is not set: it names %s, which `%s` provides; `make test` sets it", tool.Env, tool.What, tool.Get)
}

// Required reports whether missing tools fail tests rather than skip them.
func Required() bool {
	return os.Getenv(RequiredEnv) != ""
}

// Artifacts returns the directory for a test's artifacts: under
// ArtifactsEnv when set, a temporary directory otherwise.
func Artifacts(t testing.TB) string {
	if root := os.Getenv(ArtifactsEnv); root != "" {
		return root
	}
	return t.TempDir()
}
