// Package browsertest runs the web page's browser scripts: node drives the
// system's Chromium through playwright-core, both named by the environment
// `make test` sets.
package browsertest

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/stepwise-run/stepwise/internal/testtools"
)

// Run runs a browser script with the variables env adds, and fails the
// test if the script fails. The script's screenshots go to artifacts under
// STEPWISE_TEST_ARTIFACTS, or to a temporary directory without it.
func Run(t *testing.T, script, artifacts string, env map[string]string) {
	t.Helper()
	driver, chromium := testtools.BrowserDriver.Path(t), testtools.Chromium.Path(t)
	artifacts = filepath.Join(testtools.Artifacts(t), artifacts)
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "node", script)
	cmd.Env = append(os.Environ(), "STEPWISE_BROWSER_DRIVER="+driver, "STEPWISE_CHROMIUM="+chromium, "STEPWISE_PAGE_ARTIFACTS="+artifacts)
	for k, v := range env {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	out, err := cmd.CombinedOutput()
	t.Logf("the browser script %s:\n%s", filepath.Base(script), out)
	if err != nil {
		t.Fatalf("the browser script %s failed: %v; its screenshots are in %s", filepath.Base(script), err, artifacts)
	}
}
