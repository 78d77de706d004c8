package e2e

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/stepwise-run/stepwise/internal/browsertest"
	"github.com/stepwise-run/stepwise/internal/gateway"
	"github.com/stepwise-run/stepwise/internal/gatewayapi"
	"github.com/stepwise-run/stepwise/internal/kubectlstepwise"
	"github.com/stepwise-run/stepwise/internal/render"
)

// gatewayRoles are two people of the team that runs support: one may run
// its sessions and approve their tool calls, the other may only read them.
const gatewayRoles = `
apiVersion: v1
kind: ServiceAccount
metadata: {name: session-operator, namespace: default}
---
apiVersion: v1
kind: ServiceAccount
metadata: {name: session-reader, namespace: default}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata: {name: support-sessions-operator, namespace: default}
rules:
  - apiGroups: [agents.stepwise.run]
    resources: [agents/sessions]
    resourceNames: [support]
    verbs: [get, create, send, approve]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata: {name: support-sessions-reader, namespace: default}
rules:
  - apiGroups: [agents.stepwise.run]
    resources: [agents/sessions]
    resourceNames: [support]
    verbs: [get]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {name: session-operator, namespace: default}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: Role, name: support-sessions-operator}
subjects: [{kind: ServiceAccount, name: session-operator, namespace: default}]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {name: session-reader, namespace: default}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: Role, name: support-sessions-reader}
subjects: [{kind: ServiceAccount, name: session-reader, namespace: default}]
`

// gatewayOnPods drives a session of the support workers through the
// chart's gateway as people of the team would: Kubernetes tokens, RBAC
// verbs on agents/sessions, and the session's events from the hub the
// worker pods publish to.
func gatewayOnPods(t *testing.T) {
	apply(t, gatewayRoles)
	operator, reader := gatewayTokenIn(t, "default", "session-operator"), gatewayTokenIn(t, "default", "session-reader")
	base := "http://" + readyPodIP(t, operatorNamespace, "app.kubernetes.io/component=gateway") + ":8080"
	session := base + "/api/v1/namespaces/default/agents/support/sessions/gateway-e2e"

	var refusal gatewayapi.ErrorBody
	// The gateway takes tokens of its own audience only: the operator's
	// token for the API server, which the gateway could replay there, is
	// refused.
	if status := gatewayCall(t, http.MethodGet, session+"/snapshot", serviceAccountToken(t, "session-operator"), nil, &refusal); status != http.StatusUnauthorized ||
		!strings.Contains(refusal.Message, gateway.DefaultAudience) {
		t.Fatalf("a token for the API server answered %d %+v, want 401 naming the gateway's audience", status, refusal)
	}
	if status := gatewayCall(t, http.MethodPost, session, reader, gatewayapi.StartRequest{Message: "hi"}, &refusal); status != http.StatusForbidden {
		t.Fatalf("a reader's start answered %d %+v, want 403", status, refusal)
	}
	if status := gatewayCall(t, http.MethodGet, session+"/snapshot", "", nil, &refusal); status != http.StatusUnauthorized {
		t.Fatalf("a snapshot without a token answered %d, want 401", status)
	}
	var accepted gatewayapi.Accepted
	if status := gatewayCall(t, http.MethodPost, session, operator, gatewayapi.StartRequest{Message: "Please refund order 8"}, &accepted); status != http.StatusOK || !accepted.Accepted {
		t.Fatalf("start answered %d %+v", status, accepted)
	}

	var snap gatewayapi.SnapshotResponse
	waitFor(t, "the session to wait for approval through the gateway", func() (bool, error) {
		snap = gatewayapi.SnapshotResponse{}
		status := gatewayCall(t, http.MethodGet, session+"/snapshot", reader, nil, &snap)
		return status == http.StatusOK && len(snap.Snapshot.PendingInterrupts) == 1, nil
	})
	if snap.ResumeToken == "" {
		t.Fatal("the snapshot of a running turn has no resume token: the workers' events do not reach the hub")
	}
	interrupt := snap.Snapshot.PendingInterrupts[0]

	pluginAndApplicationTokens(t, base, operator, reader, interrupt.ID)

	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	events := openEvents(t, ctx, session+"/events", reader, snap.ResumeToken)

	approve := session + "/interrupts/" + interrupt.ID + "/approve"
	if status := gatewayCall(t, http.MethodPost, approve, reader, nil, &refusal); status != http.StatusForbidden {
		t.Fatalf("a reader's approval answered %d %+v, want 403", status, refusal)
	}
	// The operator approves in the web page the gateway serves.
	pageOnPods(t, base, "gateway-e2e", operator, reader)

	// The stream replays the turn from its start, then follows it to its end.
	var seen []string
	for e := range events {
		seen = append(seen, e.Type)
		if e.Type == "turn_completed" {
			break
		}
	}
	if !slices.Contains(seen, "interrupt_raised") || !slices.Contains(seen, "turn_completed") {
		t.Fatalf("the event stream showed %v; want the replayed interrupt_raised and the turn's turn_completed", seen)
	}
	waitFor(t, "the reply through the gateway", func() (bool, error) {
		snap = gatewayapi.SnapshotResponse{}
		if gatewayCall(t, http.MethodGet, session+"/snapshot", reader, nil, &snap) != http.StatusOK {
			return false, nil
		}
		msgs := snap.Snapshot.Messages
		return len(msgs) > 0 && msgs[len(msgs)-1].Role == "assistant" && strings.Contains(msgs[len(msgs)-1].Text, "refund rf-"), nil
	})
	t.Logf("events through the gateway: %v", seen)
	scrapeOnPods(t)
}

