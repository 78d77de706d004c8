package chatcompletions

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/stepwise-run/stepwise/internal/model/modeltest"
	"github.com/stepwise-run/stepwise/internal/tracing"
	"github.com/stepwise-run/stepwise/pkg/agent"
)

const testKey = "sk-test-do-not-leak-4242"

func newServer(t *testing.T, responses ...modeltest.Response) (*modeltest.Server, *Client) {
	s := modeltest.NewServer(t, "/v1/chat/completions", responses...)
	return s, New(Config{BaseURL: s.URL + "/v1", Model: "qwen3", APIKey: func() (string, error) { return testKey, nil }})
}

// sse answers with chunks, then [DONE] unless the stream is cut.
func sse(chunks []string, done bool) modeltest.Response {
	if done {
		chunks = append(chunks, "[DONE]")
	}
	return modeltest.Events(chunks...)
}

func chunk(delta string, finish string) string {
	f := "null"
	if finish != "" {
		f = `"` + finish + `"`
	}
	return `{"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"qwen3-2026","choices":[{"index":0,"delta":` + delta + `,"finish_reason":` + f + `}]}`
}

const usageChunk = `{"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"qwen3-2026","choices":[],"usage":{"prompt_tokens":31,"completion_tokens":7,"total_tokens":38,"prompt_tokens_details":{"cached_tokens":4},"completion_tokens_details":{"reasoning_tokens":2}}}`

func failing(status int, header map[string]string, message string) modeltest.Response {
	return modeltest.Failing(status, header, fmt.Sprintf(`{"error":{"message":%q,"type":"invalid_request_error","param":null,"code":null}}`, message))
}

type deltas struct{ text, reasoning []string }

func (d *deltas) TextDelta(t string)      { d.text = append(d.text, t) }
func (d *deltas) ReasoningDelta(t string) { d.reasoning = append(d.reasoning, t) }

func mustJSON(t *testing.T, s string) any {
	t.Helper()
	var v any
	if err := json.Unmarshal([]byte(s), &v); err != nil {
		t.Fatalf("bad JSON in test: %v\n%s", err, s)
	}
	return v
}

var lookupTool = agent.ToolDefinition{Name: "lookup_order", Description: "Look up an order.",
	Parameters: json.RawMessage(`{"type":"object","properties":{"order_id":{"type":"string"}},"required":["order_id"]}`)}

func TestATextAnswerStreamsAndReportsUsage(t *testing.T) {
	s, c := newServer(t, sse([]string{
		chunk(`{"role":"assistant","content":"Hel"}`, ""),
		chunk(`{"content":"lo","reasoning_content":"thinking"}`, ""),
		chunk(`{}`, "stop"),
		usageChunk,
	}, true))
	var d deltas
	resp, err := c.CallModel(context.Background(), agent.ModelRequest{
		Instructions: "Be brief.",
		Input:        []agent.Message{{Role: agent.RoleUser, Text: "Hi"}},
		Settings:     agent.ModelSettings{MaxOutputTokens: 256},
	}, &d)
	if err != nil {
		t.Fatal(err)
	}
	want := mustJSON(t, `{"model":"qwen3","stream":true,"stream_options":{"include_usage":true},"max_completion_tokens":256,
		"messages":[{"role":"system","content":"Be brief."},{"role":"user","content":"Hi"}]}`)
	if !reflect.DeepEqual(s.Body(0), want) {
		t.Errorf("request body = %v\nwant %v", s.Body(0), want)
	}
	if s.Key(0) != "Bearer "+testKey {
		t.Errorf("Authorization = %q", s.Key(0))
	}
	if resp.Text() != "Hello" || strings.Join(d.text, "|") != "Hel|lo" || strings.Join(d.reasoning, "") != "thinking" {
		t.Errorf("text = %q, deltas = %v, reasoning = %v", resp.Text(), d.text, d.reasoning)
	}
	wantUsage := agent.Usage{ModelCalls: 1, InputTokens: 31, OutputTokens: 7, CachedInputTokens: 4, ReasoningTokens: 2}
	if resp.Usage != wantUsage {
		t.Errorf("usage = %+v, want %+v", resp.Usage, wantUsage)
	}
	if m := resp.Metadata; m.ResponseID != "chatcmpl-1" || m.ResponseModel != "qwen3-2026" || m.RequestModel != "qwen3" ||
		m.Provider != Provider || !reflect.DeepEqual(m.FinishReasons, []string{"stop"}) {
		t.Errorf("metadata = %+v", m)
	}
}

