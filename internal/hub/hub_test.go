package hub

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/stepwise-run/stepwise/internal/session"
)

var (
	alpha = Key{Namespace: "team-a", Agent: "support", Session: "s-1"}
	beta  = Key{Namespace: "team-a", Agent: "support", Session: "s-2"}
	// other is the same session ID under another Agent.
	other = Key{Namespace: "team-b", Agent: "support", Session: "s-1"}
)

func clock() time.Time { return time.Date(2026, 12, 5, 0, 0, 0, 0, time.UTC) }

func delta(turn, text string) session.Event {
	return session.NewEvent(session.EventTextDelta, turn, map[string]string{"text": text})
}

func texts(records []Record) string {
	var out []string
	for _, r := range records {
		var p struct{ Text string }
		_ = json.Unmarshal(r.Event.Payload, &p)
		out = append(out, p.Text)
	}
	return strings.Join(out, ",")
}

func readAll(t *testing.T, h *Hub, k Key, tok Token) ([]Record, Token) {
	t.Helper()
	records, _, err := h.Read(k, tok, 1<<30)
	if err != nil {
		t.Fatalf("Read(%s) = %v", tok, err)
	}
	if len(records) > 0 {
		tok = records[len(records)-1].Token
	}
	return records, tok
}

func TestAReaderResumesWithNoRepeatedOrMissingEvent(t *testing.T) {
	h := New("00aa", Limits{}, clock)
	start := h.End(alpha)
	h.Publish(alpha, []session.Event{delta("t1", "a"), delta("t1", "b")})
	h.Publish(beta, []session.Event{delta("t9", "elsewhere")})
	got, next := readAll(t, h, alpha, start)
	if texts(got) != "a,b" {
		t.Fatalf("first read = %q, want a,b", texts(got))
	}
	h.Publish(alpha, []session.Event{delta("t1", "c")})
	// The token survives its wire form, as a browser's Last-Event-ID.
	parsed, err := ParseToken(next.String())
	if err != nil || parsed != next {
		t.Fatalf("ParseToken(%q) = %+v, %v", next.String(), parsed, err)
	}
	got, _ = readAll(t, h, alpha, parsed)
	if texts(got) != "c" {
		t.Errorf("resumed read = %q, want only c", texts(got))
	}
	// A token from the middle resumes from there.
	got, _ = readAll(t, h, alpha, got[0].Token)
	if len(got) != 0 {
		t.Errorf("after the newest token = %q, want nothing", texts(got))
	}
}

func TestTokensAreRefusedOutsideTheirSessionAndRun(t *testing.T) {
	h := New("00aa", Limits{}, clock)
	h.Publish(alpha, []session.Event{delta("t1", "a")})
	tok := h.End(alpha)
	h.Publish(other, []session.Event{delta("t1", "b")})
	future := tok
	future.Seq = 5
	restarted := New("00bb", Limits{}, clock)
	restarted.Publish(alpha, []session.Event{delta("t1", "a")})
	cases := []struct {
		name string
		hub  *Hub
		key  Key
		tok  Token
		want error
	}{
		{"another session's token", h, beta, tok, ErrInvalidToken},
		{"the same session ID under another Agent", h, other, tok, ErrInvalidToken},
		{"a token of an earlier hub run", restarted, alpha, tok, ErrInvalidToken},
		{"a place past the newest event", h, alpha, future, ErrInvalidToken},
		{"the zero token", h, alpha, Token{}, ErrInvalidToken},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if _, _, err := c.hub.Read(c.key, c.tok, 1<<20); !errors.Is(err, c.want) {
				t.Errorf("Read = %v, want %v", err, c.want)
			}
		})
	}
}

func TestParseTokenRefusesWhatItDidNotWrite(t *testing.T) {
	for _, s := range []string{
		"", "v1", "v2.00aa.1.1.abcd", "v1.00aa.1.1", "v1.zz.1.1.abcd", "v1.00aa.-1.1.abcd",
		"v1.00aa.1.x.abcd", "v1.00aa.1.1.abcd.more", "v1..1.1.abcd", "v1.00aa.1.1." + strings.Repeat("ab", 100),
		"v1.00aa.18446744073709551616.1.abcd",
	} {
		if _, err := ParseToken(s); !errors.Is(err, ErrInvalidToken) {
			t.Errorf("ParseToken(%q) = %v, want ErrInvalidToken", s, err)
		}
	}
}

func TestATurnStartTokenReplaysTheTurnsEvents(t *testing.T) {
	h := New("00aa", Limits{}, clock)
	h.Publish(alpha, []session.Event{delta("t1", "old")})
	h.Publish(alpha, []session.Event{session.NewEvent(session.EventTurnStarted, "t2", map[string]string{}), delta("t2", "live")})
	got, _ := readAll(t, h, alpha, h.TurnStart(alpha, "t2"))
	if len(got) != 2 || got[0].Event.Type != session.EventTurnStarted || texts(got[1:]) != "live" {
		t.Errorf("TurnStart(t2) replays %+v, want the turn's two events", got)
	}
	if got, _ := readAll(t, h, alpha, h.TurnStart(alpha, "t3")); len(got) != 0 {
		t.Errorf("a turn with no events yet replays %q, want nothing, as End", texts(got))
	}
}

