package mcp

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/stepwise-run/stepwise/internal/media"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/stepwise-run/stepwise/internal/version"
)

// Server is one MCP server a worker may list and call: an Agent's
// ToolSource. Connect opens a new connection for each request (a new
// process for stdio), so no state survives between requests.
type Server struct {
	// Name prefixes the server's tool names; it is the ToolSource's stable
	// source name.
	Name string
	// Connect returns a transport for one new connection. A Streamable HTTP
	// transport carries tasks only when HTTPConnect built it.
	Connect func() (mcp.Transport, error)
	// TrustAnnotations says whether the server's hints and declarations
	// decide its tools' effects.
	TrustAnnotations bool
	// ListingTTL is how long a listing is served before it is refreshed in
	// the background; ConnectionTimeout bounds connecting and each
	// handshake request.
	ListingTTL        time.Duration
	ConnectionTimeout time.Duration
	// RequestTimeout bounds one tools/call; DefaultRequestTimeout when
	// zero.
	RequestTimeout time.Duration
	// TaskPolling says who polls the server's tasks; TaskWaitTimeout bounds
	// a task polled inside the call (DefaultTaskWaitTimeout when zero).
	TaskPolling     TaskPolling
	TaskWaitTimeout time.Duration

	// media keeps the images of the server's results; the source sets it.
	media media.Store
}

// ListedTool is one tool of a server as a model is offered it.
type ListedTool struct {
	// Name is the name the model sees, "<server>__<tool>".
	Name string `json:"name"`
	// Server and MCPName reach the tool in a tool Step on any worker,
	// without a listing.
	Server      string          `json:"server"`
	MCPName     string          `json:"mcpName"`
	Description string          `json:"description,omitempty"`
	InputSchema json.RawMessage `json:"inputSchema"`
	Annotations Annotations     `json:"annotations"`
}

// Listing defaults, used where a ToolSource sets none.
const (
	DefaultListingTTL        = 5 * time.Minute
	DefaultConnectionTimeout = 30 * time.Second
	ListingFailureBackoff    = 30 * time.Second
)

// Catalog lists each server on its own and caches its tools per worker: a
// server's first listing is awaited, a listing past its TTL is refreshed in
// the background while the earlier tools are served, and a server that
// cannot be listed is left out and not tried again for a backoff, then in
// the background. One listing per server runs at a time, so one bad server
// never hides the others' tools or slows every model call.
type Catalog struct {
	servers []Server
	log     *slog.Logger
	now     func() time.Time

	mu      sync.Mutex
	entries map[string]*entry
}

type entry struct {
	tools    []ListedTool
	listedAt time.Time
	failedAt time.Time
	ok       bool
	running  chan struct{} // closed when the listing in flight ends
}

// NewCatalog returns a catalog of servers, in offer order.
func NewCatalog(servers []Server, log *slog.Logger) *Catalog {
	if log == nil {
		log = slog.Default()
	}
	return &Catalog{servers: servers, log: log, now: time.Now, entries: map[string]*entry{}}
}

// Tools returns every server's tools, in server order, waiting until ctx
// ends for servers never listed before, all listed at once. A server whose
// first listing fails or takes longer is left out of this call. Names that
// clash keep the first tool and leave the other out with a warning.
func (c *Catalog) Tools(ctx context.Context) []ListedTool {
	waits := make([]chan struct{}, len(c.servers))
	for i, s := range c.servers {
		waits[i] = c.prepare(s)
	}
	var out []ListedTool
	seen := map[string]string{}
	for i, s := range c.servers {
		if running := waits[i]; running != nil && !finished(ctx, running) {
			c.log.Warn("listing an MCP server took too long; its tools are left out of this model call", "server", s.Name)
			continue
		}
		c.mu.Lock()
		tools := c.entries[s.Name].tools
		c.mu.Unlock()
		for _, t := range tools {
			if first, clash := seen[t.Name]; clash {
				c.log.Warn("an MCP tool name clashes with an earlier one; the earlier is offered",
					"tool", t.Name, "server", t.Server, "offered_from", first)
				continue
			}
			seen[t.Name] = t.Server
			out = append(out, t)
		}
	}
	return out
}

// finished waits for a listing until ctx ends; a listing that already
// finished counts even when ctx has ended too.
func finished(ctx context.Context, running chan struct{}) bool {
	select {
	case <-running:
		return true
	default:
	}
	select {
	case <-running:
		return true
	case <-ctx.Done():
		return false
	}
}

