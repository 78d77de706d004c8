package main

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"encoding/pem"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/partial"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
	"golang.org/x/crypto/x509roots/fallback/bundle"

	"github.com/stepwise-run/stepwise/internal/version"
)

// The user every image runs as: numeric, so that a pod's runAsNonRoot holds
// without the kubelet reading /etc/passwd.
const (
	nonrootID   = 65532
	imageUser   = "65532:65532"
	binaryDir   = "usr/local/bin"
	caBundle    = "etc/ssl/certs/ca-certificates.crt"
	binaryMode  = 0o555
	fileMode    = 0o644
	dirMode     = 0o755
	archiveMode = 0o644
)

// Label and annotation keys. The OCI keys are the pre-defined annotations of
// the image spec; engineVersionLabel is the project's own.
const (
	labelTitle         = "org.opencontainers.image.title"
	labelVersion       = "org.opencontainers.image.version"
	labelRevision      = "org.opencontainers.image.revision"
	labelSource        = "org.opencontainers.image.source"
	labelLicenses      = "org.opencontainers.image.licenses"
	labelCreated       = "org.opencontainers.image.created"
	engineVersionLabel = "run.stepwise.engine-version"
	// refNameAnnotation names the image in an OCI layout's index.json.
	refNameAnnotation = "org.opencontainers.image.ref.name"
	// containerdNameAnnotation is the name containerd's import reads first;
	// it falls back to ref.name, and prefixes a ref.name that is a bare tag
	// with "import-<date>".
	containerdNameAnnotation = "io.containerd.image.name"
)

// imageSpec is one image this project ships: which command goes into it and
// what it is called.
type imageSpec struct {
	// Name is the image's name under the registry and the binary's name in
	// the image.
	Name string
	// Package is the Go package of the command, relative to the module root.
	Package string
	// Worker marks a worker image, which carries the engine version it runs.
	Worker bool
	// Test marks an image only the project's own tests run; it is never
	// pushed.
	Test bool
}

// imageSpecs are the images `make images` builds: the operator, the gateway, the stock
// worker, the example support worker, the pause image that holds a pod's
// namespaces in the test cluster, and the end-to-end suite's worker, which
// `make push-images` leaves out.
var imageSpecs = []imageSpec{
	{Name: "operator", Package: "./cmd/manager"},
	{Name: "gateway", Package: "./cmd/gateway"},
	{Name: "agent-worker", Package: "./cmd/agent-worker", Worker: true},
	{Name: "support-worker", Package: "./examples/support-worker", Worker: true},
	{Name: "pause", Package: "./hack/pause"},
	{Name: "e2e-worker", Package: "./test/e2e/worker", Worker: true, Test: true},
}

// release is what every image of one build shares: where it is published,
// under which version, and which commit it was built from.
type release struct {
	Version  string
	Registry string
	Revision string
	// Created is the commit's time: the image's creation time and every file's
	// modification time, so the same commit gives the same digests.
	Created  time.Time
	Source   string
	Licenses string
	Arch     string
}

// reference is the full name the image is published under.
func (r release) reference(spec imageSpec) string {
	return r.Registry + "/" + spec.Name + ":" + r.Version
}

// validate refuses a release whose references would not parse, naming the
// value at fault.
func (r release) validate() error {
	if r.Version == "" {
		return fmt.Errorf("version is empty")
	}
	if r.Registry == "" {
		return fmt.Errorf("registry is empty")
	}
	if r.Revision == "" {
		return fmt.Errorf("revision is empty")
	}
	if r.Created.IsZero() {
		return fmt.Errorf("creation time is unset")
	}
	if r.Arch == "" {
		return fmt.Errorf("architecture is empty")
	}
	for _, spec := range imageSpecs {
		if _, err := name.NewTag(r.reference(spec), name.StrictValidation); err != nil {
			return fmt.Errorf("registry %q and version %q do not make an image reference: %w", r.Registry, r.Version, err)
		}
	}
	return nil
}

// labels are the image's OCI labels, set both in its config and as its
// manifest's annotations.
func labels(spec imageSpec, rel release) map[string]string {
	l := map[string]string{
		labelTitle:    spec.Name,
		labelVersion:  rel.Version,
		labelRevision: rel.Revision,
		labelCreated:  rel.Created.UTC().Format(time.RFC3339),
	}
	if rel.Source != "" {
		l[labelSource] = rel.Source
	}
	if rel.Licenses != "" {
		l[labelLicenses] = rel.Licenses
	}
	if spec.Worker {
		l[engineVersionLabel] = version.EngineVersion
	}
	return l
}