func TestASessionKeepsItsNewestEventsWithinItsBytes(t *testing.T) {
	one := eventSize(delta("t1", "xxxxxxxxxx"))
	h := New("00aa", Limits{SessionBytes: one * 10}, clock)
	start := h.End(alpha)
	h.Publish(alpha, []session.Event{delta("t1", "xxxxxxxxxx")})
	early, _ := readAll(t, h, alpha, start)
	for i := range 24 {
		h.Publish(alpha, []session.Event{delta("t1", fmt.Sprintf("%010d", i))})
	}
	if _, _, err := h.Read(alpha, start, 1<<20); !errors.Is(err, ErrExpiredToken) {
		t.Errorf("a token before dropped events: %v, want ErrExpiredToken, so the reader loads the snapshot", err)
	}
	if _, _, err := h.Read(alpha, early[0].Token, 1<<20); !errors.Is(err, ErrExpiredToken) {
		t.Errorf("a token just before a dropped event: %v, want ErrExpiredToken", err)
	}
	got, _ := readAll(t, h, alpha, h.TurnStart(alpha, "t1"))
	if len(got) == 0 || len(got) > 10 || texts(got[len(got)-1:]) != "0000000023" {
		t.Fatalf("kept %d events ending %q, want at most 10 ending with the newest", len(got), texts(got))
	}
	for i := 1; i < len(got); i++ {
		if got[i].Token.Seq != got[i-1].Token.Seq+1 {
			t.Fatalf("kept events are not a run: %d then %d", got[i-1].Token.Seq, got[i].Token.Seq)
		}
	}
	huge := New("00aa", Limits{SessionBytes: 10}, clock)
	huge.Publish(alpha, []session.Event{delta("t1", strings.Repeat("y", 1000))})
	if got, _ := readAll(t, huge, alpha, huge.TurnStart(alpha, "t1")); len(got) != 1 {
		t.Error("an event larger than a session's bytes is kept: the newest always is")
	}
}

func TestTheHubDropsTheSessionsWrittenLeastRecently(t *testing.T) {
	h := New("00aa", Limits{Sessions: 2}, clock)
	aStart := h.End(alpha)
	h.Publish(alpha, []session.Event{delta("t1", "a")})
	h.Publish(beta, []session.Event{delta("t1", "b")})
	h.Publish(alpha, []session.Event{delta("t1", "a2")})
	h.Publish(other, []session.Event{delta("t1", "c")}) // beta goes
	if got, _ := readAll(t, h, alpha, aStart); texts(got) != "a,a2" {
		t.Errorf("alpha, written recently, = %q", texts(got))
	}
	bTok := Token{Epoch: "00aa", Gen: 2, Seq: 0, Binding: binding("00aa", beta, 2)}
	if _, _, err := h.Read(beta, bTok, 1<<20); !errors.Is(err, ErrExpiredToken) {
		t.Errorf("a dropped session's token: %v, want ErrExpiredToken", err)
	}
	// Seen again, the session starts a new buffer, and the old token is
	// still refused rather than read as a place in it.
	h.Publish(beta, []session.Event{delta("t2", "b2")})
	if _, _, err := h.Read(beta, bTok, 1<<20); !errors.Is(err, ErrExpiredToken) {
		t.Errorf("a token of the dropped buffer: %v, want ErrExpiredToken", err)
	}

	byBytes := New("00aa", Limits{TotalBytes: 3 * (keySize(alpha) + eventSize(delta("t1", "a")))}, clock)
	for _, k := range []Key{alpha, beta, other, alpha} {
		byBytes.Publish(k, []session.Event{delta("t1", "a")})
	}
	if len(byBytes.sessions) >= 3 {
		t.Errorf("the hub holds %d sessions, over its bytes", len(byBytes.sessions))
	}
	if _, ok := byBytes.sessions[alpha]; !ok {
		t.Error("the session written last was dropped")
	}
}

