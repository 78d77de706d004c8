// Package mcptest serves an MCP server written with the MCP Go SDK for
// tests, for what the reference servers do not exercise: annotations, the
// Dex _meta conventions, idempotency keys and their fence, progress,
// JSON-RPC errors, input requests and broken streams.
package mcptest

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/stepwise-run/stepwise/internal/media/mediatest"
)

// Keys of the Dex conventions, as a server built for them spells them.
const (
	effectKey      = "io.superdurable.dex/effect"
	approvalKey    = "io.superdurable.dex/approval"
	outcomeKey     = "io.superdurable.dex/outcome"
	idempotencyKey = "io.superdurable.dex/idempotencyKey"
)

// Call is one tools/call the ledger received.
type Call struct {
	Tool           string
	IdempotencyKey string
	// Applied is false for a call the fence answered with an earlier
	// call's result.
	Applied bool
	// Traceparent is the W3C trace context the call carried in _meta.
	Traceparent string
}

// Ledger is a payments ledger over Streamable HTTP. Its writes keep a
// fence per idempotency key: a repeated key gets the first call's result
// and never applies the write again.
type Ledger struct {
	// URL is the server's endpoint.
	URL string

	mu      sync.Mutex
	calls   []Call
	fence   map[string]string
	holds   map[string]chan struct{}
	reached map[string]chan struct{}
}

// NewLedger serves a ledger until the test ends.
func NewLedger(t testing.TB) *Ledger {
	l := newLedger()
	handler := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return l.Server() },
		// Pods reach the ledger through a forwarder, under another host
		// name than the loopback address it listens on; it serves test data
		// only, so the DNS rebinding guard has nothing to protect.
		&mcp.StreamableHTTPOptions{Stateless: true, DisableLocalhostProtection: true})
	srv := httptest.NewServer(breakStreams(handler))
	t.Cleanup(srv.Close)
	l.URL = srv.URL
	return l
}

func newLedger() *Ledger {
	return &Ledger{fence: map[string]string{}, holds: map[string]chan struct{}{}, reached: map[string]chan struct{}{}}
}

// Calls returns every call the ledger received, in order.
func (l *Ledger) Calls() []Call {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]Call(nil), l.calls...)
}

// CallsOf returns the calls of one tool.
func (l *Ledger) CallsOf(tool string) []Call {
	var out []Call
	for _, c := range l.Calls() {
		if c.Tool == tool {
			out = append(out, c)
		}
	}
	return out
}

// Hold makes the calls of a tool wait, after they took effect, until
// Release; the channel it returns is closed when the first one arrives.
func (l *Ledger) Hold(tool string) (reached <-chan struct{}) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.holds[tool] = make(chan struct{})
	l.reached[tool] = make(chan struct{})
	return l.reached[tool]
}

// Release lets held calls of a tool go on.
func (l *Ledger) Release(tool string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if h, ok := l.holds[tool]; ok {
		close(h)
		delete(l.holds, tool)
	}
}

// record logs a call and applies it through the fence: apply runs only for
// a key never seen, and a repeated key gets the first result. A held call
// waits after the write took effect, as a call whose answer is lost would.
func (l *Ledger) record(ctx context.Context, tool, key, traceparent string, apply func() string) (string, error) {
	l.mu.Lock()
	fenceKey := tool + "\x00" + key
	result, seen := l.fence[fenceKey]
	if !seen {
		result = apply()
		if key != "" {
			l.fence[fenceKey] = result
		}
	}
	l.calls = append(l.calls, Call{Tool: tool, IdempotencyKey: key, Applied: !seen, Traceparent: traceparent})
	hold, reached := l.holds[tool], l.reached[tool]
	if reached != nil {
		select {
		case <-reached:
		default:
			close(reached)
		}
	}
	l.mu.Unlock()
	if hold != nil {
		select {
		case <-hold:
		case <-ctx.Done():
			return "", ctx.Err()
		}
	}
	return result, nil
}

func text(s string) []mcp.Content { return []mcp.Content{&mcp.TextContent{Text: s}} }

