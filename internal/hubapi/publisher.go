package hubapi

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/stepwise-run/stepwise/internal/session"
)

// PublisherOptions tune a worker's publisher; zero values take defaults.
type PublisherOptions struct {
	// QueueBytes bounds the events waiting to be sent; past it the oldest
	// are dropped, since events are best effort. Default 8 MiB.
	QueueBytes int64
	// BatchBytes is how much one request carries at most, and how much
	// queued sends one at once. Default 512 KiB.
	BatchBytes int64
	// Interval is how long an event may wait to join a batch. Default
	// 100 ms: text deltas go out a few at a time, never one request each.
	Interval time.Duration
	// Client sends the requests; nil uses a client with a 10 s timeout.
	Client *http.Client
	Logger *slog.Logger
}

// Publisher sends one worker's session events to the hub in batches.
type Publisher struct {
	base, token string
	opts        PublisherOptions

	mu      sync.Mutex
	queue   []PublishedEvent
	queued  int64
	dropped int64
	wake    chan struct{}
}

// maxEventBytes is the largest event a publisher queues; a larger one is
// dropped, as it would not fit a request.
const maxEventBytes = 1 << 20

// NewPublisher publishes to the hub at base with an Agent's publish token.
// Call Run to send.
func NewPublisher(base, token string, opts PublisherOptions) *Publisher {
	if opts.QueueBytes <= 0 {
		opts.QueueBytes = 8 << 20
	}
	if opts.BatchBytes <= 0 {
		opts.BatchBytes = 512 << 10
	}
	if opts.Interval <= 0 {
		opts.Interval = 100 * time.Millisecond
	}
	if opts.Client == nil {
		opts.Client = &http.Client{Timeout: 10 * time.Second}
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	return &Publisher{base: strings.TrimSuffix(base, "/"), token: token, opts: opts, wake: make(chan struct{}, 1)}
}

func publishedSize(e PublishedEvent) int64 {
	return int64(len(e.Session)+len(e.Event.Type)+len(e.Event.TurnID)+len(e.Event.StepExecutionID)+len(e.Event.Payload)) + 96
}

// Write queues an event; it never blocks on the network.
func (p *Publisher) Write(sessionID string, e session.Event) {
	pe := PublishedEvent{Session: sessionID, Event: e}
	size := publishedSize(pe)
	p.mu.Lock()
	defer p.mu.Unlock()
	if size > maxEventBytes {
		p.dropped++
		return
	}
	p.queue = append(p.queue, pe)
	p.queued += size
	p.trimLocked()
	if p.queued >= p.opts.BatchBytes {
		select {
		case p.wake <- struct{}{}:
		default:
		}
	}
}

func (p *Publisher) trimLocked() {
	drop := 0
	for p.queued > p.opts.QueueBytes && drop < len(p.queue) {
		p.queued -= publishedSize(p.queue[drop])
		drop++
	}
	if drop > 0 {
		p.dropped += int64(drop)
		p.queue = append([]PublishedEvent(nil), p.queue[drop:]...)
	}
}

// Dropped counts the events that never reached the hub.
func (p *Publisher) Dropped() int64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.dropped
}

// take removes the next batch from the queue.
func (p *Publisher) take() []PublishedEvent {
	p.mu.Lock()
	defer p.mu.Unlock()
	var size int64
	n := 0
	for n < len(p.queue) && n < MaxPublishEvents {
		size += publishedSize(p.queue[n])
		if n > 0 && size > p.opts.BatchBytes {
			break
		}
		n++
	}
	batch := p.queue[:n:n]
	p.queue = p.queue[n:]
	for _, e := range batch {
		p.queued -= publishedSize(e)
	}
	return batch
}

// putBack returns a batch that could not be sent to the front of the queue,
// within the queue's bound.
func (p *Publisher) putBack(batch []PublishedEvent) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.queue = append(append([]PublishedEvent(nil), batch...), p.queue...)
	for _, e := range batch {
		p.queued += publishedSize(e)
	}
	p.trimLocked()
}

// errRefused is a hub answer that sending again would not change.
var errRefused = errors.New("refused")

// Run sends batches until ctx ends, then sends what is queued for at most
// two seconds more.
func (p *Publisher) Run(ctx context.Context) {
	ticker := time.NewTicker(p.opts.Interval)
	defer ticker.Stop()
	backoff := time.Duration(0)
	failing := false
	for {
		select {
		case <-ctx.Done():
			final, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			defer cancel()
			for batch := p.take(); len(batch) > 0 && final.Err() == nil; batch = p.take() {
				if err := p.send(final, batch); err != nil {
					return
				}
			}
			return
		case <-ticker.C:
		case <-p.wake:
		}
		if backoff > 0 {
			select {
			case <-ctx.Done():
				continue
			case <-time.After(backoff):
			}
		}
		for batch := p.take(); len(batch) > 0; batch = p.take() {
			err := p.send(ctx, batch)
			switch {
			case err == nil:
				if failing {
					p.opts.Logger.Info("publishing session events to the event hub again")
				}
				failing, backoff = false, 0
				continue
			case errors.Is(err, errRefused):
				p.opts.Logger.Error("the event hub refused a batch of session events; they are dropped", "events", len(batch), "error", err)
				p.mu.Lock()
				p.dropped += int64(len(batch))
				p.mu.Unlock()
				continue
			}
			if !failing {
				p.opts.Logger.Warn("cannot publish session events to the event hub; retrying", "error", err)
			}
			failing = true
			p.putBack(batch)
			backoff = min(max(2*backoff, 500*time.Millisecond), 10*time.Second)
			break
		}
	}
}

func (p *Publisher) send(ctx context.Context, batch []PublishedEvent) error {
	err := post(ctx, p.opts.Client, p.base, p.token, PublishRequest{Events: batch})
	var status *statusError
	if errors.As(err, &status) && status.code >= 400 && status.code < 500 && status.code != http.StatusTooManyRequests {
		return errors.Join(errRefused, err)
	}
	return err
}
