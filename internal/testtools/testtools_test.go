package testtools

import (
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// recorder is a test that records whether it was skipped or failed, and
// stops its goroutine as the real ones do.
type recorder struct {
	testing.TB
	skipped, failed string
}

func (r *recorder) Helper() {}

func (r *recorder) Skip(args ...any) {
	r.skipped = args[0].(string)
	runtime.Goexit()
}

func (r *recorder) Fatal(args ...any) {
	r.failed = args[0].(string)
	runtime.Goexit()
}

func run(t *testing.T, tool Tool) (path string, r *recorder) {
	r = &recorder{TB: t}
	done := make(chan struct{})
	go func() {
		defer close(done)
		path = tool.Path(r)
	}()
	<-done
	return path, r
}

func TestAMissingToolSkipsAloneAndFailsUnderMakeTest(t *testing.T) {
	tool := Tool{Env: "STEPWISE_TESTTOOLS_EXAMPLE", What: "an example", Get: "make example"}
	for _, tc := range []struct {
		name, value, required string
		wantPath              string
		wantSkip, wantFail    bool
	}{
		{name: "set", value: "/bin/example", wantPath: "/bin/example"},
		{name: "set and required", value: "/bin/example", required: "1", wantPath: "/bin/example"},
		{name: "missing alone", wantSkip: true},
		{name: "missing under make test", required: "1", wantFail: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv(tool.Env, tc.value)
			t.Setenv(RequiredEnv, tc.required)
			path, r := run(t, tool)
			if path != tc.wantPath || (r.skipped != "") != tc.wantSkip || (r.failed != "") != tc.wantFail {
				t.Fatalf("path %q, skipped %q, failed %q", path, r.skipped, r.failed)
			}
			for _, msg := range []string{r.skipped, r.failed} {
				if msg != "" && (!strings.Contains(msg, tool.Env) || !strings.Contains(msg, "make example")) {
					t.Errorf("the message %q names neither the variable nor how to get the tool", msg)
				}
			}
		})
	}
}

// TestNoOtherPackageReadsAToolVariable keeps this package the one place a
// test learns where its tools are, so each has one policy for a missing
// tool. The commands under hack/ take KUBEBUILDER_ASSETS as their flags'
// default, as envtest's own tools do.
func TestNoOtherPackageReadsAToolVariable(t *testing.T) {
	root := filepath.Join("..", "..")
	names := []string{ArtifactsEnv, RequiredEnv}
	for _, tool := range All {
		names = append(names, tool.Env)
	}
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		if d.IsDir() {
			switch rel {
			case "bin", ".local", ".git", "hack", filepath.Join("internal", "testtools"):
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") {
			return nil
		}
		src, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for _, name := range names {
			if strings.Contains(string(src), `"`+name+`"`) {
				t.Errorf("%s names %s: ask internal/testtools for the tool instead", rel, name)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
