package main

import (
	"archive/tar"
	"bufio"
	"context"
	"crypto/sha256"
	"crypto/x509"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/types"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"sigs.k8s.io/yaml"

	"github.com/stepwise-run/stepwise/internal/version"
)

// moduleRoot is the repository root, seen from this package's directory.
const moduleRoot = "../.."

// Compiling the four binaries takes a while, so the test binary builds the
// images once and every test reads the same archives.
var shared struct {
	once  sync.Once
	rel   release
	out   string
	built []builtImage
	err   error
}

func sharedImages(t *testing.T) (release, []builtImage) {
	t.Helper()
	shared.once.Do(func() {
		shared.rel, shared.err = defaultRelease()
		if shared.err != nil {
			return
		}
		shared.out, shared.err = os.MkdirTemp("", "stepwise-images-test-")
		if shared.err != nil {
			return
		}
		shared.built, shared.err = buildImages(context.Background(), moduleRoot, shared.out, shared.rel, io.Discard)
	})
	require.NoError(t, shared.err)
	return shared.rel, shared.built
}

func TestMain(m *testing.M) {
	code := m.Run()
	if shared.out != "" {
		_ = os.RemoveAll(shared.out)
	}
	os.Exit(code)
}

// defaultRelease is what `make images` builds: the Makefile's VERSION and
// REGISTRY, at the checked-out commit.
func defaultRelease() (release, error) {
	makefile, err := os.ReadFile(filepath.Join(moduleRoot, "Makefile"))
	if err != nil {
		return release{}, err
	}
	rel := release{
		Version:  makeDefault(string(makefile), "VERSION"),
		Registry: makeDefault(string(makefile), "REGISTRY"),
		Source:   "https://github.com/stepwise-run/stepwise",
		Arch:     runtime.GOARCH,
	}
	return fromCommit(context.Background(), moduleRoot, rel)
}

func makeDefault(makefile, variable string) string {
	m := regexp.MustCompile(`(?m)^` + variable + `\s*\?=\s*(\S+)\s*$`).FindStringSubmatch(makefile)
	if m == nil {
		return ""
	}
	return m[1]
}

func TestImagesAreReproducible(t *testing.T) {
	rel, first := sharedImages(t)

	again, err := buildImages(t.Context(), moduleRoot, t.TempDir(), rel, io.Discard)
	require.NoError(t, err)

	require.Len(t, again, len(first))
	for i := range first {
		assert.Equal(t, first[i].Reference, again[i].Reference)
		assert.Equal(t, first[i].Digest, again[i].Digest, "%s: a second build gave another digest", first[i].Reference)
		assert.Equal(t, fileDigest(t, first[i].Archive), fileDigest(t, again[i].Archive),
			"%s: a second build gave another archive", first[i].Reference)
		t.Logf("%s@%s", first[i].Reference, first[i].Digest)
	}
}

