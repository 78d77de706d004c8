package hubapi

import (
	"context"
	"encoding/base64"
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

var (
	testKeys, _    = hub.ParsePublishKeys([]byte("k1:0123456789abcdef0123456789abcdef\n"))
	testReaders, _ = hub.ParseReadTokens([]byte("a read token of the hub tests, 32 bytes or more\n"))
)

// testAgent is the Agent most tests publish for.
var testAgent = hub.PublishClaims{Namespace: "team-a", Agent: "support", AgentUID: "uid-support"}

// tokenOf signs a publish token for an Agent, valid for an hour.
func tokenOf(c hub.PublishClaims) string {
	c.Expires = time.Now().Add(time.Hour)
	return testKeys.Mint(c)
}

// keyOf is an Agent's session as the hub keys it.
func keyOf(c hub.PublishClaims, session string) hub.Key {
	return hub.Key{Namespace: c.Namespace, Agent: c.Agent, AgentUID: c.AgentUID, Session: session}
}

type testHub struct {
	hub      *hub.Hub
	url      string
	requests atomic.Int64
	// failing makes the hub answer 503 to publish requests.
	failing atomic.Bool
}

func startHub(t *testing.T, limits hub.Limits, opts ...func(*ServerOptions)) *testHub {
	t.Helper()
	th := &testHub{hub: hub.New(hub.NewEpoch(), limits, time.Now)}
	o := ServerOptions{PublishKeys: func() *hub.PublishKeys { return testKeys }, ReadTokens: func() *hub.ReadTokens { return testReaders }}
	for _, opt := range opts {
		opt(&o)
	}
	handler := NewServer(th.hub, o).Handler()
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

func (th *testHub) reader() *Reader { return NewReader(th.url, testReaders.Current, nil) }

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
	k := keyOf(testAgent, "s-1")
	pos, err := th.reader().Position(context.Background(), k, "")
	if err != nil {
		t.Fatal(err)
	}
	p := NewPublisher(th.url, tokenOf(testAgent), PublisherOptions{Interval: 50 * time.Millisecond})
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
	now := time.Now()
	th := startHub(t, hub.Limits{}, func(o *ServerOptions) { o.Now = func() time.Time { return now } })
	otherHub, _ := hub.ParsePublishKeys([]byte("k1:zzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzz"))
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
	aToken := tokenOf(testAgent)
	parts := strings.Split(aToken, ".")
	bClaims, _ := json.Marshal(hub.PublishClaims{Namespace: "team-b", Agent: "support", AgentUID: "uid-support", Expires: now.Add(time.Hour)})
	forged := strings.Join([]string{parts[0], parts[1], base64.RawURLEncoding.EncodeToString(bClaims), parts[3]}, ".")
	expired := testAgent
	expired.Expires = now.Add(-time.Second)
	for name, token := range map[string]string{
		"no token":                    "",
		"another hub's token":         otherHub.Mint(hub.PublishClaims{Namespace: "team-a", Agent: "support", AgentUID: "uid-support", Expires: now.Add(time.Hour)}),
		"one Agent's MAC for another": forged,
		"the read token":              testReaders.Current(),
		"an expired token":            testKeys.Mint(expired),
		"a token with the MAC cut":    strings.Join(parts[:3], ".") + ".",
		"a token of an unknown key":   strings.Join([]string{parts[0], "k9", parts[2], parts[3]}, "."),
		"a token with no Agent UID":   testKeys.Mint(hub.PublishClaims{Namespace: "team-a", Agent: "support", Expires: now.Add(time.Hour)}),
	} {
		if got := publish(token, one); got != http.StatusUnauthorized {
			t.Errorf("publish with %s = %d, want 401", name, got)
		}
	}
	if got := publish(aToken, one); got != http.StatusNoContent {
		t.Fatalf("publish = %d", got)
	}
	// team-a's worker wrote session s-1 of team-a/support with its UID only:
	// an Agent made again under the name is another Agent.
	r := th.reader()
	for _, k := range []hub.Key{
		{Namespace: "team-b", Agent: "support", AgentUID: "uid-support", Session: "s-1"},
		{Namespace: "team-a", Agent: "billing", AgentUID: "uid-support", Session: "s-1"},
		{Namespace: "team-a", Agent: "support", AgentUID: "uid-of-a-new-support", Session: "s-1"},
	} {
		if th.hub.End(k).Seq != 0 {
			t.Errorf("%+v has events", k)
		}
	}
	a := keyOf(testAgent, "s-1")
	if got := th.hub.End(a); got.Seq != 1 {
		t.Errorf("team-a's session has %d events, want 1", got.Seq)
	}
	// Reading takes a read token; a publish token cannot read.
	bad := NewReader(th.url, func() string { return aToken }, nil)
	if _, err := bad.Position(context.Background(), a, ""); err == nil || !strings.Contains(err.Error(), "401") {
		t.Errorf("reading with a publish token: %v, want 401", err)
	}
	if _, err := r.Position(context.Background(), a, ""); err != nil {
		t.Errorf("reading with the read token: %v", err)
	}
}

func TestKeysAndReadTokensChangeWithNoDowntime(t *testing.T) {
	oldKeys, _ := hub.ParsePublishKeys([]byte("old:an old publish key of 32 bytes or more"))
	both, _ := hub.ParsePublishKeys([]byte("new:a new publish key, 32 bytes or more\nold:an old publish key of 32 bytes or more"))
	newOnly, _ := hub.ParsePublishKeys([]byte("new:a new publish key, 32 bytes or more"))
	oldRead, _ := hub.ParseReadTokens([]byte("an old read token of 32 bytes or more"))
	bothRead, _ := hub.ParseReadTokens([]byte("a new read token of 32 bytes or more!\nan old read token of 32 bytes or more"))
	var keys atomic.Pointer[hub.PublishKeys]
	var readers atomic.Pointer[hub.ReadTokens]
	keys.Store(oldKeys)
	readers.Store(oldRead)
	th := startHub(t, hub.Limits{}, func(o *ServerOptions) { o.PublishKeys, o.ReadTokens = keys.Load, readers.Load })
	now := time.Now()
	oldToken, _ := oldKeys.Renew("", testAgent, now, time.Hour)
	publish := func(token string) error {
		return post(context.Background(), http.DefaultClient, th.url, token, PublishRequest{Events: []PublishedEvent{{Session: "s-1", Event: delta("t1", "a")}}})
	}
	if err := publish(oldToken); err != nil {
		t.Fatal(err)
	}
	// The new key signs; tokens of the old one are valid until renewed.
	keys.Store(both)
	readers.Store(bothRead)
	if err := publish(oldToken); err != nil {
		t.Errorf("a token of the old key during the change: %v", err)
	}
	newToken, _ := both.Renew(oldToken, testAgent, now, time.Hour)
	if newToken == oldToken || strings.Split(newToken, ".")[1] != "new" {
		t.Fatalf("Renew kept a token of the old key: %s", newToken)
	}
	if err := publish(newToken); err != nil {
		t.Errorf("a token of the new key: %v", err)
	}
	for _, token := range []string{oldRead.Current(), bothRead.Current()} {
		if _, err := NewReader(th.url, func() string { return token }, nil).Position(context.Background(), keyOf(testAgent, "s-1"), ""); err != nil {
			t.Errorf("read token %q during the change: %v", token[:6], err)
		}
	}
	// The old key gone, its tokens go with it.
	keys.Store(newOnly)
	if err := publish(oldToken); err == nil || !strings.Contains(err.Error(), "401") {
		t.Errorf("a token of a removed key: %v, want 401", err)
	}
	if err := publish(newToken); err != nil {
		t.Errorf("the new token after the change: %v", err)
	}
}

func TestThePublishRouteRefusesBadBatches(t *testing.T) {
	th := startHub(t, hub.Limits{})
	token := tokenOf(testAgent)
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
	if th.hub.End(keyOf(testAgent, "s")).Seq != 0 {
		t.Error("a refused batch left events in the hub")
	}
}

func TestReadersAreToldWhichTokensTheHubRefuses(t *testing.T) {
	th := startHub(t, hub.Limits{SessionBytes: 1000})
	k := keyOf(testAgent, "s-1")
	start := th.hub.End(k).String()
	for range 50 {
		th.hub.Publish(k, []session.Event{delta("t1", "xxxxxxxxxxxxxxxxxxxx")})
	}
	r := th.reader()
	if _, err := r.Events(context.Background(), k, start, 0); !errors.Is(err, hub.ErrExpiredToken) {
		t.Errorf("a token before dropped events: %v, want hub.ErrExpiredToken", err)
	}
	for _, tok := range []string{"", "garbage", th.hub.End(keyOf(testAgent, "s-2")).String()} {
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
	k := keyOf(testAgent, "s-1")
	start := th.hub.End(k).String()
	p := NewPublisher(th.url, tokenOf(testAgent), PublisherOptions{Interval: 20 * time.Millisecond})
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
	p := NewPublisher(th.url, tokenOf(testAgent), PublisherOptions{QueueBytes: one * 5})
	for range 8 {
		p.Write("s-1", delta("t1", "a"))
	}
	p.Write("s-1", session.Event{Type: "huge", Payload: json.RawMessage(`"` + strings.Repeat("x", maxEventBytes) + `"`)})
	if p.Dropped() != 4 {
		t.Errorf("dropped %d, want the 3 oldest past the bound and the event too large to send", p.Dropped())
	}
	k := keyOf(testAgent, "s-1")
	start := th.hub.End(k).String()
	runPublisher(t, p)
	readUntil(t, th.reader(), k, start, "aaaaa")
}

func TestAStoppingPublisherSendsWhatIsQueued(t *testing.T) {
	th := startHub(t, hub.Limits{})
	k := keyOf(testAgent, "s-1")
	start := th.hub.End(k).String()
	p := NewPublisher(th.url, tokenOf(testAgent), PublisherOptions{Interval: time.Hour})
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { p.Run(ctx) })
	p.Write("s-1", delta("t1", "last words"))
	cancel()
	wg.Wait()
	readUntil(t, th.reader(), k, start, "last words")
}

func TestAFloodFromOneAgentDropsOnlyItsOwnEvents(t *testing.T) {
	limits := hub.Limits{AgentBytes: 512 << 10, NamespaceBytes: 1 << 20, TotalBytes: 3 << 20 / 2}
	th := startHub(t, limits, func(o *ServerOptions) {
		o.Rate = PublishRate{EventsPerSecond: 1000, BytesPerSecond: 1 << 20}
	})
	flooder := hub.PublishClaims{Namespace: "team-a", Agent: "flood", AgentUID: "uid-flood"}
	quiet := hub.PublishClaims{Namespace: "team-b", Agent: "support", AgentUID: "uid-b"}
	neighbour := hub.PublishClaims{Namespace: "team-a", Agent: "support", AgentUID: "uid-a"}
	r := th.reader()
	quietStart, err := r.Position(context.Background(), keyOf(quiet, "s-1"), "")
	if err != nil {
		t.Fatal(err)
	}
	neighbourKey := keyOf(neighbour, "s-1")
	th.hub.Publish(neighbourKey, []session.Event{delta("t1", "kept")})
	neighbourStart := th.hub.TurnStart(neighbourKey, "t1").String()

	// The flood: 12 MiB of events over many sessions, as fast as the hub
	// takes them, while the quiet namespace streams on.
	var limited atomic.Int64
	flood := tokenOf(flooder)
	var wg sync.WaitGroup
	wg.Go(func() {
		big := strings.Repeat("x", 128<<10)
		for i := range 96 {
			err := post(context.Background(), http.DefaultClient, th.url, flood, PublishRequest{Events: []PublishedEvent{
				{Session: fmt.Sprintf("f-%d", i), Event: delta("t1", big)},
			}})
			var status *statusError
			if errors.As(err, &status) && status.code == http.StatusTooManyRequests {
				limited.Add(1)
			} else if err != nil {
				t.Errorf("flood publish: %v", err)
				return
			}
		}
	})
	p := NewPublisher(th.url, tokenOf(quiet), PublisherOptions{Interval: 5 * time.Millisecond})
	runPublisher(t, p)
	want := ""
	for i := range 100 {
		want += fmt.Sprint(i % 10)
		p.Write("s-1", delta("t1", fmt.Sprint(i%10)))
		time.Sleep(time.Millisecond)
	}
	wg.Wait()
	// Every event of the quiet stream is there, in order, from its start.
	readUntil(t, r, keyOf(quiet, "s-1"), quietStart.End, want)
	if limited.Load() == 0 {
		t.Error("12 MiB at once from one Agent was never answered 429")
	}
	if bytes, _ := th.hub.Usage("team-a"); bytes > limits.NamespaceBytes {
		t.Errorf("team-a holds %d bytes, over its %d", bytes, limits.NamespaceBytes)
	}
	if total := th.hub.TotalBytes(); total > limits.TotalBytes {
		t.Errorf("the hub holds %d bytes, over its %d", total, limits.TotalBytes)
	}
	// The flooder's neighbour in its own namespace lost nothing either: the
	// flooder is over its Agent's bytes first and drops its own sessions.
	if _, err := r.Events(context.Background(), neighbourKey, neighbourStart, 0); err != nil {
		t.Errorf("the flooding Agent's neighbour lost its events: %v", err)
	}
}

func TestAnAgentOverItsRateIsToldWhenToSendAgain(t *testing.T) {
	th := startHub(t, hub.Limits{}, func(o *ServerOptions) {
		o.Rate = PublishRate{EventsPerSecond: 1, BytesPerSecond: 1 << 30}
	})
	many := make([]PublishedEvent, MaxPublishEvents)
	for i := range many {
		many[i] = PublishedEvent{Session: "s-1", Event: delta("t1", "a")}
	}
	send := func(c hub.PublishClaims) (int, string) {
		body, _ := json.Marshal(PublishRequest{Events: many})
		req, _ := http.NewRequest(http.MethodPost, th.url+PublishPath, strings.NewReader(string(body)))
		req.Header.Set("Authorization", "Bearer "+tokenOf(c))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_ = resp.Body.Close()
		return resp.StatusCode, resp.Header.Get("Retry-After")
	}
	if status, _ := send(testAgent); status != http.StatusNoContent {
		t.Fatalf("the first batch within the burst: %d", status)
	}
	if status, retry := send(testAgent); status != http.StatusTooManyRequests || retry == "" {
		t.Errorf("a batch past the burst: %d, Retry-After %q; want 429 with Retry-After", status, retry)
	}
	other := hub.PublishClaims{Namespace: "team-b", Agent: "support", AgentUID: "uid-b"}
	if status, _ := send(other); status != http.StatusNoContent {
		t.Errorf("another Agent, under its own rate: %d", status)
	}
}

func TestAnAgentsWorkersTakeTurnsRatherThanBeRefused(t *testing.T) {
	th := startHub(t, hub.Limits{}, func(o *ServerOptions) { o.Rate.Concurrent = 1 })
	token := tokenOf(testAgent)
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for w := range 8 {
		wg.Go(func() {
			errs <- post(context.Background(), http.DefaultClient, th.url, token, PublishRequest{Events: []PublishedEvent{
				{Session: fmt.Sprintf("s-%d", w), Event: delta("t1", strings.Repeat("x", 64<<10))},
			}})
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Errorf("a worker of the Agent, publishing beside seven others: %v", err)
		}
	}
}
