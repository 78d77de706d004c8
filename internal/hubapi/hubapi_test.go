package hubapi

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stepwise-run/stepwise/internal/hub"
	"github.com/stepwise-run/stepwise/internal/session"
)

var testKey = []byte("0123456789abcdef0123456789abcdef")

type testHub struct {
	hub      *hub.Hub
	keys     *Keyring
	url      string
	requests atomic.Int64
	// failing makes the hub answer 503 to publish requests.
	failing atomic.Bool
}

func startHub(t *testing.T, limits hub.Limits) *testHub {
	t.Helper()
	keys, err := NewKeyring(testKey)
	if err != nil {
		t.Fatal(err)
	}
	th := &testHub{hub: hub.New(hub.NewEpoch(), limits, time.Now), keys: keys}
	handler := NewServer(th.hub, keys).Handler()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == PublishPath {
			th.requests.Add(1)
			if th.failing.Load() {
				http.Error(w, "down", http.StatusServiceUnavailable)
				return
			}
		}
		handler.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	th.url = srv.URL
	return th
}

func (th *testHub) reader() *Reader { return NewReader(th.url, th.keys.ReadToken(), nil) }

func delta(turn, text string) session.Event {
	return session.NewEvent(session.EventTextDelta, turn, map[string]string{"text": text})
}

func texts(records []WireRecord) string {
	var out []string
	for _, r := range records {
		var p struct{ Text string }
		_ = json.Unmarshal(r.Event.Payload, &p)
		out = append(out, p.Text)
	}
	return strings.Join(out, "")
}

func runPublisher(t *testing.T, p *Publisher) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { p.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
}

// readUntil reads a session's events from a token until want text arrived.
func readUntil(t *testing.T, r *Reader, k hub.Key, after, want string) ([]WireRecord, string) {
	t.Helper()
	var all []WireRecord
	deadline := time.Now().Add(10 * time.Second)
	for texts(all) != want {
		if time.Now().After(deadline) || len(texts(all)) > len(want) {
			t.Fatalf("read %q, want %q", texts(all), want)
		}
		records, err := r.Events(context.Background(), k, after, time.Second)
		if err != nil {
			t.Fatalf("Events: %v", err)
		}
		if len(records) > 0 {
			after = records[len(records)-1].Token
		}
		all = append(all, records...)
	}
	return all, after
}

func TestAWorkersEventsReachReadersInBatchesAndResume(t *testing.T) {
	th := startHub(t, hub.Limits{})
	k := hub.Key{Namespace: "team-a", Agent: "support", Session: "s-1"}
	pos, err := th.reader().Position(context.Background(), k, "")
	if err != nil {
		t.Fatal(err)
	}
	p := NewPublisher(th.url, th.keys.PublishToken("team-a", "support"), PublisherOptions{Interval: 50 * time.Millisecond})
	runPublisher(t, p)
	want := ""
	for i := range 200 {
		want += fmt.Sprint(i % 10)
		p.Write("s-1", delta("t1", fmt.Sprint(i%10)))
	}
	records, last := readUntil(t, th.reader(), k, pos.End, want)
	if n := th.requests.Load(); n > 20 {
		t.Errorf("200 text deltas took %d publish requests; they go in batches", n)
	}
	// Resuming from the middle gives exactly the rest.
	rest, _ := readUntil(t, th.reader(), k, records[149].Token, want[150:])
	if len(rest) != 50 {
		t.Errorf("resumed from the 150th event: %d events", len(rest))
	}
	p.Write("s-1", delta("t2", "x"))
	more, _ := readUntil(t, th.reader(), k, last, "x")
	if more[0].Event.TurnID != "t2" {
		t.Errorf("next event = %+v", more[0].Event)
	}
	// The turn start replays a turn.
	pos, err = th.reader().Position(context.Background(), k, "t2")
	if err != nil {
		t.Fatal(err)
	}
	readUntil(t, th.reader(), k, pos.TurnStart, "x")
}

