package gateway_test

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stepwise-run/stepwise/internal/enginetest"
	"github.com/stepwise-run/stepwise/internal/gateway"
	"github.com/stepwise-run/stepwise/internal/gatewayapi"
	"github.com/stepwise-run/stepwise/internal/tenancy"
	sessions "github.com/stepwise-run/stepwise/pkg/client"
)

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