// scrapeOnPods scrapes the support workers and the operator as
// Prometheus would, over the pod network, once the gateway's session is
// done: each family must parse, and one of the pods must count what the
// session did.
func scrapeOnPods(t *testing.T) {
	pods, err := core.CoreV1().Pods("default").List(context.Background(), metav1.ListOptions{LabelSelector: render.Selector("support")})
	if err != nil {
		t.Fatal(err)
	}
	var workers []string
	for _, p := range pods.Items {
		if p.Status.PodIP != "" && p.DeletionTimestamp == nil {
			workers = append(workers, fmt.Sprintf("http://%s:%d/metrics", p.Status.PodIP, render.MetricsPort))
		}
	}
	operator := []string{fmt.Sprintf("https://%s:8080/metrics", readyPodIP(t, operatorNamespace, "app.kubernetes.io/component=operator"))}
	// The operator's metrics name every Agent: they are served only to a
	// token the API server authorizes for GET /metrics.
	apply(t, `apiVersion: v1
kind: ServiceAccount
metadata: {name: metrics-scraper, namespace: default}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: metrics-scraper}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: stepwise-metrics-reader}
subjects: [{kind: ServiceAccount, name: metrics-scraper, namespace: default}]
`)
	scraper := serviceAccountToken(t, "metrics-scraper")
	for token, want := range map[string]int{"": http.StatusUnauthorized, serviceAccountToken(t, "session-reader"): http.StatusForbidden} {
		if status := scrapeStatus(t, operator[0], token); status != want {
			t.Errorf("a scrape of the operator with token %.8q answered %d, want %d", token, status, want)
		}
	}
	for _, c := range []struct {
		urls   []string
		family string
		labels map[string]string
		token  string
	}{
		{workers, "stepwise_session_tool_calls_total", map[string]string{"effect": "non_idempotent_write", "status": "succeeded"}, ""},
		{workers, "temporal_activity_execution_latency_seconds", map[string]string{"activity_type": "RunModel"}, ""},
		{operator, "stepwise_agent_info", map[string]string{"namespace": "default", "agent": "support"}, scraper},
	} {
		waitFor(t, c.family+" in a scrape", func() (bool, error) {
			var problems []string
			for _, url := range c.urls {
				ok, err := scrapeHas(url, c.token, c.family, c.labels)
				if ok {
					return true, nil
				}
				problems = append(problems, fmt.Sprintf("%s: %v", url, err))
			}
			return false, fmt.Errorf("%s", strings.Join(problems, "; "))
		})
	}
}

// scraping is how Prometheus reaches the operator's self-signed metrics
// endpoint: it skips verifying the certificate and proves who it is with
// its token.
var scraping = &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{
	TLSClientConfig: &tls.Config{InsecureSkipVerify: true}, //nolint:gosec // the operator's certificate is self-signed
}}

// scrapeStatus is the status of one scrape with a bearer token, or none.
func scrapeStatus(t *testing.T, url, token string) int {
	t.Helper()
	resp, err := scrape(url, token)
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	return resp.StatusCode
}

func scrape(url, token string) (*http.Response, error) {
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	return scraping.Do(req)
}

