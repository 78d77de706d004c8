package charts_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"

	"github.com/stepwise-run/stepwise/internal/testtools"
)

// The rendered arguments are flags the operator defines and values it
// accepts: the operator built from this tree parses them and applies its own
// checks (engine address, API key Secret, host path roots) and stops only
// where it needs a cluster.
func TestTheOperatorAcceptsTheRenderedArguments(t *testing.T) {
	out, err := render(t, "--values", allValues)
	if err != nil {
		t.Fatal(err)
	}
	objs := parse(t, out)
	for _, tc := range []struct{ deployment, command string }{
		{"Deployment/stepwise-all", "../cmd/manager"},
		{"Deployment/stepwise-all-gateway", "../cmd/gateway"},
	} {
		t.Run(tc.command, func(t *testing.T) {
			args := withKeyFile(t, get[appsv1.Deployment](t, objs, tc.deployment).Spec.Template.Spec.Containers[0].Args)
			binary := filepath.Join(t.TempDir(), "command")
			build := exec.Command("go", "build", "-o", binary, tc.command)
			if out, err := build.CombinedOutput(); err != nil {
				t.Fatalf("building %s: %v\n%s", tc.command, err, out)
			}
			home := t.TempDir()
			run := exec.Command(binary, append(args, "--kubeconfig", filepath.Join(home, "no-kubeconfig"))...)
			run.Env = []string{"HOME=" + home, "PATH=" + os.Getenv("PATH")}
			stderr, err := run.CombinedOutput()
			if err == nil {
				t.Fatalf("%s ran without a cluster", tc.command)
			}
			if !strings.Contains(string(stderr), "loading the kubeconfig") {
				t.Errorf("%s stopped before it looked for a cluster, so it refused a rendered argument:\n%s", tc.command, stderr)
			}
		})
	}
}

// withKeyFile points the event hub credential flags at files of the
// test's, where the pod would mount the Secrets.
func withKeyFile(t *testing.T, args []string) []string {
	t.Helper()
	dir := t.TempDir()
	keys, tokens := filepath.Join(dir, "keys"), filepath.Join(dir, "tokens")
	if err := os.WriteFile(keys, []byte("k1:"+strings.Repeat("k", 48)), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(tokens, []byte(strings.Repeat("r", 48)), 0o600); err != nil {
		t.Fatal(err)
	}
	out := slices.Clone(args)
	for i, arg := range out {
		switch name, _, _ := strings.Cut(arg, "="); name {
		case "--event-hub-publish-keys-file", "--hub-publish-keys-file":
			out[i] = name + "=" + keys
		case "--hub-read-tokens-file":
			out[i] = name + "=" + tokens
		}
	}
	return out
}

// The schemas `make chart-check` writes are strict: a misspelled field of a
// rendered object fails kubeconform, naming the field.
func TestKubeconformRefusesAMisspelledField(t *testing.T) {
	kubeconform, schemas := testtools.Kubeconform.Path(t), testtools.KubeSchemas.Path(t)
	out, err := render(t, "--include-crds")
	if err != nil {
		t.Fatal(err)
	}
	check := func(manifests string) (string, error) {
		cmd := exec.Command(kubeconform, "-strict", "-summary", "-schema-location", filepath.Join(schemas, "{{ .ResourceKind }}{{ .KindSuffix }}.json"))
		cmd.Stdin = strings.NewReader(manifests)
		output, err := cmd.CombinedOutput()
		return string(output), err
	}
	if output, err := check(out); err != nil {
		t.Fatalf("the default render fails kubeconform: %v\n%s", err, output)
	}
	misspelled := strings.Replace(out, "readOnlyRootFilesystem:", "readOnlyRootFileSystem:", 1)
	if misspelled == out {
		t.Fatal("the render has no readOnlyRootFilesystem to misspell")
	}
	output, err := check(misspelled)
	if err == nil || !strings.Contains(output, "readOnlyRootFileSystem") {
		t.Errorf("kubeconform accepted a misspelled field or did not name it: %v\n%s", err, output)
	}
}
