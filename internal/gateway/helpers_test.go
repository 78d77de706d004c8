package gateway_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/stepwise-run/stepwise/internal/enginetest"
	"github.com/stepwise-run/stepwise/internal/gateway"
	"github.com/stepwise-run/stepwise/internal/gatewayapi"
	"github.com/stepwise-run/stepwise/internal/grants"
	"github.com/stepwise-run/stepwise/internal/hub"
	"github.com/stepwise-run/stepwise/internal/hubapi"
	"github.com/stepwise-run/stepwise/internal/session"
	"github.com/stepwise-run/stepwise/internal/version"
	sessions "github.com/stepwise-run/stepwise/pkg/client"
	"github.com/stepwise-run/stepwise/pkg/workerconfig"
)

// agents serves Agents of one engine by their Flow types; the Kubernetes
// resolver has its own tests against an API server.
type agents struct {
	stack     *enginetest.Stack
	flowTypes map[gateway.AgentRef]string
}

func (a agents) Target(_ context.Context, ref gateway.AgentRef) (gateway.Target, func(), error) {
	flowType, ok := a.flowTypes[ref]
	switch {
	case !ok:
		return gateway.Target{}, nil, fmt.Errorf("%w: %s", gateway.ErrAgentNotFound, ref)
	case flowType == "":
		return gateway.Target{}, nil, errors.New("dial tcp 10.0.0.1:7233: connection refused")
	}
	return gateway.Target{Client: a.stack.Client, Agent: sessions.Agent{Namespace: ref.Namespace, Name: ref.Name,
		UID: "uid-" + ref.Namespace + "-" + ref.Name, FlowType: flowType}}, func() {}, nil
}

// Graph serves the graph the operator would publish for the Agent's Flow
// type.
func (a agents) Graph(_ context.Context, ref gateway.AgentRef) ([]byte, error) {
	flowType, ok := a.flowTypes[ref]
	if !ok {
		return nil, fmt.Errorf("%w: %s", gateway.ErrAgentNotFound, ref)
	}
	graph, err := session.Graph(flowType, version.EngineVersion)
	if err != nil {
		return nil, err
	}
	doc, _, err := graph.Document()
	return doc, err
}

func (a agents) List(_ context.Context, namespace string) ([]gateway.AgentRef, error) {
	var refs []gateway.AgentRef
	for ref := range a.flowTypes {
		if namespace == "" || ref.Namespace == namespace {
			refs = append(refs, ref)
		}
	}
	return refs, nil
}

var (
	support = gateway.AgentRef{Namespace: "team-a", Name: "support"}
	// unreachable is an Agent whose engine does not answer.
	unreachable = gateway.AgentRef{Namespace: "team-a", Name: "unreachable"}
	helpdesk    = gateway.AgentRef{Namespace: "team-b", Name: "helpdesk"}
	// teamBSupport is another namespace's Agent of support's Flow type.
	teamBSupport = gateway.AgentRef{Namespace: "team-b", Name: "support"}
	billing      = gateway.AgentRef{Namespace: "team-a", Name: "billing"}
	allVerbs     = []grants.Verb{grants.VerbGet, grants.VerbCreate, grants.VerbSend, grants.VerbApprove,
		grants.VerbAnswer, grants.VerbCancel, grants.VerbUpdate}
)

// Tokens of the test's applications.
const (
	operatorToken = "operator-token-0123456789"
	readerToken   = "reader-token-0123456789"
	otherNSToken  = "other-namespace-token-0123"
)

type fixture struct {
	// auth holds the application tokens' grants; tests revoke them.
	auth    *gateway.TokenAuthorizer
	stack   *enginetest.Stack
	worker  *enginetest.Worker
	hub     *hub.Hub
	gateway string
	streams *streams
}