// fileEntry is one entry of the image's only layer.
type fileEntry struct {
	Name string
	Mode int64
	Dir  bool
	Data []byte
}

// passwdFile and groupFile name root and the user the image runs as, for
// programs that look a user up; the image has no shell, so neither has one.
const (
	passwdFile = "root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:65532:65532:nonroot:/:/sbin/nologin\n"
	groupFile  = "root:x:0:\nnonroot:x:65532:\n"
)

// layerEntries lists every entry of the image's layer, parents before
// children, sorted by name.
func layerEntries(binaryName string, binary, caCerts []byte) []fileEntry {
	entries := []fileEntry{
		{Name: "etc/", Mode: dirMode, Dir: true},
		{Name: "etc/group", Mode: fileMode, Data: []byte(groupFile)},
		{Name: "etc/passwd", Mode: fileMode, Data: []byte(passwdFile)},
		{Name: "etc/ssl/", Mode: dirMode, Dir: true},
		{Name: "etc/ssl/certs/", Mode: dirMode, Dir: true},
		{Name: caBundle, Mode: fileMode, Data: caCerts},
		{Name: "usr/", Mode: dirMode, Dir: true},
		{Name: "usr/local/", Mode: dirMode, Dir: true},
		{Name: binaryDir + "/", Mode: dirMode, Dir: true},
		{Name: binaryDir + "/" + binaryName, Mode: binaryMode, Data: binary},
	}
	slices.SortFunc(entries, func(a, b fileEntry) int { return strings.Compare(a.Name, b.Name) })
	return entries
}

// caCertificates is the PEM bundle of the root certificates pinned by the
// golang.org/x/crypto/x509roots/fallback module in go.mod, so that the bundle
// in an image depends on this repository alone. A root the bundle trusts only
// under a constraint (such as "not after a date") is left out: a PEM file
// cannot carry the constraint.
func caCertificates() ([]byte, error) {
	var out bytes.Buffer
	for root := range bundle.Roots() {
		if root.Constraint != nil {
			continue
		}
		if err := pem.Encode(&out, &pem.Block{Type: "CERTIFICATE", Bytes: root.Certificate}); err != nil {
			return nil, err
		}
	}
	if out.Len() == 0 {
		return nil, fmt.Errorf("the pinned root certificate bundle is empty")
	}
	return out.Bytes(), nil
}

// writeTar writes the entries as a tar stream with fixed owners, modes and
// modification times, so the bytes depend on the entries alone.
func writeTar(w io.Writer, entries []fileEntry, modTime time.Time) error {
	tw := tar.NewWriter(w)
	for _, e := range entries {
		hdr := &tar.Header{
			Name:    e.Name,
			Mode:    e.Mode,
			ModTime: modTime.UTC().Truncate(time.Second),
			Format:  tar.FormatUSTAR,
		}
		if e.Dir {
			hdr.Typeflag = tar.TypeDir
		} else {
			hdr.Typeflag = tar.TypeReg
			hdr.Size = int64(len(e.Data))
		}
		if err := tw.WriteHeader(hdr); err != nil {
			return fmt.Errorf("writing %s: %w", e.Name, err)
		}
		if !e.Dir {
			if _, err := tw.Write(e.Data); err != nil {
				return fmt.Errorf("writing %s: %w", e.Name, err)
			}
		}
	}
	return tw.Close()
}

// gzipLayer compresses a layer with a fixed header (no name, no time), so the
// compressed bytes, and the digest, depend on the content alone.
func gzipLayer(entries []fileEntry, modTime time.Time) ([]byte, error) {
	var out bytes.Buffer
	zw, err := gzip.NewWriterLevel(&out, gzip.BestCompression)
	if err != nil {
		return nil, err
	}
	if err := writeTar(zw, entries, modTime); err != nil {
		return nil, err
	}
	if err := zw.Close(); err != nil {
		return nil, err
	}
	return out.Bytes(), nil
}

