package hubapi

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stepwise-run/stepwise/internal/hub"
)

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
