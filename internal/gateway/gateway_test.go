package gateway_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stepwise-run/stepwise/internal/enginetest"
	"github.com/stepwise-run/stepwise/internal/gateway"
	"github.com/stepwise-run/stepwise/internal/gatewayapi"
	"github.com/stepwise-run/stepwise/internal/hub"
	"github.com/stepwise-run/stepwise/internal/hubapi"
	"github.com/stepwise-run/stepwise/internal/session"
	"github.com/stepwise-run/stepwise/internal/tenancy"
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
	allVerbs     = []gateway.Verb{gateway.VerbGet, gateway.VerbCreate, gateway.VerbSend, gateway.VerbApprove,
		gateway.VerbAnswer, gateway.VerbCancel, gateway.VerbUpdate}
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
	auth.SetGrants(map[string]gateway.Grant{
		operatorToken: {Source: "Secret team-a/operator", Namespace: "team-a", Verbs: allVerbs},
		readerToken:   {Source: "Secret team-a/reader", Namespace: "team-a", Agents: []string{"support"}, Verbs: []gateway.Verb{gateway.VerbGet}},
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

// connKey holds a request's connection in its context.
type connKey struct{}

// streams records the gateway's event stream requests and cuts their
// connections on demand, as a dropped network would.
type streams struct {
	mu    sync.Mutex
	conns map[net.Conn]bool
	// lastEventIDs are the Last-Event-ID headers of the requests, in order.
	lastEventIDs []string
}

func (s *streams) track(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !strings.HasSuffix(r.URL.Path, "/events") {
			next.ServeHTTP(w, r)
			return
		}
		conn, _ := r.Context().Value(connKey{}).(net.Conn)
		s.mu.Lock()
		s.conns[conn] = true
		s.lastEventIDs = append(s.lastEventIDs, r.Header.Get("Last-Event-ID"))
		s.mu.Unlock()
		defer func() { s.mu.Lock(); delete(s.conns, conn); s.mu.Unlock() }()
		next.ServeHTTP(w, r)
	})
}

// cut closes the connection of every open event stream and reports how
// many it closed.
func (s *streams) cut() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	for c := range s.conns {
		_ = c.Close()
	}
	return len(s.conns)
}

func (s *streams) requests() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.lastEventIDs)
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

// frame is one Server-Sent Event, or a comment.
type frame struct {
	id      string
	event   gateway.Event
	comment string
}

// stream opens a session's events and returns its frames as they come.
func stream(t *testing.T, ctx context.Context, f *fixture, id, lastEventID string) (<-chan frame, int) {
	t.Helper()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, sessionURL(f, support, id)+"/events", nil)
	req.Header.Set("Authorization", "Bearer "+readerToken)
	req.Header.Set("Last-Event-ID", lastEventID)
	resp, err := http.DefaultClient.Do(req) //nolint:bodyclose // the frame reader below closes it when the stream ends

	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK {
		_ = resp.Body.Close()
		return nil, resp.StatusCode
	}
	if ct := resp.Header.Get("Content-Type"); ct != "text/event-stream" {
		t.Errorf("Content-Type = %q", ct)
	}
	frames := make(chan frame, 1024)
	go func() {
		defer close(frames)
		defer func() { _ = resp.Body.Close() }()
		scanner := bufio.NewScanner(resp.Body)
		var cur frame
		for scanner.Scan() {
			line := scanner.Text()
			switch {
			case line == "":
				frames <- cur
				cur = frame{}
			case strings.HasPrefix(line, ":"):
				cur.comment = strings.TrimSpace(line[1:])
			case strings.HasPrefix(line, "id: "):
				cur.id = line[4:]
			case strings.HasPrefix(line, "data: "):
				if err := json.Unmarshal([]byte(line[6:]), &cur.event); err != nil {
					t.Errorf("data %q: %v", line, err)
				}
			}
		}
	}()
	return frames, http.StatusOK
}

// textUntil reads frames until the turn completes or n text deltas came,
// and returns the text and the last event ID.
func textUntil(t *testing.T, frames <-chan frame, n int) (text string, lastID string, deltas int) {
	t.Helper()
	timeout := time.After(30 * time.Second)
	for {
		select {
		case fr, ok := <-frames:
			if !ok {
				t.Fatalf("the stream ended after %q", text)
			}
			if fr.id != "" {
				lastID = fr.id
			}
			switch fr.event.Type {
			case "text_delta":
				var p struct{ Text string }
				if err := json.Unmarshal([]byte(fr.event.Payload), &p); err != nil {
					t.Fatalf("payload %q: %v", fr.event.Payload, err)
				}
				text += p.Text
				deltas++
				if deltas == n {
					return text, lastID, deltas
				}
			case "turn_completed":
				return text, lastID, deltas
			}
		case <-timeout:
			t.Fatalf("no turn end within 30s; text so far %q", text)
		}
	}
}