// start runs a dev server, a worker of Agent team-a/support that publishes
// to an event hub, and a gateway in front of both.
func start(t *testing.T, opts ...func(*gateway.Options)) *fixture {
	t.Helper()
	stack := enginetest.NewStack(t, "GatewaySupport")
	keys, err := hub.ParsePublishKeys([]byte("k1:" + strings.Repeat("k", 32)))
	if err != nil {
		t.Fatal(err)
	}
	readers, err := hub.ParseReadTokens([]byte(strings.Repeat("r", 32)))
	if err != nil {
		t.Fatal(err)
	}
	h := hub.New(hub.NewEpoch(), hub.Limits{}, time.Now)
	hubServer := httptest.NewServer(hubapi.NewServer(h, hubapi.ServerOptions{
		PublishKeys: func() *hub.PublishKeys { return keys }, ReadTokens: func() *hub.ReadTokens { return readers },
	}).Handler())
	// Streams and long polls stay open until their clients go: cut them,
	// or Close waits for them.
	t.Cleanup(func() { hubServer.CloseClientConnections(); hubServer.Close() })
	stack.SetAgent(support.Namespace, support.Name)
	stack.Config.EventHub = &workerconfig.EventHub{URL: hubServer.URL, Token: workerconfig.SecretEnv{Env: "STEPWISE_EVENT_HUB_TOKEN"}}
	stack.Env = append(stack.Env, "STEPWISE_EVENT_HUB_TOKEN="+keys.Mint(hub.PublishClaims{
		Namespace: support.Namespace, Agent: support.Name, AgentUID: stack.Config.Agent.UID, Expires: time.Now().Add(time.Hour)}))
	// Plan mode on, so the page can draft and execute a plan.
	stack.Config.Definition.BuiltInTools = append(stack.Config.Definition.BuiltInTools, "write_todos")
	stack.Config.Definition.PlanMode = &workerconfig.PlanMode{PlanningToolChoice: "auto"}
	worker := stack.StartWorker()

	auth := &gateway.TokenAuthorizer{}
	auth.SetGrants(map[string]grants.Grant{
		operatorToken: {Source: "Secret team-a/operator", Namespace: "team-a", Verbs: allVerbs},
		readerToken:   {Source: "Secret team-a/reader", Namespace: "team-a", Agents: []string{"support"}, Verbs: []grants.Verb{grants.VerbGet}},
		otherNSToken:  {Source: "Secret team-b/app", Namespace: "team-b", Verbs: allVerbs},
	})
	o := gateway.Options{
		Agents: agents{stack: stack, flowTypes: map[gateway.AgentRef]string{
			support: "GatewaySupport", billing: "GatewayBilling", unreachable: "", helpdesk: "GatewayHelpdesk", teamBSupport: "GatewaySupport"}},
		Authorizer: auth,
		Hub:        hubapi.NewReader(hubServer.URL, readers.Current, nil),
		KeepAlive:  300 * time.Millisecond,
	}
	for _, opt := range opts {
		opt(&o)
	}
	streams := &streams{conns: map[net.Conn]bool{}}
	gw := httptest.NewUnstartedServer(streams.track(gateway.New(o).Handler()))
	gw.Config.ConnContext = func(ctx context.Context, c net.Conn) context.Context {
		return context.WithValue(ctx, connKey{}, c)
	}
	gw.Start()
	t.Cleanup(func() { gw.CloseClientConnections(); gw.Close() })
	return &fixture{auth: auth, stack: stack, worker: worker, hub: h, gateway: gw.URL, streams: streams}
}

func sessionURL(f *fixture, ref gateway.AgentRef, id string) string {
	return fmt.Sprintf("%s/api/v1/namespaces/%s/agents/%s/sessions/%s", f.gateway, ref.Namespace, ref.Name, id)
}

// call sends a request and decodes the JSON answer into out.
func call(t *testing.T, method, url, token string, body any, out any) int {
	t.Helper()
	var reader io.Reader
	if body != nil {
		raw, err := json.Marshal(body)
		if err != nil {
			t.Fatal(err)
		}
		reader = bytes.NewReader(raw)
	}
	req, err := http.NewRequest(method, url, reader)
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = resp.Body.Close() }()
	raw, _ := io.ReadAll(resp.Body)
	if out != nil {
		if err := json.Unmarshal(raw, out); err != nil {
			t.Fatalf("%s %s answered %d %q: %v", method, url, resp.StatusCode, raw, err)
		}
	}
	return resp.StatusCode
}

// ranOnce checks that the worker ran a tool exactly once.
func ranOnce(t *testing.T, f *fixture, tool string) {
	t.Helper()
	runs := 0
	for _, c := range f.stack.Calls() {
		if c[0] == tool {
			runs++
		}
	}
	if runs != 1 {
		t.Errorf("%s ran %d times, want once", tool, runs)
	}
}

func mustAccept(t *testing.T, method, url string, body any) {
	t.Helper()
	var got gatewayapi.Accepted
	if status := call(t, method, url, operatorToken, body, &got); status != http.StatusOK || !got.Accepted {
		t.Fatalf("%s %s = %d %+v, want 200 accepted", method, url, status, got)
	}
}

func snapshot(t *testing.T, f *fixture, id string) gatewayapi.SnapshotResponse {
	t.Helper()
	var snap gatewayapi.SnapshotResponse
	if status := call(t, http.MethodGet, sessionURL(f, support, id)+"/snapshot", readerToken, nil, &snap); status != http.StatusOK {
		t.Fatalf("snapshot = %d", status)
	}
	return snap
}

func waitSnapshot(t *testing.T, f *fixture, id, what string, cond func(gatewayapi.SnapshotResponse) bool) gatewayapi.SnapshotResponse {
	t.Helper()
	var snap gatewayapi.SnapshotResponse
	enginetest.Eventually(t, 30*time.Second, what, func() (bool, error) {
		snap = snapshot(t, f, id)
		return cond(snap), nil
	})
	return snap
}