func TestArchivesHoldOneNamedNonRootImage(t *testing.T) {
	rel, built := sharedImages(t)
	require.Len(t, built, len(imageSpecs))

	for _, b := range built {
		t.Run(b.Spec.Name, func(t *testing.T) {
			index, img := readArchive(t, b.Archive)

			// The index names the image with its full reference, for
			// containerd's import and for OCI tools.
			require.Len(t, index.Manifests, 1)
			desc := index.Manifests[0]
			assert.Equal(t, b.Digest, desc.Digest)
			assert.Equal(t, types.OCIManifestSchema1, desc.MediaType)
			assert.Empty(t, desc.ArtifactType, "an image, not an artifact")
			assert.Equal(t, b.Reference, desc.Annotations["org.opencontainers.image.ref.name"])
			assert.Equal(t, b.Reference, desc.Annotations["io.containerd.image.name"])
			require.NotNil(t, desc.Platform)
			assert.Equal(t, v1.Platform{OS: "linux", Architecture: rel.Arch}, *desc.Platform)

			wantLabels := map[string]string{
				"org.opencontainers.image.title":    b.Spec.Name,
				"org.opencontainers.image.version":  rel.Version,
				"org.opencontainers.image.revision": rel.Revision,
				"org.opencontainers.image.source":   "https://github.com/stepwise-run/stepwise",
				"org.opencontainers.image.created":  rel.Created.UTC().Format(time.RFC3339),
			}
			if b.Spec.Worker {
				wantLabels["run.stepwise.engine-version"] = version.EngineVersion
			}
			assert.Len(t, rel.Revision, 40)

			manifest, err := img.Manifest()
			require.NoError(t, err)
			assert.Equal(t, wantLabels, manifest.Annotations)
			assert.Equal(t, types.OCIConfigJSON, manifest.Config.MediaType)
			require.Len(t, manifest.Layers, 1)
			assert.Equal(t, types.OCILayer, manifest.Layers[0].MediaType)

			cfg, err := img.ConfigFile()
			require.NoError(t, err)
			assert.Equal(t, "65532:65532", cfg.Config.User)
			assert.Equal(t, "/", cfg.Config.WorkingDir)
			assert.Equal(t, []string{"/usr/local/bin/" + b.Spec.Name}, cfg.Config.Entrypoint)
			assert.Empty(t, cfg.Config.Cmd)
			assert.Equal(t, wantLabels, cfg.Config.Labels)
			assert.Equal(t, "linux", cfg.OS)
			assert.Equal(t, rel.Arch, cfg.Architecture)
			assert.True(t, cfg.Created.Equal(rel.Created), "created %s, want the commit's time %s", cfg.Created.Time, rel.Created)
			for _, h := range cfg.History {
				assert.True(t, h.Created.Equal(rel.Created), "history created %s", h.Created.Time)
			}

			files := layerFiles(t, img)
			assert.Equal(t, []string{
				"etc/", "etc/group", "etc/passwd", "etc/ssl/", "etc/ssl/certs/", "etc/ssl/certs/ca-certificates.crt",
				"usr/", "usr/local/", "usr/local/bin/", "usr/local/bin/" + b.Spec.Name,
			}, files.names, "the layer's entries, in the order written")
			for name, hdr := range files.headers {
				assert.Zero(t, hdr.Uid, name)
				assert.Zero(t, hdr.Gid, name)
				assert.True(t, hdr.ModTime.Equal(rel.Created), "%s: mtime %s", name, hdr.ModTime)
				if strings.HasSuffix(name, "/") {
					assert.Equal(t, byte(tar.TypeDir), hdr.Typeflag, name)
					assert.Equal(t, int64(0o755), hdr.Mode, name)
				} else {
					assert.Equal(t, byte(tar.TypeReg), hdr.Typeflag, name)
				}
			}

			binary := "usr/local/bin/" + b.Spec.Name
			assert.Equal(t, int64(0o555), files.headers[binary].Mode)
			assert.True(t, strings.HasPrefix(string(files.data[binary]), "\x7fELF"), "the binary is an ELF executable")
			assert.Equal(t, int64(0o644), files.headers["etc/passwd"].Mode)
			assert.Contains(t, string(files.data["etc/passwd"]), "\nnonroot:x:65532:65532:")
			assert.Contains(t, string(files.data["etc/group"]), "\nnonroot:x:65532:\n")
			assert.Greater(t, countCertificates(t, files.data["etc/ssl/certs/ca-certificates.crt"]), 100)
		})
	}
}

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

