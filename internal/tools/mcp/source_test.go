package mcp

import (
	"context"
	"encoding/json"
	"errors"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/stepwise-run/stepwise/internal/session"
	"github.com/stepwise-run/stepwise/internal/tools/mcp/mcptest"
	"github.com/stepwise-run/stepwise/internal/tracing"
	"github.com/stepwise-run/stepwise/pkg/agent"
)

func ledgerSource(t *testing.T, trusted bool) (*Source, *mcptest.Ledger) {
	t.Helper()
	ledger := mcptest.NewLedger(t)
	src, err := NewSource(SourceOptions{Name: "ledger", Log: quiet(), Servers: []Server{{
		Name: "ledger", TrustAnnotations: trusted, ConnectionTimeout: 5 * time.Second, RequestTimeout: 10 * time.Second,
		Connect: HTTPConnect(ledger.URL, nil),
	}}})
	if err != nil {
		t.Fatal(err)
	}
	return src, ledger
}

func listed(t *testing.T, src *Source, policies agent.SourcePolicies) map[string]agent.SourceTool {
	t.Helper()
	if policies.DefaultToolEffect == "" {
		policies.DefaultToolEffect = agent.EffectUnclassified
	}
	tools, err := src.ListTools(within(t, context.Background(), 10*time.Second), policies)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]agent.SourceTool{}
	for _, tool := range tools {
		out[tool.Name] = tool
	}
	return out
}

func TestListedToolsGetTheirEffectsFromHintsDeclarationsAndPolicies(t *testing.T) {
	src, _ := ledgerSource(t, true)
	nonIdempotent := agent.Policy{Effect: agent.EffectNonIdempotentWrite}
	readPolicy := agent.Policy{Effect: agent.EffectRead}
	tools := listed(t, src, agent.SourcePolicies{ToolPolicies: map[string]agent.Policy{
		"ledger__audit":        nonIdempotent, // raises a declared read
		"ledger__send_payment": readPolicy,    // cannot lower a declared write
		"ledger__note":         readPolicy,    // wins over an undeclared tool
	}})
	cases := []struct {
		name     string
		effect   agent.Effect
		approval bool
		ordered  bool
	}{
		{"ledger__balance", agent.EffectRead, false, false},
		{"ledger__set_limit", agent.EffectIdempotentWrite, false, false},
		{"ledger__quote", agent.EffectRead, false, false}, // readOnlyHint wins over idempotentHint
		{"ledger__note", agent.EffectRead, false, false},
		{"ledger__send_payment", agent.EffectNonIdempotentWrite, false, true},
		{"ledger__refund", agent.EffectIdempotentWrite, true, true},
		{"ledger__audit", agent.EffectNonIdempotentWrite, true, true},
		{"ledger__uncertain_silent", agent.EffectUnclassified, true, false},
	}
	for _, c := range cases {
		tool, ok := tools[c.name]
		if !ok {
			t.Errorf("%s was not listed", c.name)
			continue
		}
		if tool.Policy.Effect != c.effect || tool.Policy.ApprovalRequired() != c.approval || tool.Ordered != c.ordered {
			t.Errorf("%s: effect %s, approval %v, ordered %v; want %s, %v, %v", c.name,
				tool.Policy.Effect, tool.Policy.ApprovalRequired(), tool.Ordered, c.effect, c.approval, c.ordered)
		}
		if !strings.Contains(string(tool.Parameters), `"amount"`) || tool.Description == "" {
			t.Errorf("%s lost its schema or description: %+v", c.name, tool.ToolDefinition)
		}
	}
}

func TestAServerWhoseHintsAreNotTrustedKeepsTheDefaultEffect(t *testing.T) {
	src, _ := ledgerSource(t, false)
	tools := listed(t, src, agent.SourcePolicies{DefaultToolEffect: agent.EffectIdempotentWrite,
		ToolPolicies: map[string]agent.Policy{"ledger__note": {Effect: agent.EffectRead}}})
	for name, want := range map[string]agent.Effect{
		"ledger__balance": agent.EffectIdempotentWrite, "ledger__send_payment": agent.EffectIdempotentWrite,
		"ledger__note": agent.EffectRead,
	} {
		if got := tools[name]; got.Policy.Effect != want || got.Ordered {
			t.Errorf("%s: effect %s, ordered %v; want %s, unordered", name, got.Policy.Effect, got.Ordered, want)
		}
	}
}