var objectSchema = map[string]any{"type": "object", "properties": map[string]any{
	"note": map[string]any{"type": "string"}, "amount": map[string]any{"type": "integer"},
}}

// Server returns an MCP server over the ledger's state.
func (l *Ledger) Server() *mcp.Server {
	s := mcp.NewServer(&mcp.Implementation{Name: "ledger", Version: "1"}, nil)
	add := func(name string, annotations *mcp.ToolAnnotations, meta mcp.Meta, h mcp.ToolHandler) {
		s.AddTool(&mcp.Tool{Name: name, Description: "Ledger tool " + name + ".", InputSchema: objectSchema,
			Annotations: annotations, Meta: meta}, h)
	}
	write := func(name string) mcp.ToolHandler {
		return func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			key, _ := req.Params.Meta[idempotencyKey].(string)
			traceparent, _ := req.Params.Meta["traceparent"].(string)
			out, err := l.record(ctx, name, key, traceparent, func() string { return name + " applied " + key })
			if err != nil {
				return nil, err
			}
			return &mcp.CallToolResult{Content: text(out)}, nil
		}
	}
	add("balance", &mcp.ToolAnnotations{ReadOnlyHint: true}, nil, write("balance"))
	add("set_limit", &mcp.ToolAnnotations{IdempotentHint: true}, nil, write("set_limit"))
	// A read marked as the reference servers mark theirs: read-only and
	// idempotent both.
	add("quote", &mcp.ToolAnnotations{ReadOnlyHint: true, IdempotentHint: true}, nil, write("quote"))
	add("note", nil, nil, write("note"))
	add("send_payment", &mcp.ToolAnnotations{ReadOnlyHint: true},
		mcp.Meta{effectKey: "non_idempotent_write"}, func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			// A declared write without the key cannot be recognised when it
			// is retried, so it is refused.
			if _, ok := req.Params.Meta[idempotencyKey].(string); !ok {
				return &mcp.CallToolResult{IsError: true, Content: text("no idempotency key"), Meta: mcp.Meta{outcomeKey: "rejected"}}, nil
			}
			return write("send_payment")(ctx, req)
		})
	add("refund", nil, mcp.Meta{effectKey: "idempotent_write", approvalKey: "recommended"}, write("refund"))
	add("audit", nil, mcp.Meta{effectKey: "read"}, write("audit"))
	add("uncertain", nil, mcp.Meta{effectKey: "non_idempotent_write"}, func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		return &mcp.CallToolResult{IsError: true, Content: text("the payment provider timed out"), Meta: mcp.Meta{outcomeKey: "unknown"}}, nil
	})
	add("uncertain_silent", nil, nil, func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		return &mcp.CallToolResult{IsError: true, Content: []mcp.Content{}, Meta: mcp.Meta{outcomeKey: "unknown"}}, nil
	})
	add("refused", nil, nil, func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		data, _ := json.Marshal(map[string]any{"_meta": map[string]any{outcomeKey: "rejected"}})
		return nil, &jsonrpc.Error{Code: jsonrpc.CodeInternalError, Message: "limit exceeded", Data: data}
	})
	add("invalid", &mcp.ToolAnnotations{ReadOnlyHint: true}, nil, func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		return nil, &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: "amount must be positive"}
	})
	add("internal", &mcp.ToolAnnotations{ReadOnlyHint: true}, nil, func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		return nil, &jsonrpc.Error{Code: jsonrpc.CodeInternalError, Message: "database unavailable"}
	})
	add("failing", &mcp.ToolAnnotations{ReadOnlyHint: true}, nil, func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		return &mcp.CallToolResult{IsError: true, Content: text("account 7 is closed")}, nil
	})
	add("statement", &mcp.ToolAnnotations{ReadOnlyHint: true}, nil, func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		for i := 1; i <= 2; i++ {
			_ = req.Session.NotifyProgress(ctx, &mcp.ProgressNotificationParams{
				ProgressToken: req.Params.GetProgressToken(), Progress: float64(i), Total: 2, Message: fmt.Sprintf("page %d", i),
			})
		}
		return &mcp.CallToolResult{Content: []mcp.Content{
			&mcp.TextContent{Text: "statement"}, &mcp.ImageContent{Data: []byte("iVBORw0KGgo="), MIMEType: "image/png"},
			&mcp.TextContent{Text: "chart above"},
		}}, nil
	})
	// gallery returns "amount" distinct PNG charts between two texts.
	add("gallery", &mcp.ToolAnnotations{ReadOnlyHint: true}, nil, func(_ context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		var args struct {
			Amount int `json:"amount"`
		}
		_ = json.Unmarshal(req.Params.Arguments, &args)
		traceparent, _ := req.Params.Meta["traceparent"].(string)
		l.mu.Lock()
		l.calls = append(l.calls, Call{Tool: "gallery", Applied: true, Traceparent: traceparent})
		l.mu.Unlock()
		content := []mcp.Content{&mcp.TextContent{Text: "charts"}}
		for i := range args.Amount {
			content = append(content, &mcp.ImageContent{Data: mediatest.PNG(2, 2, byte(i)), MIMEType: "image/png"})
		}
		return &mcp.CallToolResult{Content: append(content, &mcp.TextContent{Text: "end"})}, nil
	})
	add("confirm", &mcp.ToolAnnotations{ReadOnlyHint: true}, nil, func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		return &mcp.CallToolResult{InputRequests: mcp.InputRequestMap{
			"account": &mcp.ElicitParams{Mode: "form", Message: "Which account?", RequestedSchema: map[string]any{
				"type": "object", "properties": map[string]any{"account": map[string]any{"type": "string"}},
			}},
		}}, nil
	})
	add("broken", &mcp.ToolAnnotations{ReadOnlyHint: true}, nil, write("broken"))
	add("gateway", &mcp.ToolAnnotations{ReadOnlyHint: true}, nil, write("gateway"))
	add("gateway_uncertain", nil, nil, write("gateway_uncertain"))
	add("paged", &mcp.ToolAnnotations{ReadOnlyHint: true}, nil, func(_ context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		// A state-only answer: the client must repeat the call with the
		// state it hands back.
		if req.Params.RequestState != "step-2" {
			return &mcp.CallToolResult{InputRequests: mcp.InputRequestMap{}, RequestState: "step-2"}, nil
		}
		return &mcp.CallToolResult{Content: text("done after step-2")}, nil
	})
	return s
}

