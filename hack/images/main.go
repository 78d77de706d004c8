// Command images builds the OCI images of the operator, the stock worker,
// the example support worker and the test cluster's pause image from this
// repository alone, with no container engine: it compiles each command as a
// static binary and packs it on an empty base with a pinned CA bundle and a
// non-root user. It writes one OCI image layout archive per image,
// <out>/<name>.tar, whose index names the image <registry>/<name>:<version>,
// and prints each reference with its digest. The same commit and Go
// toolchain give the same digests.
//
//	go run ./hack/images --version 0.4.0 --registry ghcr.io/stepwise-run --out bin/images
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
)

func main() {
	var rel release
	var out, root string
	flag.StringVar(&rel.Version, "version", "", "The release version: the images' tag and the operator's version.")
	flag.StringVar(&rel.Registry, "registry", "", "The registry and namespace the images are named under, such as ghcr.io/stepwise-run.")
	flag.StringVar(&out, "out", "bin/images", "Directory the image archives are written to.")
	flag.StringVar(&root, "root", ".", "The module's root directory.")
	flag.StringVar(&rel.Revision, "revision", "", "The commit the images are built from (default: git rev-parse HEAD).")
	flag.StringVar(&rel.Source, "source", "https://github.com/stepwise-run/stepwise", "The source repository, for the org.opencontainers.image.source label.")
	flag.StringVar(&rel.Licenses, "licenses", "", "SPDX license expression for the org.opencontainers.image.licenses label; unset, no label.")
	flag.StringVar(&rel.Arch, "arch", runtime.GOARCH, "The architecture the binaries are built for.")
	flag.Parse()

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, root, out, rel)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "images:", err)
		os.Exit(1)
	}
}

// run builds every image of the release and prints each reference with its
// digest and archive.
func run(ctx context.Context, root, out string, rel release) error {
	rel, err := fromCommit(ctx, root, rel)
	if err != nil {
		return err
	}
	built, err := buildImages(ctx, root, out, rel, os.Stderr)
	if err != nil {
		return err
	}
	for _, b := range built {
		fmt.Fprintf(os.Stdout, "%s@%s\t%s\n", b.Reference, b.Digest, b.Archive)
	}
	return nil
}

// fromCommit fills what the flags left unset from the checked-out commit:
// its hash, and its time as the images' creation time (SOURCE_DATE_EPOCH
// when set, else the commit's time).
func fromCommit(ctx context.Context, root string, rel release) (release, error) {
	if rel.Revision == "" {
		revision, err := git(ctx, root, "rev-parse", "HEAD")
		if err != nil {
			return rel, err
		}
		rel.Revision = revision
	}
	epoch := os.Getenv("SOURCE_DATE_EPOCH")
	if epoch == "" {
		var err error
		if epoch, err = git(ctx, root, "log", "-1", "--format=%ct"); err != nil {
			return rel, err
		}
	}
	seconds, err := strconv.ParseInt(epoch, 10, 64)
	if err != nil {
		return rel, fmt.Errorf("SOURCE_DATE_EPOCH %q is not a number of seconds: %w", epoch, err)
	}
	rel.Created = time.Unix(seconds, 0).UTC()
	return rel, nil
}

// git runs git in dir and returns its trimmed output.
func git(ctx context.Context, dir string, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, "git", args...)
	cmd.Dir = dir
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("git %s: %w", strings.Join(args, " "), err)
	}
	return strings.TrimSpace(string(out)), nil
}

// builtImage is one image written to disk.
type builtImage struct {
	Spec      imageSpec
	Reference string
	Digest    v1.Hash
	Archive   string
}

// buildImages compiles every command and writes its image archive into out.
func buildImages(ctx context.Context, root, out string, rel release, log io.Writer) ([]builtImage, error) {
	if err := rel.validate(); err != nil {
		return nil, err
	}
	caCerts, err := caCertificates()
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(out, 0o755); err != nil {
		return nil, err
	}
	binDir, err := os.MkdirTemp("", "stepwise-images-")
	if err != nil {
		return nil, err
	}
	defer func() { _ = os.RemoveAll(binDir) }()

	fmt.Fprintf(log, "building %d binaries for linux/%s at version %s\n", len(imageSpecs), rel.Arch, rel.Version)
	if err := goBuild(ctx, root, binDir, rel); err != nil {
		return nil, err
	}

	built := make([]builtImage, 0, len(imageSpecs))
	for _, spec := range imageSpecs {
		binary, err := os.ReadFile(filepath.Join(binDir, path.Base(spec.Package)))
		if err != nil {
			return nil, err
		}
		img, err := buildImage(spec, rel, binary, caCerts)
		if err != nil {
			return nil, err
		}
		archive := filepath.Join(out, spec.Name+".tar")
		if err := writeArchive(archive, img, spec, rel); err != nil {
			return nil, err
		}
		digest, err := img.Digest()
		if err != nil {
			return nil, err
		}
		built = append(built, builtImage{Spec: spec, Reference: rel.reference(spec), Digest: digest, Archive: archive})
	}
	return built, nil
}

// goBuild compiles every image's command in one go build, as static
// binaries with no build paths, VCS stamp or build ID in them, so the same
// source and toolchain give the same bytes.
func goBuild(ctx context.Context, root, binDir string, rel release) error {
	args := []string{"build", "-o", binDir + string(filepath.Separator),
		"-trimpath", "-buildvcs=false",
		"-ldflags", "-s -w -buildid= -X github.com/stepwise-run/stepwise/internal/version.Operator=" + rel.Version}
	for _, spec := range imageSpecs {
		args = append(args, spec.Package)
	}
	cmd := exec.CommandContext(ctx, "go", args...)
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH="+rel.Arch, "GOFLAGS=")
	cmd.Stdout = os.Stderr
	cmd.Stderr = os.Stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("go %s: %w", strings.Join(args, " "), err)
	}
	return nil
}