// events collects what a call writes.
type events struct {
	mu  sync.Mutex
	got []map[string]any
}

func (e *events) WriteEvent(eventType string, payload any) {
	e.mu.Lock()
	defer e.mu.Unlock()
	raw, _ := json.Marshal(payload)
	var m map[string]any
	_ = json.Unmarshal(raw, &m)
	m["type"] = eventType
	e.got = append(e.got, m)
}

func call(t *testing.T, src *Source, tools map[string]agent.SourceTool, name string, ev agent.EventWriter) (string, error) {
	t.Helper()
	tool, ok := tools[name]
	if !ok {
		t.Fatalf("%s was not listed", name)
	}
	ctx := agent.ToolContext{SessionID: "s1", TurnID: "turn-1", ToolCallID: "c1", IdempotencyKey: "s1/turn-1/c1", Attempt: 1, Events: ev}
	out, err := src.CallTool(context.Background(), ctx, agent.SourceCall{Name: name, Reference: tool.Reference, Arguments: `{"note":"x","amount":5}`})
	return out.Output, err
}

func TestACallMapsEachAnswerToItsOutcome(t *testing.T) {
	src, ledger := ledgerSource(t, true)
	tools := listed(t, src, agent.SourcePolicies{})
	const (
		succeeded = "succeeded"
		failed    = "failed"
		unknown   = "outcome_unknown"
		broke     = "interrupted"
	)
	cases := []struct {
		tool, want, text string
	}{
		{"ledger__balance", succeeded, "balance applied s1/turn-1/c1"},
		{"ledger__failing", failed, "account 7 is closed"},
		{"ledger__invalid", failed, "MCP error -32602: amount must be positive"},
		{"ledger__internal", broke, "database unavailable"},
		{"ledger__broken", broke, "ledger__broken"},
		{"ledger__uncertain", unknown, "the payment provider timed out"},
		{"ledger__uncertain_silent", unknown, OutcomeUnknownNoText},
		{"ledger__refused", failed, "MCP error -32603: limit exceeded"},
		{"ledger__statement", succeeded, "statement\n[image 1]\nchart above"},
		{"ledger__gateway", broke, "HTTP 502"},
		{"ledger__gateway_uncertain", unknown, "MCP error -32603: the ledger did not answer"},
		{"ledger__paged", succeeded, "done after step-2"},
		{"ledger__confirm", failed, "the MCP server asked for input that this agent session cannot provide yet (an answer to 'Which account?')"},
	}
	for _, c := range cases {
		t.Run(c.tool, func(t *testing.T) {
			out, err := call(t, src, tools, c.tool, nil)
			var got, text string
			var interrupted *CallInterruptedError
			failure, isFailure := agent.IsExecutionError(err)
			uncertain, isUncertain := agent.IsOutcomeUnknown(err)
			switch {
			case err == nil:
				got, text = succeeded, out
			case isFailure:
				got, text = failed, failure.Message
			case isUncertain:
				got, text = unknown, uncertain.Message
			case errors.As(err, &interrupted):
				got, text = broke, err.Error()
			default:
				got, text = "other", err.Error()
			}
			if got != c.want || !strings.Contains(text, c.text) {
				t.Errorf("%s: %s %q, want %s with %q", c.tool, got, text, c.want, c.text)
			}
		})
	}
	if calls := ledger.CallsOf("balance"); len(calls) != 1 || calls[0].IdempotencyKey != "s1/turn-1/c1" {
		t.Errorf("balance calls = %+v, want one with the session's idempotency key", calls)
	}
}

func TestAResultWithTheOutcomeKeyAndImagesOmitsTheImages(t *testing.T) {
	res := &mcp.CallToolResult{IsError: true, Meta: mcp.Meta{OutcomeMetaKey: "rejected"}, Content: []mcp.Content{
		&mcp.ImageContent{Data: []byte("x"), MIMEType: "image/png"}, &mcp.TextContent{Text: "declined"},
		&mcp.ImageContent{Data: []byte("y"), MIMEType: "image/png"},
	}}
	_, err := callResult(context.Background(), Server{}, res)
	if e, ok := agent.IsExecutionError(err); !ok || e.Message != "[image 1 omitted]\ndeclined\n[image 2 omitted]" {
		t.Errorf("err = %v", err)
	}
	res.Meta[OutcomeMetaKey] = "reserved-value"
	res.IsError = false
	if out, err := callResult(context.Background(), Server{}, res); err != nil || out.Output != "[image 1]\ndeclined\n[image 2]" {
		t.Errorf("a reserved outcome value: %q, %v; want the result as a success", out.Output, err)
	}
}