func words(n int) string {
	var b strings.Builder
	for i := range n {
		fmt.Fprintf(&b, "w%d ", i+1)
	}
	return b.String()
}

func TestATurnStreamsAndResumesAfterACutWithNoRepeatedOrMissingText(t *testing.T) {
	f := start(t)
	mustAccept(t, http.MethodPost, sessionURL(f, support, "s-stream"), gatewayapi.StartRequest{Message: "stream: 40"})
	snap := waitSnapshot(t, f, "s-stream", "the turn to start", func(s gatewayapi.SnapshotResponse) bool {
		return s.Snapshot.State != nil && s.Snapshot.State.ActiveTurnID != ""
	})
	if snap.ResumeToken == "" {
		t.Fatal("the snapshot of a running turn has no resume token")
	}
	ctx, cut := context.WithCancel(context.Background())
	frames, status := stream(t, ctx, f, "s-stream", snap.ResumeToken)
	if status != http.StatusOK {
		t.Fatalf("events = %d", status)
	}
	// The token replays the running turn from its start: the first part of
	// the text is whole even though the stream opened after it streamed.
	first, lastID, n := textUntil(t, frames, 10)
	cut()
	if n != 10 || !strings.HasPrefix(first, "w1 ") {
		t.Fatalf("before the cut: %q", first)
	}
	rest, resumeStatus := stream(t, context.Background(), f, "s-stream", lastID)
	if resumeStatus != http.StatusOK {
		t.Fatalf("resuming = %d", resumeStatus)
	}
	second, _, _ := textUntil(t, rest, -1)
	if got := first + second; got != words(40) {
		t.Errorf("streamed text = %q, want %q once", got, words(40))
	}
	final := waitSnapshot(t, f, "s-stream", "the turn to end", func(s gatewayapi.SnapshotResponse) bool {
		return s.Snapshot.State.ActiveTurnID == ""
	})
	if msgs := final.Snapshot.Messages; len(msgs) == 0 || !strings.Contains(msgs[len(msgs)-1].Text, "w40") {
		t.Errorf("the stored answer = %+v", msgs)
	}
}

// streamAfterFirstTurn starts session id with one message, waits for its
// turn to end and opens its event stream from the snapshot's token, for
// the rest of the test.
func streamAfterFirstTurn(t *testing.T, f *fixture, id string) (gatewayapi.SnapshotResponse, <-chan frame) {
	t.Helper()
	mustAccept(t, http.MethodPost, sessionURL(f, support, id), gatewayapi.StartRequest{Message: "hello"})
	snap := waitSnapshot(t, f, id, "the first turn to end", func(s gatewayapi.SnapshotResponse) bool {
		return s.Snapshot.State != nil && s.Snapshot.State.TurnCount == 1 && s.Snapshot.State.ActiveTurnID == ""
	})
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	frames, status := stream(t, ctx, f, id, snap.ResumeToken)
	if status != http.StatusOK {
		t.Fatalf("events = %d", status)
	}
	return snap, frames
}

func TestAnIdleStreamSendsKeepAlivesAndRefusesTokensItCannotHonour(t *testing.T) {
	f := start(t)
	_, frames := streamAfterFirstTurn(t, f, "s-idle")
	// The worker publishes a turn's last events a moment after the turn
	// commits, so the snapshot may precede them: the stream then carries
	// them, and nothing else, before it idles.
	deadline := time.After(10 * time.Second)
	for keptAlive := false; !keptAlive; {
		select {
		case fr := <-frames:
			switch {
			case fr.comment == "keep-alive":
				keptAlive = true
			case fr.comment != "" || fr.event.TurnID != "turn-1":
				t.Fatalf("an idle stream's frame = %+v, want the keep-alive comment", fr)
			}
		case <-deadline:
			t.Fatal("no keep-alive within 10 s at a 300 ms interval")
		}
	}

	mustAccept(t, http.MethodPost, sessionURL(f, support, "s-other"), gatewayapi.StartRequest{})
	otherSnap := snapshot(t, f, "s-other")
	for name, token := range map[string]string{
		"another session's token": otherSnap.ResumeToken,
		"a token of no hub":       "v1.00.1.1.00",
		"garbage":                 "garbage",
		"no token":                "",
	} {
		if _, status := stream(t, context.Background(), f, "s-idle", token); status != http.StatusBadRequest {
			t.Errorf("events with %s = %d, want 400, which stops an EventSource", name, status)
		}
	}
	var refusal gatewayapi.ErrorBody
	req := sessionURL(f, support, "s-idle") + "/events?resumeToken=" + otherSnap.ResumeToken
	if call(t, http.MethodGet, req, readerToken, nil, &refusal); refusal.Reason != "invalid_token" {
		t.Errorf("another session's token as a query parameter: %+v", refusal)
	}
}

