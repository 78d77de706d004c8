package mcp

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// testServer is an MCP server written with the MCP Go SDK, reached over a
// new in-memory connection for each request.
type testServer struct {
	tools       []*mcp.Tool
	connections atomic.Int32
	fail        atomic.Bool
	// hold, when set, delays every connection until it is closed.
	hold chan struct{}
}

func (ts *testServer) server(name string, trusted bool) Server {
	return Server{Name: name, TrustAnnotations: trusted, ConnectionTimeout: 5 * time.Second, Connect: func() (mcp.Transport, error) {
		ts.connections.Add(1)
		if ts.fail.Load() {
			return nil, errors.New("connection refused")
		}
		if ts.hold != nil {
			<-ts.hold
		}
		s := mcp.NewServer(&mcp.Implementation{Name: name, Version: "1"}, nil)
		for _, t := range ts.tools {
			s.AddTool(t, func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
				return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "ok"}}}, nil
			})
		}
		client, server := mcp.NewInMemoryTransports()
		if _, err := s.Connect(context.Background(), server, nil); err != nil {
			return nil, err
		}
		return client, nil
	}}
}

func tool(name string, annotations *mcp.ToolAnnotations, meta mcp.Meta) *mcp.Tool {
	return &mcp.Tool{Name: name, Description: "does " + name, Annotations: annotations, Meta: meta,
		InputSchema: map[string]any{"type": "object", "properties": map[string]any{"id": map[string]any{"type": "string"}}}}
}

func quiet() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

func names(tools []ListedTool) []string {
	var out []string
	for _, t := range tools {
		out = append(out, t.Name)
	}
	return out
}

func TestListServerReadsNamesSchemasAndHints(t *testing.T) {
	ts := &testServer{tools: []*mcp.Tool{
		tool("read_file", &mcp.ToolAnnotations{ReadOnlyHint: true}, nil),
		tool("close.ticket", &mcp.ToolAnnotations{IdempotentHint: true}, mcp.Meta{EffectMetaKey: "non_idempotent_write"}),
	}}
	tools, err := ListServer(context.Background(), ts.server("files", true))
	if err != nil {
		t.Fatal(err)
	}
	if got := names(tools); !slices.Equal(got, []string{"files__close_ticket", "files__read_file"}) && !slices.Equal(got, []string{"files__read_file", "files__close_ticket"}) {
		t.Fatalf("names = %v", got)
	}
	for _, lt := range tools {
		if lt.Server != "files" || lt.Description != "does "+lt.MCPName || !strings.Contains(string(lt.InputSchema), `"id"`) {
			t.Errorf("listed %+v", lt)
		}
		switch lt.MCPName {
		case "read_file":
			if !lt.Annotations.ReadOnly {
				t.Errorf("read_file lost its readOnlyHint")
			}
		case "close.ticket":
			if !lt.Annotations.Idempotent || lt.Annotations.Meta[EffectMetaKey] != "non_idempotent_write" {
				t.Errorf("close.ticket = %+v", lt.Annotations)
			}
		}
	}
}

func TestTheCatalogCachesRefreshesAndBacksOff(t *testing.T) {
	good := &testServer{tools: []*mcp.Tool{tool("read", nil, nil)}}
	bad := &testServer{tools: []*mcp.Tool{tool("write", nil, nil)}}
	bad.fail.Store(true)
	clock := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	var mu sync.Mutex
	c := NewCatalog([]Server{bad.server("bad", true), good.server("good", true)}, quiet())
	c.now = func() time.Time { mu.Lock(); defer mu.Unlock(); return clock }
	advance := func(d time.Duration) { mu.Lock(); clock = clock.Add(d); mu.Unlock() }
	ctx := context.Background()

	// The bad server is left out; the good one is listed once and cached.
	if got := names(c.Tools(within(t, ctx, 5*time.Second))); !slices.Equal(got, []string{"good__read"}) {
		t.Fatalf("first listing = %v", got)
	}
	c.Tools(within(t, ctx, 5*time.Second))
	if good.connections.Load() != 1 || bad.connections.Load() != 1 {
		t.Errorf("connections: good %d, bad %d; want one each (cached, backing off)", good.connections.Load(), bad.connections.Load())
	}

	// Past the backoff the bad server is tried again in the background;
	// once it answers, its tools are offered.
	bad.fail.Store(false)
	advance(ListingFailureBackoff)
	c.Tools(within(t, ctx, 5*time.Second))
	waitFor(t, func() bool { return slices.Contains(names(c.Tools(within(t, ctx, 5*time.Second))), "bad__write") })

	// Past the TTL the good server is refreshed in the background while
	// its earlier tools are served.
	good.tools = append(good.tools, tool("search", nil, nil))
	advance(DefaultListingTTL)
	if got := names(c.Tools(within(t, ctx, 5*time.Second))); !slices.Contains(got, "good__read") {
		t.Fatalf("during the refresh = %v", got)
	}
	waitFor(t, func() bool { return slices.Contains(names(c.Tools(within(t, ctx, 5*time.Second))), "good__search") })
}