func TestARetriedCallCarriesTheSameKeyAndTheFenceAnswersIt(t *testing.T) {
	src, ledger := ledgerSource(t, true)
	tools := listed(t, src, agent.SourcePolicies{})
	first, err := call(t, src, tools, "ledger__set_limit", nil)
	if err != nil {
		t.Fatal(err)
	}
	second, err := call(t, src, tools, "ledger__set_limit", nil)
	if err != nil || second != first {
		t.Fatalf("the retry got %q, %v; want the first result %q", second, err, first)
	}
	calls := ledger.CallsOf("set_limit")
	if len(calls) != 2 || !calls[0].Applied || calls[1].Applied || calls[1].IdempotencyKey != calls[0].IdempotencyKey {
		t.Errorf("calls = %+v, want the second answered by the fence", calls)
	}
}

func TestProgressNotificationsBecomeToolProgressEvents(t *testing.T) {
	src, _ := ledgerSource(t, true)
	tools := listed(t, src, agent.SourcePolicies{})
	ev := &events{}
	if _, err := call(t, src, tools, "ledger__statement", ev); err != nil {
		t.Fatal(err)
	}
	if len(ev.got) != 2 {
		t.Fatalf("events = %v, want two progress events", ev.got)
	}
	for i, e := range ev.got {
		if e["type"] != ToolProgressEvent || e["tool_call_id"] != "c1" || e["tool_name"] != "ledger__statement" ||
			e["progress"] != float64(i+1) || e["total"] != float64(2) || e["message"] != "page "+string(rune('1'+i)) {
			t.Errorf("event %d = %v", i, e)
		}
	}
}

func TestACallThatCannotBeSentFailsAsNotRun(t *testing.T) {
	src, _ := ledgerSource(t, true)
	tools := listed(t, src, agent.SourcePolicies{})
	ref := tools["ledger__balance"].Reference
	// A stored call naming a server this worker does not configure.
	_, err := src.CallTool(context.Background(), agent.ToolContext{}, agent.SourceCall{
		Name: "gone__balance", Reference: strings.Replace(ref, `"ledger"`, `"gone"`, 1), Arguments: "{}"})
	if e, ok := agent.IsExecutionError(err); !ok || !strings.HasPrefix(e.Message, session.ToolCallNotRunPrefix) {
		t.Errorf("unconfigured server: %v", err)
	}
	// A server that cannot be reached.
	closed := httptest.NewServer(nil)
	closed.Close()
	down, err := NewSource(SourceOptions{Name: "down", Log: quiet(), Servers: []Server{{
		Name: "down", ConnectionTimeout: time.Second, Connect: HTTPConnect(closed.URL, nil)}}})
	if err != nil {
		t.Fatal(err)
	}
	_, err = down.CallTool(context.Background(), agent.ToolContext{}, agent.SourceCall{
		Name: "down__balance", Reference: `{"server":"down","tool":"balance"}`, Arguments: "{}"})
	if e, ok := agent.IsExecutionError(err); !ok || !strings.HasPrefix(e.Message, session.ToolCallNotRunPrefix) ||
		!strings.Contains(e.Message, "3 connection attempts failed") {
		t.Errorf("unreachable server: %v", err)
	}
}

