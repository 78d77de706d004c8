// Package charts_test checks the operator's Helm chart with the pinned Helm:
// that its schema refuses bad values naming the field, and that what it
// renders is the operator the project builds (its generated RBAC role and
// CRDs, its flags, a restricted security context).
package charts_test

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"

	"github.com/stepwise-run/stepwise/internal/testtools"
)

const (
	chartDir      = "stepwise"
	allValues     = "stepwise/ci/all-values.yaml"
	releaseName   = "stepwise"
	releaseNS     = "stepwise-system"
	defaultPrefix = "ghcr.io/stepwise-run"
)

// helm returns the pinned Helm binary.
func helm(t *testing.T) string {
	t.Helper()
	return testtools.Helm.Path(t)
}

// render runs helm template for the release stepwise in stepwise-system
// with these extra arguments, returning the manifests or Helm's error.
func render(t *testing.T, args ...string) (string, error) {
	t.Helper()
	cmd := exec.Command(helm(t), append([]string{"template", releaseName, chartDir, "--namespace", releaseNS}, args...)...)
	cmd.Env = append(os.Environ(), "HELM_CONFIG_HOME="+t.TempDir(), "HELM_CACHE_HOME="+t.TempDir(), "HELM_DATA_HOME="+t.TempDir())
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return "", errors.New(stderr.String())
	}
	return stdout.String(), nil
}

// valuesFile writes a values file for one render.
func valuesFile(t *testing.T, values string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "values.yaml")
	if err := os.WriteFile(path, []byte(values), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// objects is a render split into its objects, by kind and name.
type objects map[string][]byte

func parse(t *testing.T, manifests string) objects {
	t.Helper()
	out := objects{}
	reader := utilyaml.NewYAMLReader(bufio.NewReader(strings.NewReader(manifests)))
	for {
		doc, err := reader.Read()
		if errors.Is(err, io.EOF) {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		var object unstructured.Unstructured
		if err := yaml.Unmarshal(doc, &object.Object); err != nil {
			t.Fatal(err)
		}
		if object.Object == nil {
			continue
		}
		key := object.GetKind() + "/" + object.GetName()
		if _, dup := out[key]; dup {
			t.Fatalf("the render holds %s twice", key)
		}
		if ns := object.GetNamespace(); ns != "" && ns != releaseNS {
			t.Errorf("%s is in namespace %s, not the release's %s", key, ns, releaseNS)
		}
		out[key] = doc
	}
}

// get decodes one object of the render.
func get[T any](t *testing.T, objs objects, key string) *T {
	t.Helper()
	doc, ok := objs[key]
	if !ok {
		t.Fatalf("the render has no %s; it has %v", key, keysOf(objs))
	}
	var object T
	if err := yaml.UnmarshalStrict(doc, &object); err != nil {
		t.Fatalf("%s: %v", key, err)
	}
	return &object
}

func keysOf(objs objects) []string {
	var keys []string
	for key := range objs {
		keys = append(keys, key)
	}
	slices.Sort(keys)
	return keys
}

func appVersion(t *testing.T) string {
	t.Helper()
	var chart struct {
		AppVersion string `json:"appVersion"`
	}
	data, err := os.ReadFile(filepath.Join(chartDir, "Chart.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(data, &chart); err != nil {
		t.Fatal(err)
	}
	return chart.AppVersion
}

// expectCredentials checks that a Deployment mounts exactly these event
// hub Secrets, each at its own directory, read-only.
func expectCredentials(t *testing.T, d *appsv1.Deployment, secrets ...string) {
	t.Helper()
	dirs := map[string]string{
		"publish-keys": "/etc/stepwise/event-hub-publish-keys",
		"read-tokens":  "/etc/stepwise/event-hub-read-tokens",
	}
	var mounted []string
	for _, v := range d.Spec.Template.Spec.Volumes {
		if v.Secret != nil && strings.Contains(v.Name, "event-hub") {
			mounted = append(mounted, v.Secret.SecretName)
		}
	}
	if !slices.Equal(mounted, secrets) {
		t.Errorf("%s mounts event hub Secrets %q, want %q", d.Name, mounted, secrets)
	}
	for _, secret := range secrets {
		kind := secret[strings.Index(secret, "event-hub-")+len("event-hub-"):]
		for suffix, dir := range dirs {
			if strings.HasSuffix(kind, suffix) && !mountsKey(d.Spec.Template.Spec, secret, dir) {
				t.Errorf("%s does not mount %s at %s", d.Name, secret, dir)
			}
		}
	}
}

// expectSelects checks that a Service sends its port to a named port of a
// Deployment's pods.
func expectSelects(t *testing.T, service *corev1.Service, d *appsv1.Deployment, port int32, target string) {
	t.Helper()
	if len(service.Spec.Ports) != 1 || service.Spec.Ports[0].Port != port || service.Spec.Ports[0].TargetPort.StrVal != target {
		t.Errorf("Service %s ports = %+v, want %d to %s", service.Name, service.Spec.Ports, port, target)
	}
	for k, v := range service.Spec.Selector {
		if d.Spec.Template.Labels[k] != v {
			t.Errorf("Service %s selects %s=%s, which the pods of %s lack", service.Name, k, v, d.Name)
		}
	}
	for k, v := range d.Spec.Selector.MatchLabels {
		if service.Spec.Selector[k] != v {
			t.Errorf("Service %s selects more pods than %s: it lacks %s=%s", service.Name, d.Name, k, v)
		}
	}
	if !slices.ContainsFunc(d.Spec.Template.Spec.Containers[0].Ports, func(p corev1.ContainerPort) bool { return p.Name == target }) {
		t.Errorf("%s declares no port %s", d.Name, target)
	}
}

func mountsKey(pod corev1.PodSpec, secret, dir string) bool {
	for _, v := range pod.Volumes {
		if v.Secret == nil || v.Secret.SecretName != secret {
			continue
		}
		for _, m := range pod.Containers[0].VolumeMounts {
			if m.Name == v.Name && m.MountPath == dir && m.ReadOnly {
				return true
			}
		}
	}
	return false
}

// expectRestricted checks the security context the restricted Pod
// Security Standard asks for, with a read-only root file system.
func expectRestricted(t *testing.T, pod corev1.PodSpec) {
	t.Helper()
	sc := pod.SecurityContext
	if sc == nil || sc.RunAsNonRoot == nil || !*sc.RunAsNonRoot || sc.RunAsUser == nil || *sc.RunAsUser != 65532 ||
		sc.SeccompProfile == nil || sc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault {
		t.Errorf("pod securityContext = %s, want non-root 65532 with the RuntimeDefault seccomp profile", mustYAML(t, sc))
	}
	for _, container := range pod.Containers {
		csc := container.SecurityContext
		if csc == nil || csc.AllowPrivilegeEscalation == nil || *csc.AllowPrivilegeEscalation ||
			csc.ReadOnlyRootFilesystem == nil || !*csc.ReadOnlyRootFilesystem || csc.Capabilities == nil ||
			!slices.Equal(csc.Capabilities.Drop, []corev1.Capability{"ALL"}) || len(csc.Capabilities.Add) != 0 {
			t.Errorf("container %s securityContext = %s, want no privilege escalation, a read-only root and ALL capabilities dropped",
				container.Name, mustYAML(t, csc))
		}
	}
}

func equalJSON(t *testing.T, a, b any) bool {
	t.Helper()
	return bytes.Equal(mustYAML(t, a), mustYAML(t, b))
}

func mustYAML(t *testing.T, v any) []byte {
	t.Helper()
	data, err := yaml.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return data
}