// breakStreams cuts the connection of every tools/call of the "broken"
// tool after reading it, as a crashed gateway or server would, and answers
// the "gateway" tools with HTTP error statuses.
func breakStreams(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost {
			next.ServeHTTP(w, r)
			return
		}
		body, err := io.ReadAll(r.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		r.Body = io.NopCloser(bytes.NewReader(body))
		var msg struct {
			ID     json.RawMessage `json:"id"`
			Method string          `json:"method"`
			Params struct {
				Name string `json:"name"`
			} `json:"params"`
		}
		if json.Unmarshal(body, &msg) == nil && msg.Method == "tools/call" && msg.Params.Name == "gateway" {
			// A gateway's failure after the server may have run the call.
			http.Error(w, `{"jsonrpc":"2.0","id":`+string(msg.ID)+`,"error":{"code":-32000,"message":"upstream timed out"}}`, http.StatusBadGateway)
			return
		}
		if json.Unmarshal(body, &msg) == nil && msg.Method == "tools/call" && msg.Params.Name == "gateway_uncertain" {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusInternalServerError)
			_, _ = w.Write([]byte(`{"jsonrpc":"2.0","id":` + string(msg.ID) + `,"error":{"code":-32603,"message":"the ledger did not answer",` +
				`"data":{"_meta":{"` + outcomeKey + `":"unknown"}}}}`))
			return
		}
		if json.Unmarshal(body, &msg) == nil && msg.Method == "tools/call" && msg.Params.Name == "broken" {
			if hj, ok := w.(http.Hijacker); ok {
				if conn, _, err := hj.Hijack(); err == nil {
					time.Sleep(10 * time.Millisecond)
					_ = conn.Close()
					return
				}
			}
		}
		next.ServeHTTP(w, r)
	})
}