// An open stream is authorized again while it runs: once its token is
// revoked, it ends, and its reconnection is refused.
func TestAStreamEndsOnceItsCallerMayNoLongerRead(t *testing.T) {
	f := start(t, func(o *gateway.Options) { o.Reauthorize = 500 * time.Millisecond })
	snap, frames := streamAfterFirstTurn(t, f, "s-revoked")
	// Past several re-authorizations, the stream still runs.
	for keptAlive := 0; keptAlive < 5; {
		select {
		case fr, open := <-frames:
			if !open {
				t.Fatal("the stream ended while its token was valid")
			}
			if fr.comment == "keep-alive" {
				keptAlive++
			}
		case <-time.After(10 * time.Second):
			t.Fatal("no keep-alive within 10 s")
		}
	}
	f.auth.SetGrants(map[string]gateway.Grant{
		operatorToken: {Source: "Secret team-a/operator", Namespace: "team-a", Verbs: allVerbs},
	})
	deadline := time.After(10 * time.Second)
	for ended := false; !ended; {
		select {
		case _, open := <-frames:
			ended = !open
		case <-deadline:
			t.Fatal("the stream still runs 10 s after its token was revoked, at a 500 ms re-authorization")
		}
	}
	if _, status := stream(t, context.Background(), f, "s-revoked", snap.ResumeToken); status != http.StatusUnauthorized {
		t.Errorf("the reconnection = %d, want 401", status)
	}
}

func TestApprovalsQuestionsAndCancelsGoThroughTheGatewayOnce(t *testing.T) {
	f := start(t)
	base := sessionURL(f, support, "s-hitl")
	mustAccept(t, http.MethodPost, base, gatewayapi.StartRequest{Message: "tools: write_approved"})
	snap := waitSnapshot(t, f, "s-hitl", "an approval", func(s gatewayapi.SnapshotResponse) bool {
		return len(s.Snapshot.PendingInterrupts) == 1
	})
	approval := snap.Snapshot.PendingInterrupts[0]
	if approval.Kind != sessions.InterruptApproval || approval.ToolName != "write_approved" {
		t.Fatalf("pending = %+v", approval)
	}
	// The reader may read, not approve.
	var refusal gatewayapi.ErrorBody
	if status := call(t, http.MethodPost, base+"/interrupts/"+approval.ID+"/approve", readerToken, nil, &refusal); status != http.StatusForbidden ||
		!strings.Contains(refusal.Message, "may not approve sessions of Agent team-a/support") {
		t.Errorf("approve with a read-only token = %d %+v", status, refusal)
	}
	mustAccept(t, http.MethodPost, base+"/interrupts/"+approval.ID+"/approve", gatewayapi.RequestBody{RequestID: "approve-1"})
	// The same request again answers the same, and the tool runs once.
	mustAccept(t, http.MethodPost, base+"/interrupts/"+approval.ID+"/approve", gatewayapi.RequestBody{RequestID: "approve-1"})
	waitSnapshot(t, f, "s-hitl", "the turn to end", func(s gatewayapi.SnapshotResponse) bool {
		return s.Snapshot.State.ActiveTurnID == "" && s.Snapshot.State.TurnCount == 1
	})
	ranOnce(t, f, "write_approved")

	mustAccept(t, http.MethodPost, base+"/messages", gatewayapi.SendRequest{Text: "ask: which color?"})
	snap = waitSnapshot(t, f, "s-hitl", "a question", func(s gatewayapi.SnapshotResponse) bool {
		return len(s.Snapshot.PendingInterrupts) == 1 && s.Snapshot.PendingInterrupts[0].Kind == sessions.InterruptQuestion
	})
	if asker := snap.Snapshot.PendingInterrupts[0].AskedBy; asker != sessions.AskedByAgent {
		t.Errorf("ask_user's question is asked by %q, want the agent", asker)
	}
	mustAccept(t, http.MethodPost, base+"/interrupts/"+snap.Snapshot.PendingInterrupts[0].ID+"/answer", gatewayapi.AnswerRequest{Answer: "red"})
	waitSnapshot(t, f, "s-hitl", "the answered turn to end", func(s gatewayapi.SnapshotResponse) bool {
		return s.Snapshot.State.ActiveTurnID == "" && s.Snapshot.State.TurnCount == 2
	})

	mustAccept(t, http.MethodPost, base+"/messages", gatewayapi.SendRequest{Text: "wait: 3600"})
	snap = waitSnapshot(t, f, "s-hitl", "a durable wait", func(s gatewayapi.SnapshotResponse) bool {
		return s.Snapshot.State.TurnCount == 3 && s.Snapshot.State.ActiveTurnID != ""
	})
	mustAccept(t, http.MethodPost, base+"/turns/"+snap.Snapshot.State.ActiveTurnID+"/cancel", nil)
	waitSnapshot(t, f, "s-hitl", "the cancelled turn to end", func(s gatewayapi.SnapshotResponse) bool {
		return s.Snapshot.State.ActiveTurnID == ""
	})
	var page sessions.MessagesPage
	if status := call(t, http.MethodGet, base+"/messages?limit=2", readerToken, nil, &page); status != http.StatusOK || len(page.Messages) != 2 {
		t.Errorf("messages = %d %+v", status, page)
	}
}