func TestParallelToolCallsAndTheirReplay(t *testing.T) {
	s, c := newServer(t,
		sse([]string{
			chunk(`{"role":"assistant","tool_calls":[{"index":0,"id":"call_a","type":"function","function":{"name":"lookup_order","arguments":""}}]}`, ""),
			chunk(`{"tool_calls":[{"index":1,"id":"call_b","type":"function","function":{"name":"lookup_order","arguments":"{\"order_id\":"}}]}`, ""),
			chunk(`{"tool_calls":[{"index":0,"function":{"arguments":"{\"order_id\":\"7\"}"}}]}`, ""),
			chunk(`{"tool_calls":[{"index":1,"function":{"arguments":"\"8\"}"}}]}`, ""),
			chunk(`{}`, "tool_calls"),
		}, true),
		sse([]string{chunk(`{"content":"Both found."}`, "stop")}, true),
	)
	req := agent.ModelRequest{
		Input: []agent.Message{{Role: agent.RoleUser, Text: "Orders 7 and 8?"}},
		Tools: []agent.ToolDefinition{lookupTool}, ToolChoice: agent.ToolChoiceAuto,
	}
	resp, err := c.CallModel(context.Background(), req, &deltas{})
	if err != nil {
		t.Fatal(err)
	}
	calls := resp.ToolCalls()
	want := []agent.ToolCall{{ID: "call_a", Name: "lookup_order", Arguments: `{"order_id":"7"}`}, {ID: "call_b", Name: "lookup_order", Arguments: `{"order_id":"8"}`}}
	if !reflect.DeepEqual(calls, want) {
		t.Fatalf("tool calls = %+v", calls)
	}
	wantTools := mustJSON(t, `[{"type":"function","function":{"name":"lookup_order","description":"Look up an order.",
		"parameters":{"type":"object","properties":{"order_id":{"type":"string"}},"required":["order_id"]}}}]`)
	if !reflect.DeepEqual(s.Body(0)["tools"], wantTools) || s.Body(0)["tool_choice"] != "auto" {
		t.Errorf("tools = %v, tool_choice = %v", s.Body(0)["tools"], s.Body(0)["tool_choice"])
	}

	// The next call sends the whole input again: the answer with its calls,
	// then each result.
	req.Input = append(req.Input,
		agent.Message{Role: agent.RoleAssistant, ToolCalls: calls, Output: resp.Output},
		agent.Message{Role: agent.RoleTool, ToolCallID: "call_a", ToolName: "lookup_order", Text: "shipped"},
		agent.Message{Role: agent.RoleTool, ToolCallID: "call_b", ToolName: "lookup_order", Text: "delivered"},
	)
	if _, err := c.CallModel(context.Background(), req, &deltas{}); err != nil {
		t.Fatal(err)
	}
	wantMessages := mustJSON(t, `[{"role":"user","content":"Orders 7 and 8?"},
		{"role":"assistant","tool_calls":[
			{"id":"call_a","type":"function","function":{"name":"lookup_order","arguments":"{\"order_id\":\"7\"}"}},
			{"id":"call_b","type":"function","function":{"name":"lookup_order","arguments":"{\"order_id\":\"8\"}"}}]},
		{"role":"tool","tool_call_id":"call_a","content":"shipped"},
		{"role":"tool","tool_call_id":"call_b","content":"delivered"}]`)
	if !reflect.DeepEqual(s.Body(1)["messages"], wantMessages) {
		got, _ := json.Marshal(s.Body(1)["messages"])
		t.Errorf("replayed messages = %s", got)
	}
}

