package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"sigs.k8s.io/yaml"
)

// The defaults name the images `make images` builds: the operator built into
// the image names the agent-worker image as its default worker, the sample
// Agent runs the support-worker image, and the chart's operator Deployment
// runs the operator image.
func TestDefaultsNameTheBuiltImages(t *testing.T) {
	rel, built := sharedImages(t)
	refs := map[string]string{}
	for _, b := range built {
		refs[b.Spec.Name] = b.Reference
	}
	assert.Equal(t, "ghcr.io/stepwise-run/agent-worker:0.4.0", refs["agent-worker"])
	assert.Equal(t, "ghcr.io/stepwise-run/support-worker:0.4.0", refs["support-worker"])

	sample, err := os.ReadFile(filepath.Join(moduleRoot, "config/samples/agent-support.yaml"))
	require.NoError(t, err)
	assert.Contains(t, string(sample), "image: "+refs["support-worker"]+"\n")

	// The chart runs <image.registry>/operator:<appVersion> by default.
	var chart struct {
		AppVersion string `json:"appVersion"`
	}
	var values struct {
		Image struct {
			Registry string `json:"registry"`
		} `json:"image"`
	}
	for file, into := range map[string]any{"charts/stepwise/Chart.yaml": &chart, "charts/stepwise/values.yaml": &values} {
		data, err := os.ReadFile(filepath.Join(moduleRoot, file))
		require.NoError(t, err)
		require.NoError(t, yaml.Unmarshal(data, into), file)
	}
	assert.Equal(t, refs["operator"], values.Image.Registry+"/operator:"+chart.AppVersion)

	if rel.Arch != runtime.GOARCH || runtime.GOOS != "linux" {
		t.Skipf("the operator binary is built for linux/%s and cannot run here", rel.Arch)
	}
	_, img := readArchive(t, filepath.Join(filepath.Dir(built[0].Archive), "operator.tar"))
	operator := filepath.Join(t.TempDir(), "operator")
	require.NoError(t, os.WriteFile(operator, layerFiles(t, img).data["usr/local/bin/operator"], 0o755))
	help, _ := exec.CommandContext(t.Context(), operator, "-help").CombinedOutput()
	assert.Contains(t, string(help), fmt.Sprintf("(default %q)", refs["agent-worker"]),
		"the operator's --worker-image default:\n%s", help)
}

func TestBadReleaseIsRefused(t *testing.T) {
	good := release{Version: "0.4.0", Registry: "ghcr.io/stepwise-run", Revision: "abc", Created: time.Unix(1, 0), Arch: "amd64"}
	require.NoError(t, good.validate())

	for _, tc := range []struct {
		name   string
		change func(*release)
		want   string
	}{
		{"empty version", func(r *release) { r.Version = "" }, "version is empty"},
		{"version with build metadata", func(r *release) { r.Version = "0.4.0+abc" }, `version "0.4.0+abc"`},
		{"registry with upper case", func(r *release) { r.Registry = "ghcr.io/Stepwise" }, `registry "ghcr.io/Stepwise"`},
		{"empty registry", func(r *release) { r.Registry = "" }, "registry is empty"},
		{"no revision", func(r *release) { r.Revision = "" }, "revision is empty"},
		{"no time", func(r *release) { r.Created = time.Time{} }, "creation time is unset"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rel := good
			tc.change(&rel)
			err := rel.validate()
			require.Error(t, err)
			assert.Contains(t, err.Error(), tc.want)
		})
	}
}