func TestTokensKeepAgentsApartAndOnlyGatewaysRead(t *testing.T) {
	th := startHub(t, hub.Limits{})
	other, _ := NewKeyring(bytes.Repeat([]byte("z"), 32))
	publish := func(token string, body string) int {
		req, _ := http.NewRequest(http.MethodPost, th.url+PublishPath, strings.NewReader(body))
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_ = resp.Body.Close()
		return resp.StatusCode
	}
	one := `{"events":[{"session":"s-1","event":{"type":"text_delta","payload":{"text":"a"}}}]}`
	aToken := th.keys.PublishToken("team-a", "support")
	forged := "team-b/support/" + strings.Split(aToken, "/")[2]
	for name, token := range map[string]string{
		"no token":                         "",
		"another hub's token":              other.PublishToken("team-a", "support"),
		"one Agent's MAC for another":      forged,
		"the read token":                   th.keys.ReadToken(),
		"a token with the MAC cut":         "team-a/support/",
		"a token with the Agent left out":  "team-a//" + strings.Split(aToken, "/")[2],
		"a token with a path in its Agent": "team-a/support/x/" + strings.Split(aToken, "/")[2],
	} {
		if got := publish(token, one); got != http.StatusUnauthorized {
			t.Errorf("publish with %s = %d, want 401", name, got)
		}
	}
	if got := publish(aToken, one); got != http.StatusNoContent {
		t.Fatalf("publish = %d", got)
	}
	// team-a's worker wrote session s-1 of team-a/support only.
	r := th.reader()
	for _, k := range []hub.Key{{Namespace: "team-b", Agent: "support", Session: "s-1"}, {Namespace: "team-a", Agent: "billing", Session: "s-1"}} {
		if th.hub.End(k).Seq != 0 {
			t.Errorf("%+v has events", k)
		}
	}
	a := hub.Key{Namespace: "team-a", Agent: "support", Session: "s-1"}
	if got := th.hub.End(a); got.Seq != 1 {
		t.Errorf("team-a's session has %d events, want 1", got.Seq)
	}
	// Reading takes the read token.
	bad := NewReader(th.url, aToken, nil)
	if _, err := bad.Position(context.Background(), a, ""); err == nil || !strings.Contains(err.Error(), "401") {
		t.Errorf("reading with a publish token: %v, want 401", err)
	}
	if _, err := r.Position(context.Background(), a, ""); err != nil {
		t.Errorf("reading with the read token: %v", err)
	}
}

func TestThePublishRouteRefusesBadBatches(t *testing.T) {
	th := startHub(t, hub.Limits{})
	token := th.keys.PublishToken("team-a", "support")
	event := func(session, typ string) string {
		return fmt.Sprintf(`{"session":%q,"event":{"type":%q,"payload":{}}}`, session, typ)
	}
	many := strings.Repeat(event("s", "text_delta")+",", MaxPublishEvents)
	cases := []struct {
		name, body string
		status     int
		mentions   string
	}{
		{"not JSON", "{", 400, "not a publish request"},
		{"an empty session ID", `{"events":[` + event("", "text_delta") + `]}`, 400, "events[0].session"},
		{"a session ID over the engine's limit", `{"events":[` + event(strings.Repeat("s", MaxSessionIDBytes+1), "text_delta") + `]}`, 400, "events[0].session"},
		{"an empty type", `{"events":[` + event("s", "text_delta") + "," + event("s", "") + `]}`, 400, "events[1].event.type"},
		{"too many events", `{"events":[` + many + event("s", "x") + `]}`, 400, "at most 10000"},
		{"a body over the limit", `{"events":[` + event(strings.Repeat("s", MaxPublishBytes), "x") + `]}`, 413, "at most"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			req, _ := http.NewRequest(http.MethodPost, th.url+PublishPath, strings.NewReader(c.body))
			req.Header.Set("Authorization", "Bearer "+token)
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer func() { _ = resp.Body.Close() }()
			var refusal ErrorResponse
			_ = json.NewDecoder(resp.Body).Decode(&refusal)
			if resp.StatusCode != c.status || !strings.Contains(refusal.Message, c.mentions) {
				t.Errorf("= %d %q, want %d naming %q", resp.StatusCode, refusal.Message, c.status, c.mentions)
			}
		})
	}
	if th.hub.End(hub.Key{Namespace: "team-a", Agent: "support", Session: "s"}).Seq != 0 {
		t.Error("a refused batch left events in the hub")
	}
}

