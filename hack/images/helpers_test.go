package main

import (
	"context"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
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
