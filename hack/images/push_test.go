package main

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// `make push-images` pushes every archive to a real registry (crane's, on
// loopback), and the registry serves each image back under the digest it
// was built with.
func TestPushKeepsDigests(t *testing.T) {
	_, built := sharedImages(t)
	crane := craneBinary(t)

	ctx := t.Context()
	serve := exec.CommandContext(ctx, crane, "registry", "serve", "--address", "127.0.0.1:0")
	stderr, err := serve.StderrPipe()
	require.NoError(t, err)
	require.NoError(t, serve.Start())
	t.Cleanup(func() {
		_ = serve.Process.Kill()
		_ = serve.Wait()
	})
	port := make(chan string, 1)
	go func() {
		scanner := bufio.NewScanner(stderr)
		for scanner.Scan() {
			if m := regexp.MustCompile(`serving on port (\d+)`).FindStringSubmatch(scanner.Text()); m != nil {
				port <- m[1]
			}
		}
	}()
	var registry string
	select {
	case p := <-port:
		registry = "127.0.0.1:" + p + "/stepwise"
	case <-time.After(time.Minute):
		t.Fatal("crane registry serve did not say which port it serves on")
	}

	push := makeCommand(ctx, "push-images", "REGISTRY="+registry, "IMAGES_DIR="+filepath.Dir(built[0].Archive))
	out, err := push.CombinedOutput()
	require.NoError(t, err, "make push-images:\n%s", out)

	for _, b := range built {
		ref := registry + "/" + b.Spec.Name + ":" + shared.rel.Version
		if b.Spec.Test {
			_, err := exec.CommandContext(ctx, crane, "digest", ref).Output()
			assert.Error(t, err, "make push-images pushed the test image %s", ref)
			continue
		}
		digest, err := exec.CommandContext(ctx, crane, "digest", ref).Output()
		require.NoError(t, err, "crane digest %s", ref)
		assert.Equal(t, b.Digest.String(), strings.TrimSpace(string(digest)), ref)

		manifest, err := exec.CommandContext(ctx, crane, "manifest", ref).Output()
		require.NoError(t, err, "crane manifest %s", ref)
		sum := sha256.Sum256(manifest)
		assert.Equal(t, b.Digest.Hex, hex.EncodeToString(sum[:]), "%s: the manifest served back", ref)
		assert.Contains(t, string(out), registry+"/"+b.Spec.Name+"@"+b.Digest.String(), "make push-images names what it pushed")
	}
}

// craneBinary builds crane with the Makefile, as `make push-images` does,
// and returns its path.
func craneBinary(t *testing.T) string {
	t.Helper()
	out, err := makeCommand(t.Context(), "crane").CombinedOutput()
	require.NoError(t, err, "make crane:\n%s", out)
	goMod, err := os.ReadFile(filepath.Join(moduleRoot, "hack/tools/crane/go.mod"))
	require.NoError(t, err)
	m := regexp.MustCompile(`(?m)^\s*github.com/google/go-containerregistry (\S+)`).FindSubmatch(goMod)
	require.NotNil(t, m, "hack/tools/crane/go.mod pins no go-containerregistry")
	crane, err := filepath.Abs(filepath.Join(moduleRoot, "bin", "crane-"+string(m[1])))
	require.NoError(t, err)
	return crane
}

// makeCommand runs a target of the repository's Makefile, apart from any
// make this test runs under.
func makeCommand(ctx context.Context, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, "make", append([]string{"--no-print-directory", "-C", moduleRoot}, args...)...)
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "MAKEFLAGS=") && !strings.HasPrefix(kv, "MFLAGS=") && !strings.HasPrefix(kv, "MAKELEVEL=") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	return cmd
}