// prepare starts what a server's listing needs: a first listing, which the
// caller waits for (its channel is returned), or a background refresh of a
// stale listing or of one that failed longer than the backoff ago. A
// server listed within its TTL, or backing off, needs nothing.
func (c *Catalog) prepare(s Server) chan struct{} {
	c.mu.Lock()
	defer c.mu.Unlock()
	e := c.entries[s.Name]
	if e == nil {
		e = &entry{}
		c.entries[s.Name] = e
	}
	now := c.now()
	failed := !e.failedAt.IsZero()
	switch {
	case e.ok && now.Sub(e.listedAt) < orDuration(s.ListingTTL, DefaultListingTTL):
		return nil
	case failed && now.Sub(e.failedAt) < ListingFailureBackoff:
		return nil
	case e.ok || failed:
		// Stale, or failed long enough ago: refresh in the background and
		// serve what there is.
		c.startListing(s, e)
		return nil
	}
	return c.startListing(s, e)
}

// startListing starts the server's listing unless one runs; c.mu is held.
func (c *Catalog) startListing(s Server, e *entry) chan struct{} {
	if e.running != nil {
		return e.running
	}
	running := make(chan struct{})
	e.running = running
	go func() {
		defer close(running)
		tools, err := ListServer(context.Background(), s)
		c.mu.Lock()
		defer c.mu.Unlock()
		e.running = nil
		if err != nil {
			// A server that cannot be listed is left out, its earlier
			// tools too, and backed off.
			e.failedAt, e.ok, e.tools = c.now(), false, nil
			c.log.Warn("an MCP server could not be listed; its tools are left out", "server", s.Name, "error", err)
			return
		}
		e.tools, e.listedAt, e.ok, e.failedAt = tools, c.now(), true, time.Time{}
	}()
	return running
}

// ListServer lists every tool of one server over a new connection.
func ListServer(ctx context.Context, s Server) ([]ListedTool, error) {
	timeout := s.connectionTimeout()
	session, err := connect(ctx, s, nil)
	if err != nil {
		return nil, err
	}
	defer func() { _ = session.Close() }()
	listCtx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var out []ListedTool
	for tool, err := range session.Tools(listCtx, nil) {
		if err != nil {
			return nil, fmt.Errorf("listing the tools of MCP server %s: %w", s.Name, err)
		}
		schema, err := json.Marshal(tool.InputSchema)
		if err != nil {
			return nil, fmt.Errorf("MCP server %s: tool %s has an input schema that is not JSON: %w", s.Name, tool.Name, err)
		}
		lt := ListedTool{
			Name: ToolName(s.Name, tool.Name), Server: s.Name, MCPName: tool.Name,
			Description: tool.Description, InputSchema: schema, Annotations: Annotations{Meta: tool.Meta},
		}
		if a := tool.Annotations; a != nil {
			lt.Annotations.ReadOnly, lt.Annotations.Idempotent = a.ReadOnlyHint, a.IdempotentHint
		}
		out = append(out, lt)
	}
	return out, nil
}

// connect opens one client session, bounded by the connection timeout.
func connect(ctx context.Context, s Server, opts *mcp.ClientOptions) (*mcp.ClientSession, error) {
	if s.Connect == nil {
		return nil, errors.New("MCP server " + s.Name + " has no transport")
	}
	transport, err := s.Connect()
	if err != nil {
		return nil, fmt.Errorf("connecting to MCP server %s: %w", s.Name, err)
	}
	ctx, cancel := context.WithTimeout(ctx, s.connectionTimeout())
	defer cancel()
	if _, isHTTP := transport.(*mcp.StreamableClientTransport); !isHTTP {
		transport = taskTransport{transport}
	}
	session, err := taskClient(opts).Connect(ctx, transport, nil)
	if err != nil {
		return nil, fmt.Errorf("connecting to MCP server %s: %w", s.Name, err)
	}
	return session, nil
}

// connectionTimeout bounds connecting and each handshake or task request.
func (s Server) connectionTimeout() time.Duration {
	return orDuration(s.ConnectionTimeout, DefaultConnectionTimeout)
}

func implementation() *mcp.Implementation {
	return &mcp.Implementation{Name: "stepwise", Version: version.Operator}
}

func orDuration(d, fallback time.Duration) time.Duration {
	if d > 0 {
		return d
	}
	return fallback
}
