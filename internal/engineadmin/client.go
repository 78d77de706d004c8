package engineadmin

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"
	enumspb "go.temporal.io/api/enums/v1"
	taskqueuepb "go.temporal.io/api/taskqueue/v1"
	"go.temporal.io/sdk/client"
	temporallog "go.temporal.io/sdk/log"
)

// Task queue types a Poller polls, as the planner names them.
const (
	WorkflowTaskQueue = "workflow"
	ActivityTaskQueue = "activity"
)

// Poller is one worker identity the engine lists as polling a task queue.
type Poller struct {
	// TaskQueueType is WorkflowTaskQueue or ActivityTaskQueue.
	TaskQueueType string
	// Identity is the worker's identity; a stepwise worker's is
	// "<pid>@<pod>@".
	Identity string
	// LastAccess is when the engine last saw this identity start or end a
	// poll.
	LastAccess time.Time
	// DeploymentName and BuildID are the worker deployment version the
	// poller reported; empty for an unversioned worker.
	DeploymentName string
	BuildID        string
	// Versioned is true when the poller opted into worker versioning.
	Versioned bool
}

// Defaults of a Client.
const (
	// DefaultCallTimeout bounds one Pollers call, dialing included.
	DefaultCallTimeout = 15 * time.Second
	// DefaultIdleTimeout closes a client no call used for this long.
	DefaultIdleTimeout = 5 * time.Minute
)

// Option changes a Client's defaults.
type Option func(*Client)

// WithCallTimeout bounds each call, dialing included, so an unreachable
// engine is an error of the call rather than a hang.
func WithCallTimeout(d time.Duration) Option { return func(r *Client) { r.callTimeout = d } }

// WithIdleTimeout sets how long an unused client stays open.
func WithIdleTimeout(d time.Duration) Option { return func(r *Client) { r.idleTimeout = d } }

// Client reads and changes, on engines, what rollouts need. It keeps one client per
// Connection.Key, dialed on first use and closed after it goes unused, so
// one operator can watch the engines of many Agents. It is safe for
// concurrent use.
type Client struct {
	logger      logr.Logger
	callTimeout time.Duration
	idleTimeout time.Duration

	mu      sync.Mutex
	clients map[string]*cachedClient
	closed  bool

	stop    chan struct{}
	stopped chan struct{}
}

// cachedClient is one connection's client; ready is closed once dialing
// ended, with client or err set.
type cachedClient struct {
	conn     Connection
	ready    chan struct{}
	client   client.Client
	err      error
	users    int
	lastUsed time.Time
}

// New returns a Client that logs through logger. Close it when done.
func New(logger logr.Logger, opts ...Option) *Client {
	r := &Client{
		logger: logger, callTimeout: DefaultCallTimeout, idleTimeout: DefaultIdleTimeout,
		clients: map[string]*cachedClient{}, stop: make(chan struct{}), stopped: make(chan struct{}),
	}
	for _, opt := range opts {
		opt(r)
	}
	go r.closeIdle()
	return r
}

// Pollers lists the pollers the engine knows of the task queue, of both
// its workflow and its activity type, sorted by type and identity.
func (r *Client) Pollers(ctx context.Context, conn Connection, taskQueue string) ([]Poller, error) {
	ctx, cancel := context.WithTimeout(ctx, r.callTimeout)
	defer cancel()
	c, release, err := r.acquire(ctx, conn)
	if err != nil {
		return nil, err
	}
	defer release()
	var out []Poller
	for _, tq := range []struct {
		name string
		typ  enumspb.TaskQueueType
	}{{WorkflowTaskQueue, enumspb.TASK_QUEUE_TYPE_WORKFLOW}, {ActivityTaskQueue, enumspb.TASK_QUEUE_TYPE_ACTIVITY}} {
		resp, err := c.DescribeTaskQueue(ctx, taskQueue, tq.typ)
		if err != nil {
			return nil, fmt.Errorf("describing the %s task queue %s of the %s: %w", tq.name, taskQueue, conn, err)
		}
		out = append(out, pollersOf(tq.name, resp.GetPollers())...)
	}
	return out, nil
}

// pollersOf converts the engine's poller list of one task queue type.
func pollersOf(taskQueueType string, infos []*taskqueuepb.PollerInfo) []Poller {
	out := make([]Poller, 0, len(infos))
	for _, info := range infos {
		p := Poller{TaskQueueType: taskQueueType, Identity: info.GetIdentity()}
		if t := info.GetLastAccessTime(); t != nil {
			p.LastAccess = t.AsTime()
		}
		if d := info.GetDeploymentOptions(); d != nil {
			p.DeploymentName, p.BuildID = d.GetDeploymentName(), d.GetBuildId()
			p.Versioned = d.GetWorkerVersioningMode() == enumspb.WORKER_VERSIONING_MODE_VERSIONED
		}
		out = append(out, p)
	}
	slices.SortFunc(out, func(a, b Poller) int { return strings.Compare(a.Identity, b.Identity) })
	return out
}