// scrapeHas reports whether a scrape holds a sample of family with the
// labels.
func scrapeHas(url, token, family string, labels map[string]string) (bool, error) {
	resp, err := scrape(url, token)
	if err != nil {
		return false, err
	}
	defer func() { _ = resp.Body.Close() }()
	if resp.StatusCode != http.StatusOK {
		return false, fmt.Errorf("the scrape answered %s", resp.Status)
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(resp.Body)
	if err != nil {
		return false, fmt.Errorf("the scrape does not parse: %w", err)
	}
	for _, m := range families[family].GetMetric() {
		found := map[string]string{}
		for _, l := range m.GetLabel() {
			found[l.GetName()] = l.GetValue()
		}
		match := true
		for k, v := range labels {
			match = match && found[k] == v
		}
		if match {
			return true, nil
		}
	}
	return false, fmt.Errorf("no %s%v among %d families", family, labels, len(families))
}

// pageOnPods runs the page's browser script against the chart's gateway.
func pageOnPods(t *testing.T, base, session, operator, reader string) {
	browsertest.Run(t, filepath.Join("testdata", "page.cluster.mjs"), "browser-cluster", map[string]string{
		"STEPWISE_PAGE_GATEWAY":      base,
		"STEPWISE_PAGE_SESSION":      session,
		"STEPWISE_PAGE_TOKEN":        operator,
		"STEPWISE_PAGE_READER_TOKEN": reader,
	})
}

// supportDashboard is an application's token: it may read the sessions of
// support, and do nothing else.
const supportDashboard = `
apiVersion: v1
kind: Secret
metadata:
  name: support-dashboard
  namespace: default
  labels: {agents.stepwise.run/gateway-token: "true"}
stringData:
  token: 3f1d0c5e9a7b4c2d8e6f1a3b5c7d9e0f2a4b6c8d
  verbs: get
  agents: support
`

// pluginAndApplicationTokens finds the session waiting for approval with
// the kubectl plugin, as the operator's kubeconfig user, and reads it with
// an application token from a Secret the gateways watch.
func pluginAndApplicationTokens(t *testing.T, base, operator, reader, interrupt string) {
	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	config := "apiVersion: v1\nkind: Config\nclusters: [{name: c, cluster: {server: \"https://127.0.0.1:1\"}}]\n" +
		"contexts: [{name: ctx, context: {cluster: c, user: u, namespace: default}}]\ncurrent-context: ctx\n" +
		"users: [{name: u, user: {token: " + operator + "}}]\n"
	if err := os.WriteFile(kubeconfig, []byte(config), 0o600); err != nil {
		t.Fatal(err)
	}
	env := map[string]string{"KUBECONFIG": kubeconfig, "STEPWISE_GATEWAY": base}
	kubectl := func(args ...string) (int, string, string) {
		var out, errOut bytes.Buffer
		// The test cluster's pod network is this host's own bridge.
		args = append(args, "--plain-http")
		status := kubectlstepwise.Run(context.Background(), args, func(k string) string { return env[k] }, &out, &errOut)
		return status, out.String(), errOut.String()
	}
	waitFor(t, "the session in kubectl stepwise waiting", func() (bool, error) {
		status, out, errOut := kubectl("waiting")
		return status == 0 && strings.Contains(out, "gateway-e2e") && strings.Contains(out, "AwaitToolApproval"),
			fmt.Errorf("%d %q %q", status, out, errOut)
	})
	if status, _, errOut := kubectl("approve", "support", "gateway-e2e", interrupt, "--token", reader); status != 1 || !strings.Contains(errOut, "forbidden:") {
		t.Fatalf("kubectl stepwise approve as the reader = %d %q, want refused", status, errOut)
	}

	apply(t, supportDashboard)
	const appToken = "3f1d0c5e9a7b4c2d8e6f1a3b5c7d9e0f2a4b6c8d"
	session := base + "/api/v1/namespaces/default/agents/support/sessions/gateway-e2e"
	waitFor(t, "the gateway to take the application token", func() (bool, error) {
		var snap gatewayapi.SnapshotResponse
		return gatewayCall(t, http.MethodGet, session+"/snapshot", appToken, nil, &snap) == http.StatusOK, nil
	})
	var refusal gatewayapi.ErrorBody
	if status := gatewayCall(t, http.MethodPost, session+"/interrupts/"+interrupt+"/approve", appToken, nil, &refusal); status != http.StatusForbidden ||
		!strings.Contains(refusal.Message, "Secret default/support-dashboard") {
		t.Fatalf("an approval with the read-only application token answered %d %+v, want 403", status, refusal)
	}
}

// serviceAccountToken asks the API server for a short-lived token of a
// service account of namespace default.
func serviceAccountToken(t *testing.T, name string) string {
	t.Helper()
	return tokenIn(t, "default", name)
}

// gatewayCall sends one request and decodes the JSON answer into out.
func gatewayCall(t *testing.T, method, url, token string, body, out any) int {
	t.Helper()
	var reader io.Reader
	if body != nil {
		raw, err := json.Marshal(body)
		if err != nil {
			t.Fatal(err)
		}
		reader = bytes.NewReader(raw)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, url, reader)
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer func() { _ = resp.Body.Close() }()
	raw, _ := io.ReadAll(resp.Body)
	if out != nil && len(raw) > 0 {
		if err := json.Unmarshal(raw, out); err != nil {
			t.Fatalf("%s %s answered %d %q: %v", method, url, resp.StatusCode, raw, err)
		}
	}
	return resp.StatusCode
}

// openEvents reads a session's Server-Sent Events from a resume token
// until ctx ends.
func openEvents(t *testing.T, ctx context.Context, url, token, resumeToken string) <-chan gateway.Event {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Last-Event-ID", resumeToken)
	resp, err := http.DefaultClient.Do(req) //nolint:bodyclose // the reader below closes it when the stream ends
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK {
		raw, _ := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		t.Fatalf("GET %s answered %d %s", url, resp.StatusCode, raw)
	}
	events := make(chan gateway.Event, 1024)
	go func() {
		defer close(events)
		defer func() { _ = resp.Body.Close() }()
		scanner := bufio.NewScanner(resp.Body)
		scanner.Buffer(make([]byte, 0, 64*1024), 1<<20)
		for scanner.Scan() {
			data, ok := strings.CutPrefix(scanner.Text(), "data: ")
			if !ok {
				continue
			}
			var e gateway.Event
			if json.Unmarshal([]byte(data), &e) == nil {
				events <- e
			}
		}
	}()
	return events
}