func TestReadsAreBoundedAndWaitsWakeOnEvents(t *testing.T) {
	h := New("00aa", Limits{}, clock)
	start := h.End(alpha)
	h.Publish(alpha, []session.Event{delta("t1", "a"), delta("t1", "b"), delta("t1", "c")})
	got, _, err := h.Read(alpha, start, eventSize(delta("t1", "a"))*2)
	if err != nil || texts(got) != "a,b" {
		t.Fatalf("bounded read = %q, %v, want the first two", texts(got), err)
	}
	if got, _, _ := h.Read(alpha, start, 1); len(got) != 1 {
		t.Errorf("a read below one event's size returns %d events, want one", len(got))
	}
	end := h.End(alpha)
	done := make(chan []Record)
	go func() {
		records, _ := h.Wait(context.Background(), alpha, end, 1<<20)
		done <- records
	}()
	h.Publish(beta, []session.Event{delta("t1", "elsewhere")})
	h.Publish(alpha, []session.Event{delta("t1", "d")})
	if got := <-done; texts(got) != "d" {
		t.Errorf("Wait = %q, want d", texts(got))
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if got, err := h.Wait(ctx, alpha, h.End(alpha), 1<<20); err != nil || len(got) != 0 {
		t.Errorf("Wait after its context ended = %v, %v, want nothing and no error", got, err)
	}
}

func TestAWaitEndsWhenItsSessionIsDropped(t *testing.T) {
	h := New("00aa", Limits{Sessions: 1}, clock)
	tok := h.End(alpha)
	done := make(chan error)
	go func() {
		_, err := h.Wait(context.Background(), alpha, tok, 1<<20)
		done <- err
	}()
	h.Publish(beta, []session.Event{delta("t1", "b")})
	if err := <-done; !errors.Is(err, ErrExpiredToken) {
		t.Errorf("Wait on a dropped session = %v, want ErrExpiredToken", err)
	}
}

func TestTheHubCountsTheMemoryItHolds(t *testing.T) {
	// Events as the publish route makes them: decoded from JSON, each with
	// strings of its own.
	wire := []byte(`{"type":"text_delta","turnId":"turn-0001","stepExecutionId":"step-0001","payload":{"text":"a short delta"}}`)
	h := New("00aa", Limits{TotalBytes: 1 << 40, SessionEvents: 1 << 30, SessionBytes: 1 << 40, AgentBytes: 1 << 40, NamespaceBytes: 1 << 40}, clock)
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	for s := range 200 {
		k := Key{Namespace: "team-a", Agent: "support", AgentUID: "uid", Session: fmt.Sprintf("s-%d", s)}
		for range 500 {
			var e session.Event
			if err := json.Unmarshal(wire, &e); err != nil {
				t.Fatal(err)
			}
			h.Publish(k, []session.Event{e})
		}
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	held := int64(after.HeapAlloc) - int64(before.HeapAlloc)
	counted := h.TotalBytes()
	t.Logf("100000 events: %d bytes held, %d counted", held, counted)
	if counted < held*8/10 || counted > held*2 {
		t.Errorf("the hub counts %d bytes for %d held: its limits would not bound its memory", counted, held)
	}
	runtime.KeepAlive(h)
}

func TestEachTenantIsBoundedAndFloodsDropTheirOwn(t *testing.T) {
	one := func(text string) []session.Event { return []session.Event{delta("t1", text)} }
	big := strings.Repeat("x", 10_000)
	quiet := Key{Namespace: "team-b", Agent: "support", AgentUID: "b", Session: "s-1"}
	neighbour := Key{Namespace: "team-a", Agent: "support", AgentUID: "a", Session: "s-1"}
	h := New("00aa", Limits{AgentBytes: 100_000, NamespaceBytes: 150_000, TotalBytes: 200_000, NamespaceSessions: 50}, clock)
	h.Publish(quiet, one("b"))
	h.Publish(neighbour, one("a"))
	for i := range 200 {
		h.Publish(Key{Namespace: "team-a", Agent: "flood", AgentUID: "f", Session: fmt.Sprint(i)}, one(big))
		if i%20 == 0 {
			h.Publish(quiet, one("b"))
		}
	}
	if got, _ := readAll(t, h, quiet, h.TurnStart(quiet, "t1")); len(got) != 11 {
		t.Errorf("team-b's session kept %d of its 11 events", len(got))
	}
	if got, _ := readAll(t, h, neighbour, h.TurnStart(neighbour, "t1")); len(got) != 1 {
		t.Error("the flooder's neighbour in team-a lost its event")
	}
	if bytes, _ := h.Usage("team-a"); bytes > 150_000 {
		t.Errorf("team-a holds %d bytes", bytes)
	}
	// Sessions are bounded per namespace too.
	many := New("00aa", Limits{NamespaceSessions: 5}, clock)
	many.Publish(quiet, one("b"))
	for i := range 20 {
		many.Publish(Key{Namespace: "team-a", Agent: "flood", AgentUID: "f", Session: fmt.Sprint(i)}, one("x"))
	}
	if _, n := many.Usage("team-a"); n != 5 {
		t.Errorf("team-a tracks %d sessions, want its 5", n)
	}
	if _, n := many.Usage("team-b"); n != 1 {
		t.Error("team-b's session was dropped for team-a's")
	}
	// A session's events are bounded in number as well as bytes.
	counted := New("00aa", Limits{SessionEvents: 10}, clock)
	for range 25 {
		counted.Publish(alpha, one("a"))
	}
	if got, _ := readAll(t, counted, alpha, counted.TurnStart(alpha, "t1")); len(got) > 10 {
		t.Errorf("a session of at most 10 events keeps %d", len(got))
	}
}