func TestTheGatewayRefusesCallersAndRequestsItMustNotServe(t *testing.T) {
	f := start(t)
	mustAccept(t, http.MethodPost, sessionURL(f, support, "s-1"), gatewayapi.StartRequest{Message: "hello"})
	// A session of another Agent on the same engine, started directly.
	other := sessions.New(f.stack.Client, sessions.Agent{Namespace: billing.Namespace, Name: billing.Name, FlowType: "GatewayBilling"})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	_, _ = other.Start(ctx, "s-billing", "")
	enginetest.Eventually(t, 10*time.Second, "the billing session to exist", func() (bool, error) {
		_, err := f.stack.Client.DescribeWorkflow(context.Background(), tenancy.Tenant(billing.Namespace, "GatewayBilling").WorkflowID("s-billing"), "")
		return err == nil, nil
	})
	s1 := sessionURL(f, support, "s-1")
	cases := []struct {
		name, method, url, token string
		body                     any
		status                   int
		reason, mentions         string
	}{
		{"no token", "GET", s1 + "/snapshot", "", nil, 401, "unauthenticated", "bearer token is required"},
		{"an unknown token", "GET", s1 + "/snapshot", "nobody", nil, 401, "unauthenticated", "not known"},
		{"another namespace's token", "GET", s1 + "/snapshot", otherNSToken, nil, 403, "forbidden", "may not get sessions of Agent team-a/support"},
		{"a verb the token lacks", "POST", s1 + "/messages", readerToken, gatewayapi.SendRequest{Text: "x"}, 403, "forbidden", "may not send"},
		{"an Agent the token does not name", "GET", sessionURL(f, billing, "s-billing") + "/snapshot", readerToken, nil, 403, "forbidden", "Agent team-a/billing"},
		{"another Agent's session through this Agent", "GET", sessionURL(f, support, "s-billing") + "/snapshot", operatorToken, nil, 404, "not_found", "Agent team-a/support has no session s-billing"},
		{"starting a session ID another Agent holds starts this Agent's own", "POST", sessionURL(f, support, "s-billing"), operatorToken, gatewayapi.StartRequest{}, 200, "", ""},
		{"another namespace's Agent of the same Flow type, on this Agent's session ID", "GET", sessionURL(f, teamBSupport, "s-1") + "/snapshot", otherNSToken, nil, 404, "not_found", "Agent team-b/support has no session s-1"},
		{"another namespace's Agent of the same Flow type, approving on this Agent's session ID", "POST", sessionURL(f, teamBSupport, "s-1") + "/interrupts/i1/approve", otherNSToken, nil, 404, "not_found", "Agent team-b/support has no session s-1"},
		{"a session that does not exist", "GET", sessionURL(f, support, "s-none") + "/snapshot", operatorToken, nil, 404, "not_found", "no session s-none"},
		{"an Agent that does not exist", "GET", sessionURL(f, gateway.AgentRef{Namespace: "team-a", Name: "nobody"}, "s-1") + "/snapshot", operatorToken, nil, 404, "not_found", "team-a/nobody"},
		{"a session ID with a space", "GET", sessionURL(f, support, "s%201") + "/snapshot", operatorToken, nil, 400, "bad_request", "session:"},
		{"a namespace in capitals", "GET", sessionURL(f, gateway.AgentRef{Namespace: "Team-A", Name: "support"}, "s-1") + "/snapshot", operatorToken, nil, 400, "bad_request", "namespace:"},
		{"an unknown body field", "POST", s1 + "/messages", operatorToken, map[string]any{"txt": "x"}, 400, "bad_request", `unknown field "txt"`},
		{"a steer with text and a queued message", "POST", s1 + "/steer", operatorToken, gatewayapi.SteerRequest{Text: "a", QueuedMessageID: "b"}, 400, "bad_request", "one of text or queuedMessageId"},
		{"a plan revision of 0", "POST", s1 + "/plan/execute", operatorToken, gatewayapi.ExecutePlanRequest{}, 400, "bad_request", "revision: 0"},
		{"settings that are not given", "PUT", s1 + "/settings", operatorToken, map[string]any{}, 400, "bad_request", "settings: required"},
		{"an image reference of nothing", "POST", s1 + "/messages", operatorToken, gatewayapi.SendRequest{Text: "x", Images: []sessions.ImageReference{{Type: "image"}}}, 400, "invalid_image", "invalid image"},
		{"a page limit of 0", "GET", s1 + "/messages?limit=0", operatorToken, nil, 400, "bad_request", "limit:"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var refusal gatewayapi.ErrorBody
			status := call(t, c.method, c.url, c.token, c.body, &refusal)
			if status != c.status || refusal.Reason != c.reason || !strings.Contains(refusal.Message, c.mentions) {
				t.Errorf("= %d %+v, want %d %s naming %q", status, refusal, c.status, c.reason, c.mentions)
			}
		})
	}
	big := strings.Repeat("x", 5<<20)
	var refusal gatewayapi.ErrorBody
	if status := call(t, "POST", s1+"/messages", operatorToken, gatewayapi.SendRequest{Text: big}, &refusal); status != 400 || !strings.Contains(refusal.Message, "at most") {
		t.Errorf("a 5 MiB body = %d %+v", status, refusal)
	}
}

