package gateway_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"sigs.k8s.io/yaml"

	"github.com/stepwise-run/stepwise/internal/enginetest"
	"github.com/stepwise-run/stepwise/internal/gatewayapi"
	"github.com/stepwise-run/stepwise/internal/kubectlstepwise"
)

// kubectl runs the plugin as kubectl would, with env as its environment.
func kubectl(t *testing.T, env map[string]string, args ...string) (status int, stdout, stderr string) {
	t.Helper()
	var out, errOut bytes.Buffer
	status = kubectlstepwise.Run(context.Background(), args, func(k string) string { return env[k] }, &out, &errOut)
	return status, out.String(), errOut.String()
}

// kubeconfig writes a kubeconfig whose user has the token, or a client
// certificate when token is empty.
func kubeconfig(t *testing.T, token, namespace string) string {
	t.Helper()
	user := "    token: " + token
	if token == "" {
		user = "    client-certificate-data: Zm9v\n    client-key-data: Zm9v"
	}
	config := fmt.Sprintf(`apiVersion: v1
kind: Config
clusters:
- name: c
  cluster:
    server: https://127.0.0.1:1
contexts:
- name: ctx
  context:
    cluster: c
    user: u
    namespace: %s
current-context: ctx
users:
- name: u
  user:
%s
`, namespace, user)
	path := filepath.Join(t.TempDir(), "kubeconfig")
	if err := os.WriteFile(path, []byte(config), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestTheKubectlPluginDrivesASessionThroughTheGateway(t *testing.T) {
	f := start(t)
	// The operator's credentials come from the kubeconfig, as a person's
	// would; the reader's from --token.
	operator := map[string]string{"KUBECONFIG": kubeconfig(t, operatorToken, "team-a"), "STEPWISE_GATEWAY": f.gateway}
	reader := map[string]string{"KUBECONFIG": operator["KUBECONFIG"], "STEPWISE_GATEWAY": f.gateway}

	if status, out, errOut := kubectl(t, operator, "start", "support", "s-cli", "tools:", "write_approved"); status != 0 || out != "true\n" {
		t.Fatalf("start = %d %q %q", status, out, errOut)
	}
	var snap gatewayapi.SnapshotResponse
	enginetest.Eventually(t, 30*time.Second, "an approval in get -o json", func() (bool, error) {
		status, out, errOut := kubectl(t, reader, "get", "support", "s-cli", "-o", "json", "--token", readerToken)
		if status != 0 {
			return false, fmt.Errorf("get = %d %q", status, errOut)
		}
		snap = gatewayapi.SnapshotResponse{}
		return json.Unmarshal([]byte(out), &snap) == nil && len(snap.Snapshot.PendingInterrupts) == 1, nil
	})
	interrupt := snap.Snapshot.PendingInterrupts[0].ID

	status, out, _ := kubectl(t, reader, "--token", readerToken, "get", "support", "s-cli")
	if status != 0 || !strings.Contains(out, "STATUS") || !strings.Contains(out, interrupt) || !strings.Contains(out, "write_approved") {
		t.Errorf("get's table = %d\n%s", status, out)
	}
	status, out, _ = kubectl(t, reader, "--token", readerToken, "get", "support", "s-cli", "-o", "yaml")
	var fromYAML gatewayapi.SnapshotResponse
	if err := yaml.Unmarshal([]byte(out), &fromYAML); status != 0 || err != nil || len(fromYAML.Snapshot.PendingInterrupts) != 1 {
		t.Errorf("get -o yaml = %d %v\n%s", status, err, out)
	}
	enginetest.Eventually(t, 30*time.Second, "the session in waiting -A", func() (bool, error) {
		status, out, errOut := kubectl(t, reader, "--token", readerToken, "waiting", "-A")
		return status == 0 && strings.Contains(out, "team-a     support  s-cli"), fmt.Errorf("%d %q %q", status, out, errOut)
	})

	// The reader may not approve: the gateway's refusal is the error.
	status, out, errOut := kubectl(t, reader, "approve", "support", "s-cli", interrupt, "--token", readerToken)
	if status != 1 || out != "" || !strings.Contains(errOut, "forbidden: the token of Secret team-a/reader may not approve") {
		t.Errorf("approve as the reader = %d %q %q", status, out, errOut)
	}
	if status, out, errOut := kubectl(t, operator, "approve", "support", "s-cli", interrupt, "--request-id", "cli-approve-1"); status != 0 || out != "true\n" {
		t.Fatalf("approve = %d %q %q", status, out, errOut)
	}
	// The same request again learns its outcome and runs nothing twice.
	if status, out, _ := kubectl(t, operator, "approve", "support", "s-cli", interrupt, "--request-id", "cli-approve-1", "-o", "json"); status != 0 || !strings.Contains(out, `"accepted": true`) {
		t.Errorf("approve again = %d %q", status, out)
	}
	enginetest.Eventually(t, 30*time.Second, "the turn's end in messages", func() (bool, error) {
		status, out, errOut := kubectl(t, operator, "messages", "support", "s-cli")
		return status == 0 && strings.Contains(out, "write_approved") && strings.Contains(out, "assistant"), fmt.Errorf("%d %q %q", status, out, errOut)
	})
	ranOnce(t, f, "write_approved")
	// An approval no longer pending is refused by the session: false, 3.
	if status, out, _ := kubectl(t, operator, "approve", "support", "s-cli", interrupt); status != 3 || out != "false\n" {
		t.Errorf("approve a resolved interrupt = %d %q", status, out)
	}

	// Text a user wrote, and the model repeated, reaches the terminal
	// escaped: it cannot retitle the window, clear it or reorder the line.
	hostile := "\x1b]0;owned\x07\x1b[2Jrefund \u202eexe.txt"
	if status, out, errOut := kubectl(t, operator, "start", "support", "s-esc", hostile); status != 0 || out != "true\n" {
		t.Fatalf("start = %d %q %q", status, out, errOut)
	}
	enginetest.Eventually(t, 30*time.Second, "the echo in messages", func() (bool, error) {
		status, out, errOut := kubectl(t, operator, "messages", "support", "s-esc")
		if status != 0 || !strings.Contains(out, "echo:") {
			return false, fmt.Errorf("%d %q %q", status, out, errOut)
		}
		if strings.ContainsAny(out, "\x1b\x07\u202e") || !strings.Contains(out, `echo: \x1b]0;owned\x07\x1b[2Jrefund \u202eexe.txt`) {
			t.Errorf("messages printed the text unescaped or not at all:\n%q", out)
		}
		return true, nil
	})
}

func TestTheKubectlPluginRefusesWhatItCannotSend(t *testing.T) {
	f := start(t)
	withGateway := map[string]string{"KUBECONFIG": kubeconfig(t, operatorToken, "team-a"), "STEPWISE_GATEWAY": f.gateway}
	certificateUser := map[string]string{"KUBECONFIG": kubeconfig(t, "", "team-a"), "STEPWISE_GATEWAY": f.gateway}
	noGateway := map[string]string{"KUBECONFIG": withGateway["KUBECONFIG"]}
	cases := []struct {
		name   string
		env    map[string]string
		args   []string
		status int
		stderr string
	}{
		{"no gateway", noGateway, []string{"get", "support", "s-1"}, 1, "pass --gateway or set STEPWISE_GATEWAY"},
		{"a gateway that is not a URL", withGateway, []string{"get", "support", "s-1", "--gateway", "gateway:80"}, 1, `--gateway "gateway:80" is not an http or https URL`},
		{"a gateway that would carry the token in clear", withGateway, []string{"get", "support", "s-1", "--gateway", "http://gateway.example:80"}, 1, "would carry your token in clear"},
		{"a client certificate", certificateUser, []string{"get", "support", "s-1"}, 1, "pass --token"},
		{"an unknown command", withGateway, []string{"frobnicate"}, 2, `unknown command "frobnicate"`},
		{"a missing argument", withGateway, []string{"answer", "support", "s-1", "i-1"}, 2, "answer needs <agent> <session> <interrupt> <answer>"},
		{"a bad output", withGateway, []string{"get", "support", "s-1", "-o", "xml"}, 2, `--output "xml"`},
		{"a bad revision", withGateway, []string{"execute-plan", "support", "s-1", "zero"}, 2, `not "zero"`},
		{"bad settings", withGateway, []string{"settings", "support", "s-1", "[1]"}, 2, "settings must be a JSON object"},
		{"an Agent of no namespace of the token", withGateway, []string{"get", "support", "s-1", "-n", "team-b"}, 1, "forbidden:"},
		{"a session that does not exist", withGateway, []string{"get", "support", "s-none"}, 1, "not_found: Agent team-a/support has no session s-none"},
		{"an unknown token", withGateway, []string{"get", "support", "s-1", "--token", "nobody-0123456789abcdef0123456789"}, 1, "unauthenticated:"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			status, out, errOut := kubectl(t, tc.env, tc.args...)
			if status != tc.status || !strings.Contains(errOut, tc.stderr) || out != "" {
				t.Errorf("= %d %q %q, want %d and %q", status, out, errOut, tc.status, tc.stderr)
			}
		})
	}
}
