package hubapi

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
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
