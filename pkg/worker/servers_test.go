package worker

import (
	"encoding/json"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/stepwise-run/stepwise/internal/events"
	"github.com/stepwise-run/stepwise/internal/session"
)

func startHealthServer(t *testing.T, ready *atomic.Bool) string {
	t.Helper()
	server, err := healthServer("127.0.0.1:0", ready)
	if err != nil {
		t.Fatalf("healthServer() = %v", err)
	}
	go func() { _ = server.Serve() }()
	t.Cleanup(func() { _ = server.Close() })
	return "http://" + server.Addr().String()
}

func startDebugServer(t *testing.T, ring *events.Ring) string {
	t.Helper()
	server, err := debugServer("127.0.0.1:0", ring)
	if err != nil {
		t.Fatalf("debugServer() = %v", err)
	}
	go func() { _ = server.Serve() }()
	t.Cleanup(func() { _ = server.Close() })
	return "http://" + server.Addr().String()
}

func TestHealthServerAnswersHealthzAlways(t *testing.T) {
	var ready atomic.Bool
	base := startHealthServer(t, &ready)
	if status, body := get(t, base+"/healthz"); status != http.StatusOK || body != "ok\n" {
		t.Errorf("/healthz = %d %q, want 200 ok", status, body)
	}
}

func TestHealthServerIsReadyOnlyOnceTheWorkerPolls(t *testing.T) {
	var ready atomic.Bool
	base := startHealthServer(t, &ready)
	if status, _ := get(t, base+"/readyz"); status != http.StatusServiceUnavailable {
		t.Errorf("/readyz before the worker polls = %d, want 503", status)
	}
	ready.Store(true)
	if status, body := get(t, base+"/readyz"); status != http.StatusOK || body != "ok\n" {
		t.Errorf("/readyz while the worker polls = %d %q, want 200 ok", status, body)
	}
	ready.Store(false)
	if status, _ := get(t, base+"/readyz"); status != http.StatusServiceUnavailable {
		t.Errorf("/readyz after the worker stopped polling = %d, want 503", status)
	}
}

// The health port is on the pod network: it answers probes and serves no
// session's events, with or without a session.
func TestHealthServerServesNoEvents(t *testing.T) {
	var ready atomic.Bool
	base := startHealthServer(t, &ready)
	for _, path := range []string{"/debug/events", "/debug/events?session=s1", "/debug/"} {
		if status, body := get(t, base+path); status != http.StatusNotFound {
			t.Errorf("GET %s on the health port = %d %q, want 404", path, status, body)
		}
	}
}

func TestDebugServerServesOneSessionsRecentEvents(t *testing.T) {
	ring := events.NewRing(1 << 20)
	ring.Write("s1", session.NewEvent(session.EventTurnStarted, "t1", map[string]any{"sequence": 1}))
	ring.Write("s2", session.NewEvent(session.EventTurnStarted, "t9", map[string]any{"sequence": 1}))
	ring.Write("s1", session.NewEvent(session.EventTextDelta, "t1", map[string]any{"text": "hello"}))
	base := startDebugServer(t, ring)

	decode := func(query string) []events.Record {
		t.Helper()
		status, body := get(t, base+"/debug/events?"+query)
		if status != http.StatusOK {
			t.Fatalf("/debug/events?%s = %d %q", query, status, body)
		}
		var got []events.Record
		if err := json.Unmarshal([]byte(body), &got); err != nil {
			t.Fatalf("/debug/events?%s is not a JSON list of records: %v\n%s", query, err, body)
		}
		return got
	}
	same := func(got, want []events.Record) bool {
		if len(got) != len(want) {
			return false
		}
		for i := range got {
			if got[i].Seq != want[i].Seq || got[i].SessionID != want[i].SessionID || got[i].Event.Type != want[i].Event.Type ||
				got[i].Event.TurnID != want[i].Event.TurnID || string(got[i].Event.Payload) != string(want[i].Event.Payload) ||
				!got[i].Time.Equal(want[i].Time) {
				return false
			}
		}
		return true
	}

	s1 := decode("session=s1")
	if want := ring.Since("s1", 0); len(want) != 2 || !same(s1, want) {
		t.Errorf("events of s1 = %+v, want %+v", s1, want)
	}
	if after := decode("session=s1&after=1"); len(after) != 1 || after[0].Seq != 3 || after[0].Event.Type != session.EventTextDelta {
		t.Errorf("events of s1 after 1 = %+v, want only the text delta", after)
	}
	if s2 := decode("session=s2"); len(s2) != 1 || s2[0].SessionID != "s2" || s2[0].Event.TurnID != "t9" {
		t.Errorf("events of s2 = %+v, want its one event", s2)
	}
	if none := decode("session=s3"); len(none) != 0 {
		t.Errorf("events of a session with none = %+v", none)
	}
	for _, query := range []string{"", "?session=", "?after=1", "?session=s1&after=one"} {
		if status, body := get(t, base+"/debug/events"+query); status != http.StatusBadRequest || strings.Contains(body, "hello") {
			t.Errorf("/debug/events%s = %d %q, want 400 and no events", query, status, body)
		}
	}
}

func TestDebugServerRefusesAnAddressOffLoopback(t *testing.T) {
	for _, address := range []string{":0", "0.0.0.0:0", "[::]:0"} {
		if _, err := debugServer(address, events.NewRing(1<<20)); err == nil || !strings.Contains(err.Error(), "debugAddress") ||
			!strings.Contains(err.Error(), "not a loopback address") {
			t.Errorf("debugServer(%q) = %v, want a refusal naming debugAddress", address, err)
		}
	}
}

func TestHealthServerRefusesAnAddressInUse(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	var ready atomic.Bool
	_, err = healthServer(l.Addr().String(), &ready)
	if err == nil || !strings.Contains(err.Error(), "serving health probes on "+l.Addr().String()) {
		t.Fatalf("healthServer() on an address in use = %v, want an error naming it", err)
	}
}
