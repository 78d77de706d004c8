package responses

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
	"github.com/stepwise-run/stepwise/pkg/agent"
)

const testKey = "sk-test-do-not-leak-4242"

func newServer(t *testing.T, responses ...modeltest.Response) (*modeltest.Server, *Client) {
	s := modeltest.NewServer(t, "/v1/responses", responses...)
	return s, New(Config{BaseURL: s.URL + "/v1", Model: "gpt-5-mini", APIKey: func() (string, error) { return testKey, nil }})
}

var events = modeltest.Events

const (
	reasoningItem = `{"id":"rs_1","type":"reasoning","summary":[{"type":"summary_text","text":"Thinking"}],"encrypted_content":"gAAAAABo+opaque/bytes=="}`
	messageItem   = `{"id":"msg_1","type":"message","status":"completed","role":"assistant","content":[{"type":"output_text","text":"Hello","annotations":[]}]}`
	callA         = `{"id":"fc_a","type":"function_call","status":"completed","call_id":"call_a","name":"lookup_order","arguments":"{\"order_id\":\"7\"}"}`
	callB         = `{"id":"fc_b","type":"function_call","status":"completed","call_id":"call_b","name":"lookup_order","arguments":"{\"order_id\":\"8\"}"}`
	completed     = `{"type":"response.completed","sequence_number":9,"response":{"id":"resp_1","object":"response","created_at":1,"status":"completed","model":"gpt-5-mini-2026","output":[],"usage":{"input_tokens":20,"input_tokens_details":{"cached_tokens":3},"output_tokens":9,"output_tokens_details":{"reasoning_tokens":5},"total_tokens":29}}}`
)

func itemDone(i int, item string) string {
	return fmt.Sprintf(`{"type":"response.output_item.done","output_index":%d,"sequence_number":%d,"item":%s}`, i, i+1, item)
}

type deltas struct{ text, reasoning []string }

func (d *deltas) TextDelta(t string)      { d.text = append(d.text, t) }
func (d *deltas) ReasoningDelta(t string) { d.reasoning = append(d.reasoning, t) }

var lookupTool = agent.ToolDefinition{Name: "lookup_order", Description: "Look up an order.",
	Parameters: json.RawMessage(`{"type":"object","properties":{"order_id":{"type":"string"}},"required":["order_id"]}`)}

func TestAnAnswerWithReasoningIsKeptExactlyAndReplayedUnchanged(t *testing.T) {
	s, c := newServer(t, events(
		`{"type":"response.reasoning_summary_text.delta","item_id":"rs_1","output_index":0,"summary_index":0,"delta":"Thinking","sequence_number":1}`,
		itemDone(0, reasoningItem),
		`{"type":"response.output_text.delta","item_id":"msg_1","output_index":1,"content_index":0,"delta":"Hello","sequence_number":3}`,
		itemDone(1, messageItem),
		completed,
	))
	var d deltas
	req := agent.ModelRequest{Instructions: "Be brief.", Input: []agent.Message{{Role: agent.RoleUser, Text: "Hi"}},
		Settings: agent.ModelSettings{MaxOutputTokens: 300, ReasoningEffort: "low"}}
	resp, err := c.CallModel(context.Background(), req, &d)
	if err != nil {
		t.Fatal(err)
	}
	var want map[string]any
	_ = json.Unmarshal([]byte(`{"model":"gpt-5-mini","store":false,"include":["reasoning.encrypted_content"],"instructions":"Be brief.",
		"max_output_tokens":300,"reasoning":{"effort":"low"},"stream":true,"input":[{"role":"user","content":"Hi"}]}`), &want)
	if got := s.Body(0); !reflect.DeepEqual(got, want) {
		t.Errorf("request = %s\nwant %v", s.Raw(0), want)
	}
	if s.Key(0) != "Bearer "+testKey {
		t.Errorf("Authorization = %q", s.Key(0))
	}
	if resp.Text() != "Hello" || strings.Join(d.text, "") != "Hello" || strings.Join(d.reasoning, "") != "Thinking" {
		t.Errorf("text %q, deltas %v / %v", resp.Text(), d.text, d.reasoning)
	}
	if len(resp.Output) != 2 || string(resp.Output[0].Item) != reasoningItem || string(resp.Output[1].Item) != messageItem {
		t.Fatalf("output items are not the provider's bytes: %+v", resp.Output)
	}
	wantUsage := agent.Usage{ModelCalls: 1, InputTokens: 20, OutputTokens: 9, CachedInputTokens: 3, ReasoningTokens: 5}
	if resp.Usage != wantUsage || resp.Metadata.ResponseID != "resp_1" || resp.Metadata.ResponseModel != "gpt-5-mini-2026" {
		t.Errorf("usage %+v, metadata %+v", resp.Usage, resp.Metadata)
	}

	req.Input = append(req.Input, agent.Message{Role: agent.RoleAssistant, Text: resp.Text(), Output: resp.Output},
		agent.Message{Role: agent.RoleUser, Text: "And?"})
	if _, err := c.CallModel(context.Background(), req, &d); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(s.Raw(1), `"input":[{"content":"Hi","role":"user"},`+reasoningItem+`,`+messageItem+`,{"content":"And?","role":"user"}]`) {
		t.Errorf("the next request does not replay the items byte for byte:\n%s", s.Raw(1))
	}
}