// buildImage assembles one image: an empty base, one layer with the binary,
// the CA bundle, /etc/passwd and /etc/group, and a config that runs the
// binary as the non-root user.
func buildImage(spec imageSpec, rel release, binary, caCerts []byte) (v1.Image, error) {
	compressed, err := gzipLayer(layerEntries(spec.Name, binary, caCerts), rel.Created)
	if err != nil {
		return nil, fmt.Errorf("image %s: layer: %w", spec.Name, err)
	}
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(compressed)), nil
	}, tarball.WithMediaType(types.OCILayer))
	if err != nil {
		return nil, fmt.Errorf("image %s: layer: %w", spec.Name, err)
	}

	imageLabels := labels(spec, rel)
	created := v1.Time{Time: rel.Created.UTC()}
	base := mutate.ConfigMediaType(mutate.MediaType(empty.Image, types.OCIManifestSchema1), types.OCIConfigJSON)
	base, err = mutate.ConfigFile(base, &v1.ConfigFile{
		Architecture: rel.Arch,
		OS:           "linux",
		Created:      created,
		RootFS:       v1.RootFS{Type: "layers"},
		Config: v1.Config{
			Entrypoint: []string{"/" + binaryDir + "/" + spec.Name},
			Env:        []string{"PATH=/" + binaryDir},
			User:       imageUser,
			WorkingDir: "/",
			Labels:     imageLabels,
		},
	})
	if err != nil {
		return nil, fmt.Errorf("image %s: config: %w", spec.Name, err)
	}
	img, err := mutate.Append(base, mutate.Addendum{
		Layer: layer,
		History: v1.History{
			Created:   created,
			CreatedBy: "hack/images: go build " + spec.Package,
		},
	})
	if err != nil {
		return nil, fmt.Errorf("image %s: %w", spec.Name, err)
	}
	annotated, ok := mutate.Annotations(img, imageLabels).(v1.Image)
	if !ok {
		return nil, fmt.Errorf("image %s: annotating the manifest did not give an image", spec.Name)
	}
	return annotated, nil
}

// indexAnnotations are the annotations of the image's entry in the archive's
// index.json: its labels and its full reference, under the OCI key and the
// key containerd's import reads.
func indexAnnotations(spec imageSpec, rel release) map[string]string {
	a := labels(spec, rel)
	a[refNameAnnotation] = rel.reference(spec)
	a[containerdNameAnnotation] = rel.reference(spec)
	return a
}

// writeArchive writes img as an OCI image layout packed in a tar file at
// path, with one index entry naming the image.
func writeArchive(path string, img v1.Image, spec imageSpec, rel release) error {
	dir, err := os.MkdirTemp(filepath.Dir(path), ".layout-"+spec.Name+"-")
	if err != nil {
		return err
	}
	defer func() { _ = os.RemoveAll(dir) }()

	lp, err := layout.Write(dir, empty.Index)
	if err != nil {
		return fmt.Errorf("image %s: OCI layout: %w", spec.Name, err)
	}
	if err := lp.WriteImage(img); err != nil {
		return fmt.Errorf("image %s: OCI layout: %w", spec.Name, err)
	}
	desc, err := partial.Descriptor(img)
	if err != nil {
		return fmt.Errorf("image %s: %w", spec.Name, err)
	}
	// The library fills in artifactType from the config's media type; the
	// image spec keeps that field for artifacts, and this is an image.
	desc.ArtifactType = ""
	desc.Annotations = indexAnnotations(spec, rel)
	desc.Platform = &v1.Platform{OS: "linux", Architecture: rel.Arch}
	if err := lp.AppendDescriptor(*desc); err != nil {
		return fmt.Errorf("image %s: OCI layout: %w", spec.Name, err)
	}
	entries, err := layoutEntries(dir)
	if err != nil {
		return fmt.Errorf("image %s: OCI layout: %w", spec.Name, err)
	}

	tmp := path + ".tmp"
	f, err := os.Create(tmp)
	if err != nil {
		return err
	}
	if err := writeTar(f, entries, rel.Created); err != nil {
		_ = f.Close()
		return fmt.Errorf("image %s: %s: %w", spec.Name, tmp, err)
	}
	if err := f.Close(); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// layoutEntries reads an OCI layout directory into archive entries with
// fixed modes, sorted by name.
func layoutEntries(dir string) ([]fileEntry, error) {
	var entries []fileEntry
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || path == dir {
			return err
		}
		rel, err := filepath.Rel(dir, path)
		if err != nil {
			return err
		}
		rel = filepath.ToSlash(rel)
		if d.IsDir() {
			entries = append(entries, fileEntry{Name: rel + "/", Mode: dirMode, Dir: true})
			return nil
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		entries = append(entries, fileEntry{Name: rel, Mode: archiveMode, Data: data})
		return nil
	})
	slices.SortFunc(entries, func(a, b fileEntry) int { return strings.Compare(a.Name, b.Name) })
	return entries, err
}