// Acquire lends the connection's SDK client, for callers that drive
// sessions through it, such as the gateway. Call release when done; the
// client is closed once no one used it for the idle timeout.
func (r *Client) Acquire(ctx context.Context, conn Connection) (c client.Client, release func(), err error) {
	return r.acquire(ctx, conn)
}

// acquire returns the connection's client, dialing it if no call has, and
// a release to call when done with it.
func (r *Client) acquire(ctx context.Context, conn Connection) (client.Client, func(), error) {
	key := conn.Key()
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		return nil, nil, errors.New("the engine client is closed")
	}
	cc, ok := r.clients[key]
	if !ok {
		cc = &cachedClient{conn: conn, ready: make(chan struct{})}
		r.clients[key] = cc
	}
	cc.users++
	r.mu.Unlock()
	release := func() {
		r.mu.Lock()
		cc.users--
		cc.lastUsed = time.Now()
		r.mu.Unlock()
	}
	if !ok {
		r.dial(ctx, key, cc)
	}
	select {
	case <-cc.ready:
	case <-ctx.Done():
		release()
		return nil, nil, fmt.Errorf("connecting to the %s: %w", conn, ctx.Err())
	}
	if cc.err != nil {
		release()
		return nil, nil, cc.err
	}
	return cc.client, release, nil
}

// dial connects a new cache entry. A failed dial leaves the cache, so the
// next call dials again.
func (r *Client) dial(ctx context.Context, key string, cc *cachedClient) {
	c, err := r.dialClient(ctx, cc.conn)
	r.mu.Lock()
	defer r.mu.Unlock()
	defer close(cc.ready)
	switch {
	case err != nil:
		cc.err = err
		if r.clients[key] == cc {
			delete(r.clients, key)
		}
	case r.closed:
		// Close ran while this client was dialing; it is nobody's now.
		c.Close()
		cc.err = errors.New("the engine client is closed")
	default:
		cc.client = c
		r.logger.V(1).Info("connected to the engine", "address", cc.conn.Address, "namespace", cc.conn.Namespace)
	}
}

func (r *Client) dialClient(ctx context.Context, conn Connection) (client.Client, error) {
	opts, err := conn.clientOptions()
	if err != nil {
		return nil, fmt.Errorf("connecting to the %s: %w", conn, err)
	}
	opts.Logger = temporallog.NewStructuredLogger(slog.New(logr.ToSlogHandler(r.logger)))
	c, err := client.DialContext(ctx, opts)
	if err != nil {
		return nil, fmt.Errorf("connecting to the %s: %w", conn, err)
	}
	return c, nil
}

// closeIdle closes clients no call used within the idle timeout, until
// Close.
func (r *Client) closeIdle() {
	defer close(r.stopped)
	tick := time.NewTicker(max(r.idleTimeout/2, 100*time.Millisecond))
	defer tick.Stop()
	for {
		select {
		case <-r.stop:
			return
		case now := <-tick.C:
			for _, cc := range r.takeIdle(now) {
				r.logger.V(1).Info("closing an idle engine client", "address", cc.conn.Address, "namespace", cc.conn.Namespace)
				cc.client.Close()
			}
		}
	}
}

// takeIdle removes and returns the dialed clients unused since the idle
// timeout before now.
func (r *Client) takeIdle(now time.Time) []*cachedClient {
	r.mu.Lock()
	defer r.mu.Unlock()
	var idle []*cachedClient
	for key, cc := range r.clients {
		if cc.users == 0 && cc.client != nil && now.Sub(cc.lastUsed) >= r.idleTimeout {
			idle = append(idle, cc)
			delete(r.clients, key)
		}
	}
	return idle
}

// Close closes every client. Calls after Close fail; calls still running
// may fail.
func (r *Client) Close() {
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		return
	}
	r.closed = true
	clients := r.clients
	r.clients = map[string]*cachedClient{}
	r.mu.Unlock()
	close(r.stop)
	<-r.stopped
	for _, cc := range clients {
		select {
		case <-cc.ready:
			if cc.client != nil {
				cc.client.Close()
			}
		default:
			// Still dialing: dial closes the client when it sees the
			// Client closed.
		}
	}
}