func TestResourceAndPromptToolsReadAServer(t *testing.T) {
	server := mcp.NewServer(&mcp.Implementation{Name: "docs", Version: "1"}, nil)
	server.AddResource(&mcp.Resource{URI: "docs://guide", Name: "guide", MIMEType: "text/plain"},
		func(context.Context, *mcp.ReadResourceRequest) (*mcp.ReadResourceResult, error) {
			return &mcp.ReadResourceResult{Contents: []*mcp.ResourceContents{{URI: "docs://guide", Text: "read <me>"}}}, nil
		})
	server.AddPrompt(&mcp.Prompt{Name: "greet", Arguments: []*mcp.PromptArgument{{Name: "who"}}},
		func(_ context.Context, req *mcp.GetPromptRequest) (*mcp.GetPromptResult, error) {
			return &mcp.GetPromptResult{Description: "a greeting", Messages: []*mcp.PromptMessage{
				{Role: "user", Content: &mcp.TextContent{Text: "hello " + req.Params.Arguments["who"]}}}}, nil
		})
	src, err := NewSource(SourceOptions{Name: "docs", ResourceAndPromptTools: true, Log: quiet(), Servers: []Server{{
		Name: "docs", Connect: func() (mcp.Transport, error) {
			client, srv := mcp.NewInMemoryTransports()
			if _, err := server.Connect(context.Background(), srv, nil); err != nil {
				return nil, err
			}
			return client, nil
		}}}})
	if err != nil {
		t.Fatal(err)
	}
	tools := listed(t, src, agent.SourcePolicies{})
	for _, name := range src.DeclaredToolNames() {
		if tools[name].Policy.Effect != agent.EffectRead || tools[name].Policy.ApprovalRequired() {
			t.Errorf("%s: %+v, want a read without approval", name, tools[name].Policy)
		}
	}
	run := func(name, args string) string {
		t.Helper()
		out, err := src.CallTool(context.Background(), agent.ToolContext{}, agent.SourceCall{Name: name, Reference: tools[name].Reference, Arguments: args})
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		return out.Output
	}
	if got := run(ListResourcesAndPromptsTool, `{"server":"docs"}`); !strings.Contains(got, `"prompts":[{"arguments":[{"name":"who"}],"name":"greet"}]`) ||
		!strings.Contains(got, `"resource_templates":[]`) || !strings.Contains(got, `"uri":"docs://guide"`) {
		t.Errorf("list = %s", got)
	}
	if got := run(ReadResourceTool, `{"server":"docs","uri":"docs://guide"}`); got != `{"contents":[{"mimeType":"text/plain","text":"read <me>","uri":"docs://guide"}]}` {
		t.Errorf("read = %s", got)
	}
	if got := run(GetPromptTool, `{"server":"docs","name":"greet","arguments":{"who":"ada"}}`); got != `{"description":"a greeting","messages":[{"content":{"text":"hello ada","type":"text"},"role":"user"}]}` {
		t.Errorf("prompt = %s", got)
	}
	_, err = src.CallTool(context.Background(), agent.ToolContext{}, agent.SourceCall{
		Name: ReadResourceTool, Reference: tools[ReadResourceTool].Reference, Arguments: `{"server":"other","uri":"x"}`})
	if e, ok := agent.IsExecutionError(err); !ok || !strings.Contains(e.Message, `"other" is not a configured MCP server`) {
		t.Errorf("an unconfigured server: %v", err)
	}
}

func TestACallPastItsRequestTimeoutIsInterrupted(t *testing.T) {
	src, ledger := ledgerSource(t, true)
	tools := listed(t, src, agent.SourcePolicies{})
	src.servers[0].RequestTimeout = 200 * time.Millisecond
	ledger.Hold("set_limit")
	defer ledger.Release("set_limit")
	_, err := call(t, src, tools, "ledger__set_limit", nil)
	var interrupted *CallInterruptedError
	if !errors.As(err, &interrupted) || !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("err = %v, want an interruption past the request timeout", err)
	}
	if calls := ledger.CallsOf("set_limit"); len(calls) != 1 {
		t.Errorf("calls = %+v, want the one that was sent", calls)
	}
}

func TestACallCarriesTheCurrentSpanInMeta(t *testing.T) {
	src, ledger := ledgerSource(t, true)
	tools := listed(t, src, agent.SourcePolicies{})
	const traceparent = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
	ctx := tracing.ContextWithParent(context.Background(), traceparent)
	tc := agent.ToolContext{SessionID: "s1", TurnID: "turn-1", ToolCallID: "c2", IdempotencyKey: "s1/turn-1/c2", Attempt: 1, Events: &events{}}
	if _, err := src.CallTool(ctx, tc, agent.SourceCall{Name: "ledger__quote", Reference: tools["ledger__quote"].Reference, Arguments: `{"note":"x"}`}); err != nil {
		t.Fatal(err)
	}
	if _, err := src.CallTool(context.Background(), tc, agent.SourceCall{Name: "ledger__audit", Reference: tools["ledger__audit"].Reference, Arguments: `{"note":"x"}`}); err != nil {
		t.Fatal(err)
	}
	if calls := ledger.CallsOf("quote"); len(calls) != 1 || calls[0].Traceparent != traceparent {
		t.Errorf("quote calls = %+v, want the traceparent %s in _meta", calls, traceparent)
	}
	if calls := ledger.CallsOf("audit"); len(calls) != 1 || calls[0].Traceparent != "" {
		t.Errorf("audit calls = %+v, want no traceparent without a current span", calls)
	}
}