func TestReadersAreToldWhichTokensTheHubRefuses(t *testing.T) {
	th := startHub(t, hub.Limits{SessionBytes: 1000})
	k := hub.Key{Namespace: "team-a", Agent: "support", Session: "s-1"}
	start := th.hub.End(k).String()
	for range 50 {
		th.hub.Publish(k, []session.Event{delta("t1", "xxxxxxxxxxxxxxxxxxxx")})
	}
	r := th.reader()
	if _, err := r.Events(context.Background(), k, start, 0); !errors.Is(err, hub.ErrExpiredToken) {
		t.Errorf("a token before dropped events: %v, want hub.ErrExpiredToken", err)
	}
	for _, tok := range []string{"", "garbage", th.hub.End(hub.Key{Namespace: "team-a", Agent: "support", Session: "s-2"}).String()} {
		if _, err := r.Events(context.Background(), k, tok, 0); !errors.Is(err, hub.ErrInvalidToken) {
			t.Errorf("token %q: %v, want hub.ErrInvalidToken", tok, err)
		}
	}
	if _, err := r.Events(context.Background(), k, th.hub.End(k).String(), 31*time.Second); err == nil || !strings.Contains(err.Error(), "wait=") {
		t.Errorf("a wait over the limit: %v, want a refusal naming wait", err)
	}
	// A waiting read returns as soon as an event comes.
	end := th.hub.End(k).String()
	got := make(chan []WireRecord)
	go func() {
		records, _ := r.Events(context.Background(), k, end, 20*time.Second)
		got <- records
	}()
	time.Sleep(100 * time.Millisecond)
	th.hub.Publish(k, []session.Event{delta("t1", "now")})
	select {
	case records := <-got:
		if texts(records) != "now" {
			t.Errorf("waiting read = %q", texts(records))
		}
	case <-time.After(10 * time.Second):
		t.Fatal("a waiting read did not return when an event came")
	}
}

func TestAPublisherKeepsItsEventsWhileTheHubIsDown(t *testing.T) {
	th := startHub(t, hub.Limits{})
	th.failing.Store(true)
	k := hub.Key{Namespace: "team-a", Agent: "support", Session: "s-1"}
	start := th.hub.End(k).String()
	p := NewPublisher(th.url, th.keys.PublishToken("team-a", "support"), PublisherOptions{Interval: 20 * time.Millisecond})
	runPublisher(t, p)
	for _, s := range []string{"a", "b", "c"} {
		p.Write("s-1", delta("t1", s))
	}
	deadline := time.Now().Add(5 * time.Second)
	for th.requests.Load() < 2 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	p.Write("s-1", delta("t1", "d"))
	th.failing.Store(false)
	readUntil(t, th.reader(), k, start, "abcd")
	if p.Dropped() != 0 {
		t.Errorf("dropped %d events", p.Dropped())
	}
}

func TestAPublishersQueueIsBounded(t *testing.T) {
	th := startHub(t, hub.Limits{})
	one := publishedSize(PublishedEvent{Session: "s-1", Event: delta("t1", "a")})
	p := NewPublisher(th.url, th.keys.PublishToken("team-a", "support"), PublisherOptions{QueueBytes: one * 5})
	for range 8 {
		p.Write("s-1", delta("t1", "a"))
	}
	p.Write("s-1", session.Event{Type: "huge", Payload: json.RawMessage(`"` + strings.Repeat("x", maxEventBytes) + `"`)})
	if p.Dropped() != 4 {
		t.Errorf("dropped %d, want the 3 oldest past the bound and the event too large to send", p.Dropped())
	}
	k := hub.Key{Namespace: "team-a", Agent: "support", Session: "s-1"}
	start := th.hub.End(k).String()
	runPublisher(t, p)
	readUntil(t, th.reader(), k, start, "aaaaa")
}

func TestAStoppingPublisherSendsWhatIsQueued(t *testing.T) {
	th := startHub(t, hub.Limits{})
	k := hub.Key{Namespace: "team-a", Agent: "support", Session: "s-1"}
	start := th.hub.End(k).String()
	p := NewPublisher(th.url, th.keys.PublishToken("team-a", "support"), PublisherOptions{Interval: time.Hour})
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { p.Run(ctx) })
	p.Write("s-1", delta("t1", "last words"))
	cancel()
	wg.Wait()
	readUntil(t, th.reader(), k, start, "last words")
}

func TestAKeyIsLongEnough(t *testing.T) {
	if _, err := NewKeyring([]byte("short")); err == nil || !strings.Contains(err.Error(), "at least 32") {
		t.Errorf("NewKeyring(short) = %v", err)
	}
}