// A private containerd (the runtime of the project's test cluster) imports
// each archive under its full reference and digest.
func TestContainerdImportsArchives(t *testing.T) {
	for _, tool := range []string{"containerd", "ctr"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("%s is not installed (apt-get install containerd): %v", tool, err)
		}
	}
	if os.Geteuid() != 0 {
		t.Skip("containerd needs root")
	}
	_, built := sharedImages(t)

	ctr := startContainerd(t)
	for _, b := range built {
		out, err := ctr.run("images", "import", b.Archive)
		require.NoError(t, err, "ctr images import %s:\n%s", b.Archive, out)
		t.Logf("ctr -n k8s.io images import %s:\n%s", filepath.Base(b.Archive), out)
	}

	out, err := ctr.run("images", "ls")
	require.NoError(t, err, "ctr images ls:\n%s", out)
	t.Logf("ctr -n k8s.io images ls:\n%s", out)
	listed := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(out), "\n")[1:] {
		fields := strings.Fields(line)
		require.GreaterOrEqual(t, len(fields), 3, line)
		listed[fields[0]] = fields[2]
	}
	want := map[string]string{}
	for _, b := range built {
		want[b.Reference] = b.Digest.String()
	}
	assert.Equal(t, want, listed, "the images containerd lists, with their digests")

	for _, b := range built {
		out, err := ctr.run("images", "check", "name=="+b.Reference)
		require.NoError(t, err, "ctr images check:\n%s", out)
		assert.Contains(t, out, "complete", "%s: all its content is present", b.Reference)
	}

	// The pause image runs as the sandbox of a pod would: as 65532, until
	// SIGTERM, which it answers by exiting 0.
	var pause builtImage
	for _, b := range built {
		if b.Spec.Name == "pause" {
			pause = b
		}
	}
	run := ctr.command("run", "--rm", pause.Reference, "pause-test")
	var runOutput strings.Builder
	run.Stdout = &runOutput
	run.Stderr = &runOutput
	require.NoError(t, run.Start())
	exited := make(chan error, 1)
	go func() { exited <- run.Wait() }()
	t.Cleanup(func() {
		// A container still running after a failed assertion would outlive
		// containerd.
		_, _ = ctr.run("tasks", "kill", "--signal", "SIGKILL", "pause-test")
		_, _ = ctr.run("tasks", "delete", "--force", "pause-test")
		_, _ = ctr.run("containers", "delete", "pause-test")
	})

	var pid string
	deadline := time.Now().Add(time.Minute)
	for pid == "" {
		out, _ := ctr.run("tasks", "ls")
		for _, line := range strings.Split(out, "\n") {
			if fields := strings.Fields(line); len(fields) == 3 && fields[0] == "pause-test" && fields[2] == "RUNNING" {
				pid = fields[1]
			}
		}
		if pid == "" {
			require.True(t, time.Now().Before(deadline), "the pause container did not start within a minute:\n%s", runOutput.String())
			time.Sleep(100 * time.Millisecond)
		}
	}
	status, err := os.ReadFile("/proc/" + pid + "/status")
	require.NoError(t, err)
	assert.Regexp(t, `(?m)^Uid:\s+65532\s+65532\s+65532\s+65532$`, string(status))
	assert.Regexp(t, `(?m)^Gid:\s+65532\s+65532\s+65532\s+65532$`, string(status))

	out, err = ctr.run("tasks", "kill", "--signal", "SIGTERM", "pause-test")
	require.NoError(t, err, "ctr tasks kill:\n%s", out)
	select {
	case err := <-exited:
		require.NoError(t, err, "the pause container's exit after SIGTERM (ctr run gives its status):\n%s", runOutput.String())
	case <-time.After(time.Minute):
		t.Fatal("the pause container did not exit within a minute of SIGTERM")
	}
}

// ctrClient runs ctr against one containerd, in the k8s.io namespace, where
// the kubelet looks for images.
type ctrClient struct {
	socket string
}

// command is not bound to the test's context, so that cleanups can run it
// too.
func (c ctrClient) command(args ...string) *exec.Cmd {
	return exec.Command("ctr", append([]string{"--address", c.socket, "--namespace", "k8s.io"}, args...)...)
}

func (c ctrClient) run(args ...string) (string, error) {
	out, err := c.command(args...).CombinedOutput()
	return string(out), err
}

