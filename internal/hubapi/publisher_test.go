package hubapi

import (
	"context"
	"encoding/json"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stepwise-run/stepwise/internal/hub"
	"github.com/stepwise-run/stepwise/internal/session"
)

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
