package main

import (
	"archive/tar"
	"crypto/sha256"
	"crypto/x509"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/types"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stepwise-run/stepwise/internal/version"
)

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