// startContainerd runs containerd with its root, state and socket under a
// temporary directory (short, for the socket's path), and returns a ctr
// client for it.
func startContainerd(t *testing.T) ctrClient {
	t.Helper()
	dir, err := os.MkdirTemp("", "ctrd-")
	require.NoError(t, err)
	socket := filepath.Join(dir, "containerd.sock")
	config := filepath.Join(dir, "config.toml")
	require.NoError(t, os.WriteFile(config, fmt.Appendf(nil, `version = 2
root = %q
state = %q
disabled_plugins = ["io.containerd.grpc.v1.cri"]

[grpc]
  address = %q

[ttrpc]
  address = %q
`, filepath.Join(dir, "root"), filepath.Join(dir, "state"), socket, socket+".ttrpc"), 0o600))

	logFile, err := os.Create(filepath.Join(dir, "containerd.log"))
	require.NoError(t, err)
	daemon := exec.Command("containerd", "--config", config)
	daemon.Stdout = logFile
	daemon.Stderr = logFile
	require.NoError(t, daemon.Start())
	t.Cleanup(func() {
		_ = daemon.Process.Signal(os.Interrupt)
		done := make(chan error, 1)
		go func() { done <- daemon.Wait() }()
		select {
		case err := <-done:
			t.Logf("containerd stopped: %v", err)
		case <-time.After(time.Minute):
			_ = daemon.Process.Kill()
			t.Logf("containerd killed after a minute: %v", <-done)
		}
		_ = logFile.Close()
		if t.Failed() {
			if log, err := os.ReadFile(logFile.Name()); err == nil {
				t.Logf("containerd log:\n%s", log)
			}
		}
		_ = os.RemoveAll(dir)
	})

	ctr := ctrClient{socket: socket}
	deadline := time.Now().Add(time.Minute)
	for {
		out, err := ctr.run("version")
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("containerd did not answer within a minute: %v\n%s", err, out)
		}
		time.Sleep(100 * time.Millisecond)
	}
	return ctr
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

// readArchive unpacks an image archive and reads it back with the OCI
// layout reader.
func readArchive(t *testing.T, archive string) (*v1.IndexManifest, v1.Image) {
	t.Helper()
	dir := t.TempDir()
	f, err := os.Open(archive)
	require.NoError(t, err)
	defer func() { _ = f.Close() }()
	tr := tar.NewReader(f)
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		require.NoError(t, err)
		target := filepath.Join(dir, filepath.FromSlash(hdr.Name))
		require.True(t, strings.HasPrefix(target, dir+string(filepath.Separator)), hdr.Name)
		if hdr.Typeflag == tar.TypeDir {
			require.NoError(t, os.MkdirAll(target, 0o755))
			continue
		}
		data, err := io.ReadAll(tr)
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(target, data, 0o644))
	}

	lp, err := layout.FromPath(dir)
	require.NoError(t, err)
	index, err := lp.ImageIndex()
	require.NoError(t, err)
	manifest, err := index.IndexManifest()
	require.NoError(t, err)
	require.NotEmpty(t, manifest.Manifests)
	img, err := lp.Image(manifest.Manifests[0].Digest)
	require.NoError(t, err)
	return manifest, img
}

// layerContents is the one layer of an image: its entry names in the order
// written, their headers and their contents.
type layerContents struct {
	names   []string
	headers map[string]*tar.Header
	data    map[string][]byte
}

func layerFiles(t *testing.T, img v1.Image) layerContents {
	t.Helper()
	layers, err := img.Layers()
	require.NoError(t, err)
	require.Len(t, layers, 1)
	rc, err := layers[0].Uncompressed()
	require.NoError(t, err)
	defer func() { _ = rc.Close() }()

	contents := layerContents{headers: map[string]*tar.Header{}, data: map[string][]byte{}}
	tr := tar.NewReader(rc)
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		require.NoError(t, err)
		require.NotContains(t, contents.headers, hdr.Name, "entry written twice")
		contents.names = append(contents.names, hdr.Name)
		contents.headers[hdr.Name] = hdr
		data, err := io.ReadAll(tr)
		require.NoError(t, err)
		contents.data[hdr.Name] = data
	}
	require.True(t, slices.IsSorted(contents.names), "entries are sorted: %v", contents.names)
	return contents
}

func countCertificates(t *testing.T, bundle []byte) int {
	t.Helper()
	n := 0
	for rest := bundle; ; {
		var block *pem.Block
		block, rest = pem.Decode(rest)
		if block == nil {
			require.Empty(t, strings.TrimSpace(string(rest)), "the bundle is PEM through to its end")
			return n
		}
		require.Equal(t, "CERTIFICATE", block.Type)
		_, err := x509.ParseCertificate(block.Bytes)
		require.NoError(t, err)
		n++
	}
}

func fileDigest(t *testing.T, path string) string {
	t.Helper()
	data, err := os.ReadFile(path)
	require.NoError(t, err)
	sum := sha256.Sum256(data)
	return hex.EncodeToString(sum[:])
}