func TestARequestNoWorkerRunsAnswers202WithItsRequestID(t *testing.T) {
	f := start(t, func(o *gateway.Options) { o.RequestTimeout = 3 * time.Second })
	mustAccept(t, http.MethodPost, sessionURL(f, support, "s-1"), gatewayapi.StartRequest{Message: "hello"})
	waitSnapshot(t, f, "s-1", "the first turn to end", func(s gatewayapi.SnapshotResponse) bool {
		return s.Snapshot.State != nil && s.Snapshot.State.TurnCount == 1 && s.Snapshot.State.ActiveTurnID == ""
	})
	f.worker.Kill()
	var pending gatewayapi.Pending
	status := call(t, http.MethodPost, sessionURL(f, support, "s-1")+"/messages", operatorToken,
		gatewayapi.SendRequest{Text: "are you there?", RequestID: "later-1"}, &pending)
	// Whether the gateway can tell that no worker polls depends on how long
	// ago the last one did; the request ID is what the caller needs.
	if status != http.StatusAccepted || !pending.Pending || pending.RequestID != "later-1" {
		t.Fatalf("a send with no worker = %d %+v, want 202 pending with its request ID", status, pending)
	}
	// Once a worker runs again, the same request ID learns the outcome of
	// the one request, which ran once.
	f.stack.StartWorker()
	mustAccept(t, http.MethodPost, sessionURL(f, support, "s-1")+"/messages", gatewayapi.SendRequest{Text: "are you there?", RequestID: "later-1"})
	waitSnapshot(t, f, "s-1", "the second turn to end", func(s gatewayapi.SnapshotResponse) bool {
		return s.Snapshot.State != nil && s.Snapshot.State.TurnCount == 2 && s.Snapshot.State.ActiveTurnID == ""
	})
}