func TestASlowServerIsLeftOutOfThatCallOnly(t *testing.T) {
	slow := &testServer{tools: []*mcp.Tool{tool("read", nil, nil)}, hold: make(chan struct{})}
	c := NewCatalog([]Server{slow.server("slow", true)}, quiet())
	ctx := context.Background()
	var wg sync.WaitGroup
	for range 3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if got := c.Tools(within(t, ctx, 50*time.Millisecond)); len(got) != 0 {
				t.Errorf("a server still listing offered %v", names(got))
			}
		}()
	}
	wg.Wait()
	close(slow.hold)
	waitFor(t, func() bool { return len(c.Tools(within(t, ctx, time.Second))) == 1 })
	if n := slow.connections.Load(); n != 1 {
		t.Errorf("%d listings of one server ran, want one at a time", n)
	}
}

func TestTheFirstToolOfAClashingNameWins(t *testing.T) {
	// "a" with "b__c" and "a__b" with "c" both become a__b__c.
	a := &testServer{tools: []*mcp.Tool{tool("b__c", nil, nil)}}
	b := &testServer{tools: []*mcp.Tool{tool("c", nil, nil)}}
	c := NewCatalog([]Server{a.server("a", true), b.server("a__b", true)}, quiet())
	got := c.Tools(within(t, context.Background(), 5*time.Second))
	if len(got) != 1 || got[0].Server != "a" || got[0].Name != "a__b__c" {
		t.Errorf("tools = %+v, want the first server's", got)
	}
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	waitWithin(t, 5*time.Second, cond)
}

// waitWithin waits for cond, failing the test after limit.
func waitWithin(t *testing.T, limit time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("the condition did not hold within %s", limit)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// within is ctx bounded by d, as a model call bounds a listing; the timer
// ends with the test.
func within(t *testing.T, ctx context.Context, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(ctx, d)
	t.Cleanup(cancel)
	return ctx
}

func TestARefreshThatFailsLeavesTheServerOutAndBacksOff(t *testing.T) {
	flaky := &testServer{tools: []*mcp.Tool{tool("read", nil, nil)}}
	clock := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	var mu sync.Mutex
	c := NewCatalog([]Server{flaky.server("flaky", true)}, quiet())
	c.now = func() time.Time { mu.Lock(); defer mu.Unlock(); return clock }
	advance := func(d time.Duration) { mu.Lock(); clock = clock.Add(d); mu.Unlock() }
	ctx := context.Background()
	if got := names(c.Tools(within(t, ctx, 5*time.Second))); len(got) != 1 {
		t.Fatalf("first listing = %v", got)
	}
	flaky.fail.Store(true)
	advance(DefaultListingTTL)
	c.Tools(within(t, ctx, 5*time.Second)) // starts the refresh, which fails
	waitFor(t, func() bool { return len(c.Tools(within(t, ctx, 5*time.Second))) == 0 })
	before := flaky.connections.Load()
	for range 3 {
		c.Tools(within(t, ctx, 5*time.Second))
	}
	if n := flaky.connections.Load(); n != before {
		t.Errorf("%d listings ran while backing off", n-before)
	}
}

func TestASlowFirstListingDoesNotHideAFastServer(t *testing.T) {
	slow := &testServer{tools: []*mcp.Tool{tool("read", nil, nil)}, hold: make(chan struct{})}
	fast := &testServer{tools: []*mcp.Tool{tool("search", nil, nil)}}
	defer close(slow.hold)
	c := NewCatalog([]Server{slow.server("slow", true), fast.server("fast", true)}, quiet())
	if got := names(c.Tools(within(t, context.Background(), 500*time.Millisecond))); !slices.Equal(got, []string{"fast__search"}) {
		t.Errorf("tools = %v, want the fast server's", got)
	}
}
