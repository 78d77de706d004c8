package gateway_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stepwise-run/stepwise/internal/gateway"
	"github.com/stepwise-run/stepwise/internal/gatewayapi"
	"github.com/stepwise-run/stepwise/internal/grants"
)

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
	f.auth.SetGrants(map[string]grants.Grant{
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
