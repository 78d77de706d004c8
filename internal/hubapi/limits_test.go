package hubapi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stepwise-run/stepwise/internal/hub"
	"github.com/stepwise-run/stepwise/internal/session"
)

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