func TestParallelFunctionCallsAndTheirResults(t *testing.T) {
	s, c := newServer(t,
		events(itemDone(0, callA), itemDone(1, callB), completed),
		events(itemDone(0, messageItem), completed),
	)
	req := agent.ModelRequest{Input: []agent.Message{{Role: agent.RoleUser, Text: "Orders 7 and 8?"}},
		Tools: []agent.ToolDefinition{lookupTool}, ToolChoice: agent.ToolChoiceAuto}
	resp, err := c.CallModel(context.Background(), req, nil)
	if err != nil {
		t.Fatal(err)
	}
	want := []agent.ToolCall{{ID: "call_a", Name: "lookup_order", Arguments: `{"order_id":"7"}`}, {ID: "call_b", Name: "lookup_order", Arguments: `{"order_id":"8"}`}}
	if !reflect.DeepEqual(resp.ToolCalls(), want) {
		t.Fatalf("tool calls = %+v", resp.ToolCalls())
	}
	var wantTools any
	_ = json.Unmarshal([]byte(`[{"type":"function","name":"lookup_order","description":"Look up an order.","strict":false,
		"parameters":{"type":"object","properties":{"order_id":{"type":"string"}},"required":["order_id"]}}]`), &wantTools)
	if got := s.Body(0); !reflect.DeepEqual(got["tools"], wantTools) || got["tool_choice"] != "auto" {
		t.Errorf("tools = %v, tool_choice = %v", got["tools"], got["tool_choice"])
	}
	req.Input = append(req.Input,
		agent.Message{Role: agent.RoleAssistant, ToolCalls: resp.ToolCalls(), Output: resp.Output},
		agent.Message{Role: agent.RoleTool, ToolCallID: "call_a", Text: "shipped"},
		agent.Message{Role: agent.RoleTool, ToolCallID: "call_b", Text: "delivered"})
	if _, err := c.CallModel(context.Background(), req, nil); err != nil {
		t.Fatal(err)
	}
	wantInput := `"input":[{"content":"Orders 7 and 8?","role":"user"},` + callA + `,` + callB +
		`,{"output":"shipped","call_id":"call_a","type":"function_call_output"},{"output":"delivered","call_id":"call_b","type":"function_call_output"}]`
	if !strings.Contains(s.Raw(1), wantInput) {
		t.Errorf("replayed input:\n%s\nwant it to contain\n%s", s.Raw(1), wantInput)
	}
}

func TestAnotherProvidersAnswerReplaysAsTextAndToolCallsWithoutReasoning(t *testing.T) {
	s, c := newServer(t, events(itemDone(0, messageItem), completed))
	other := agent.Message{Role: agent.RoleAssistant, Text: "Let me look.",
		ToolCalls: []agent.ToolCall{{ID: "toolu_1", Name: "lookup_order", Arguments: `{"order_id":"7"}`}},
		Output: []agent.OutputItem{
			{Provider: "anthropic", API: "messages", Type: agent.OutputReasoning, Text: "secret thinking", Item: json.RawMessage(`{"type":"thinking","thinking":"secret thinking","signature":"sig"}`)},
			{Provider: "anthropic", API: "messages", Type: agent.OutputText, Text: "Let me look."},
		}}
	_, err := c.CallModel(context.Background(), agent.ModelRequest{Input: []agent.Message{
		{Role: agent.RoleUser, Text: "Order 7?"}, other, {Role: agent.RoleTool, ToolCallID: "toolu_1", Text: "shipped"},
	}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(s.Raw(0), "secret thinking") || strings.Contains(s.Raw(0), "signature") {
		t.Errorf("another provider's reasoning was sent: %s", s.Raw(0))
	}
	input, _ := json.Marshal(s.Body(0)["input"])
	var got, want any
	_ = json.Unmarshal(input, &got)
	_ = json.Unmarshal([]byte(`[{"role":"user","content":"Order 7?"},{"role":"assistant","content":"Let me look."},
		{"type":"function_call","call_id":"toolu_1","name":"lookup_order","arguments":"{\"order_id\":\"7\"}"},
		{"type":"function_call_output","call_id":"toolu_1","output":"shipped"}]`), &want)
	if !reflect.DeepEqual(got, want) {
		t.Errorf("input = %s", input)
	}
}

func failing(status int, header map[string]string, message string) modeltest.Response {
	return modeltest.Failing(status, header, fmt.Sprintf(`{"error":{"message":%q,"type":"invalid_request_error","param":null,"code":null}}`, message))
}

func TestFailuresBecomeModelErrorsThatNameTheProviderAndNeverTheKey(t *testing.T) {
	for _, tc := range []struct {
		name       string
		respond    modeltest.Response
		status     int
		retryable  bool
		retryAfter time.Duration
	}{
		{"rate limited", failing(http.StatusTooManyRequests, map[string]string{"Retry-After": "12"}, "slow down"), 429, true, 12 * time.Second},
		{"server error", failing(http.StatusInternalServerError, nil, "boom"), 500, true, 0},
		{"bad key", failing(http.StatusUnauthorized, nil, "Incorrect API key provided"), 401, false, 0},
		{"not found", failing(http.StatusNotFound, nil, "no such model"), 404, false, 0},
		{"stream cut mid-answer", events(`{"type":"response.output_text.delta","item_id":"msg_1","output_index":0,"content_index":0,"delta":"Hal","sequence_number":1}`), 0, true, 0},
		{"response failed", events(`{"type":"response.failed","sequence_number":1,"response":{"id":"resp_1","status":"failed","error":{"code":"server_error","message":"overloaded"}}}`), 0, true, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, c := newServer(t, tc.respond)
			_, err := c.CallModel(context.Background(), agent.ModelRequest{Input: []agent.Message{{Role: agent.RoleUser, Text: "Hi"}}}, nil)
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