func TestFailuresBecomeModelErrorsThatNameTheProviderAndNeverTheKey(t *testing.T) {
	for _, tc := range []struct {
		name       string
		respond    modeltest.Response
		status     int
		retryable  bool
		retryAfter time.Duration
	}{
		{"rate limited", failing(http.StatusTooManyRequests, map[string]string{"Retry-After": "7"}, "slow down"), 429, true, 7 * time.Second},
		{"server error", failing(http.StatusInternalServerError, nil, "boom"), 500, true, 0},
		{"bad key", failing(http.StatusUnauthorized, nil, "Incorrect API key provided: "+testKey[:6]+"***"), 401, false, 0},
		{"bad request", failing(http.StatusBadRequest, nil, "bad tools"), 400, false, 0},
		{"stream cut mid-answer", sse([]string{chunk(`{"content":"Hal"}`, "")}, false), 0, true, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, c := newServer(t, tc.respond)
			_, err := c.CallModel(context.Background(), agent.ModelRequest{Input: []agent.Message{{Role: agent.RoleUser, Text: "Hi"}}}, &deltas{})
			var me *agent.ModelError
			if !errors.As(err, &me) {
				t.Fatalf("error = %v, want a ModelError", err)
			}
			if me.StatusCode != tc.status || me.Retryable != tc.retryable || me.RetryAfter != tc.retryAfter || me.Provider != Provider {
				t.Errorf("ModelError = %+v", me)
			}
			if strings.Contains(err.Error(), testKey) || !strings.Contains(err.Error(), Provider) {
				t.Errorf("error %q leaks the key or does not name the provider", err)
			}
		})
	}
}

// Servers that send no tool call IDs, or repeat one, get IDs made from the
// turn, the model call and the position: the same on a retried call, and
// the same in the replayed item.
func TestEmptyAndRepeatedToolCallIDsAreMadeUsableTheSameWayOnEveryAttempt(t *testing.T) {
	stream := sse([]string{
		chunk(`{"role":"assistant","tool_calls":[{"index":0,"id":"","type":"function","function":{"name":"lookup_order","arguments":"{\"order_id\":\"7\"}"}}]}`, ""),
		chunk(`{"tool_calls":[{"index":1,"id":"call_0","type":"function","function":{"name":"lookup_order","arguments":"{\"order_id\":\"8\"}"}}]}`, ""),
		chunk(`{"tool_calls":[{"index":2,"id":"call_0","type":"function","function":{"name":"lookup_order","arguments":"{\"order_id\":\"9\"}"}}]}`, ""),
		chunk(`{}`, "tool_calls"),
	}, true)
	_, c := newServer(t, stream, stream)
	req := agent.ModelRequest{
		TurnID: "turn-4", ModelCall: 2,
		Input: []agent.Message{{Role: agent.RoleUser, Text: "Orders 7, 8 and 9?"}},
		Tools: []agent.ToolDefinition{lookupTool}, ToolChoice: agent.ToolChoiceAuto,
	}
	want := []string{"call_turn-4_2_0", "call_0", "call_turn-4_2_2"}
	for attempt := 1; attempt <= 2; attempt++ {
		resp, err := c.CallModel(context.Background(), req, &deltas{})
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for i, call := range resp.ToolCalls() {
			got = append(got, call.ID)
			var item struct {
				ID string `json:"id"`
			}
			if err := json.Unmarshal(resp.Output[i].Item, &item); err != nil || item.ID != call.ID {
				t.Errorf("attempt %d: output item %d carries ID %q, want %q", attempt, i, item.ID, call.ID)
			}
		}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("attempt %d: IDs = %v, want %v", attempt, got, want)
		}
	}
}

func TestARequestCarriesTheActivationsTraceContext(t *testing.T) {
	s, c := newServer(t, sse([]string{chunk(`{"role":"assistant","content":"Hi"}`, "stop"), usageChunk}, true))
	const traceparent = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
	req := agent.ModelRequest{Input: []agent.Message{{Role: agent.RoleUser, Text: "Hi"}}}
	if _, err := c.CallModel(tracing.ContextWithParent(context.Background(), traceparent), req, &deltas{}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.CallModel(context.Background(), req, &deltas{}); err != nil {
		t.Fatal(err)
	}
	if got := s.Traceparent(0); got != traceparent {
		t.Errorf("traceparent = %q, want %q", got, traceparent)
	}
	if got := s.Traceparent(1); got != "" {
		t.Errorf("a call without a span sent traceparent %q", got)
	}
}
