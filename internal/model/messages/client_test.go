package messages

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/http"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/stepwise-run/stepwise/internal/model/modeltest"
	"github.com/stepwise-run/stepwise/internal/tracing"
	"github.com/stepwise-run/stepwise/pkg/agent"
)

const testKey = "sk-ant-test-do-not-leak-4242"

func newServer(t *testing.T, responses ...modeltest.Response) (*modeltest.Server, *Client) {
	s := modeltest.NewServer(t, "/v1/messages", responses...)
	return s, New(Config{BaseURL: s.URL, Model: "claude-sonnet-5", APIKey: func() (string, error) { return testKey, nil }})
}

var events = modeltest.Events

const (
	messageStart  = `{"type":"message_start","message":{"id":"msg_1","type":"message","role":"assistant","model":"claude-sonnet-5-2026","content":[],"stop_reason":null,"stop_sequence":null,"usage":{"input_tokens":25,"cache_read_input_tokens":5,"cache_creation_input_tokens":0,"output_tokens":1}}}`
	messageStop   = `{"type":"message_stop"}`
	thinkingBlock = `{"signature":"EqQBCgIYAhIM+sig==","thinking":"Let me think","type":"thinking"}`
)

func start(i int, block string) string {
	return fmt.Sprintf(`{"type":"content_block_start","index":%d,"content_block":%s}`, i, block)
}

func delta(i int, d string) string {
	return fmt.Sprintf(`{"type":"content_block_delta","index":%d,"delta":%s}`, i, d)
}

func stop(i int) string { return fmt.Sprintf(`{"type":"content_block_stop","index":%d}`, i) }

func messageDelta(reason string, out int) string {
	return fmt.Sprintf(`{"type":"message_delta","delta":{"stop_reason":%q,"stop_sequence":null},"usage":{"output_tokens":%d}}`, reason, out)
}

type deltas struct{ text, reasoning []string }

func (d *deltas) TextDelta(t string)      { d.text = append(d.text, t) }
func (d *deltas) ReasoningDelta(t string) { d.reasoning = append(d.reasoning, t) }

var lookupTool = agent.ToolDefinition{Name: "lookup_order", Description: "Look up an order.",
	Parameters: json.RawMessage(`{"type":"object","properties":{"order_id":{"type":"string"}},"required":["order_id"]}`)}

var thinkingAndTool = events(messageStart,
	start(0, `{"type":"thinking","thinking":"","signature":""}`),
	delta(0, `{"type":"thinking_delta","thinking":"Let me "}`),
	delta(0, `{"type":"thinking_delta","thinking":"think"}`),
	delta(0, `{"type":"signature_delta","signature":"EqQBCgIYAhIM+sig=="}`),
	stop(0),
	start(1, `{"type":"text","text":""}`),
	delta(1, `{"type":"text_delta","text":"Looking it up."}`),
	stop(1),
	start(2, `{"type":"tool_use","id":"toolu_1","name":"lookup_order","input":{}}`),
	delta(2, `{"type":"input_json_delta","partial_json":"{\"order_id\":"}`),
	delta(2, `{"type":"input_json_delta","partial_json":"\"7\"}"}`),
	stop(2),
	start(3, `{"type":"tool_use","id":"toolu_2","name":"lookup_order","input":{}}`),
	delta(3, `{"type":"input_json_delta","partial_json":"{\"order_id\":\"8\"}"}`),
	stop(3),
	messageDelta("tool_use", 42),
	messageStop,
)

func TestThinkingAndParallelToolUseAreKeptAndReplayedWithTheirSignature(t *testing.T) {
	s, c := newServer(t, thinkingAndTool, events(messageStart, start(0, `{"type":"text","text":""}`),
		delta(0, `{"type":"text_delta","text":"Both shipped."}`), stop(0), messageDelta("end_turn", 5), messageStop))
	var d deltas
	req := agent.ModelRequest{Instructions: "Be brief.", Input: []agent.Message{{Role: agent.RoleUser, Text: "Orders 7 and 8?"}},
		Tools: []agent.ToolDefinition{lookupTool}, ToolChoice: agent.ToolChoiceAuto}
	resp, err := c.CallModel(context.Background(), req, &d)
	if err != nil {
		t.Fatal(err)
	}
	var want map[string]any
	_ = json.Unmarshal([]byte(`{"model":"claude-sonnet-5","max_tokens":8192,"stream":true,
		"system":[{"type":"text","text":"Be brief."}],
		"messages":[{"role":"user","content":[{"type":"text","text":"Orders 7 and 8?"}]}],
		"tools":[{"name":"lookup_order","description":"Look up an order.","input_schema":{"type":"object","properties":{"order_id":{"type":"string"}},"required":["order_id"]}}]}`), &want)
	if got := s.Body(0); !reflect.DeepEqual(got, want) {
		t.Errorf("request = %s", s.Raw(0))
	}
	if !strings.Contains(s.Key(0), testKey) {
		t.Errorf("the request carried no key: %q", s.Key(0))
	}
	if strings.Join(d.reasoning, "") != "Let me think" || strings.Join(d.text, "") != "Looking it up." {
		t.Errorf("deltas = %v / %v", d.reasoning, d.text)
	}
	if string(resp.Output[0].Item) != thinkingBlock || resp.Output[0].Type != agent.OutputReasoning {
		t.Errorf("thinking item = %s", resp.Output[0].Item)
	}
	wantCalls := []agent.ToolCall{{ID: "toolu_1", Name: "lookup_order", Arguments: `{"order_id":"7"}`}, {ID: "toolu_2", Name: "lookup_order", Arguments: `{"order_id":"8"}`}}
	if !reflect.DeepEqual(resp.ToolCalls(), wantCalls) {
		t.Errorf("tool calls = %+v", resp.ToolCalls())
	}
	if u := resp.Usage; u != (agent.Usage{ModelCalls: 1, InputTokens: 30, CachedInputTokens: 5, OutputTokens: 42}) {
		t.Errorf("usage = %+v", u)
	}
	if m := resp.Metadata; m.ResponseID != "msg_1" || m.ResponseModel != "claude-sonnet-5-2026" || !reflect.DeepEqual(m.FinishReasons, []string{"tool_use"}) {
		t.Errorf("metadata = %+v", m)
	}

	req.Input = append(req.Input,
		agent.Message{Role: agent.RoleAssistant, Text: resp.Text(), ToolCalls: resp.ToolCalls(), Output: resp.Output},
		agent.Message{Role: agent.RoleTool, ToolCallID: "toolu_1", Text: "shipped"},
		agent.Message{Role: agent.RoleTool, ToolCallID: "toolu_2", Text: "shipped too"})
	if _, err := c.CallModel(context.Background(), req, nil); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(s.Raw(1), `"content":[`+thinkingBlock+`,`) {
		t.Errorf("the thinking block is not replayed byte for byte:\n%s", s.Raw(1))
	}
	messages, _ := json.Marshal(s.Body(1)["messages"])
	var gotMessages, wantMessages any
	_ = json.Unmarshal(messages, &gotMessages)
	_ = json.Unmarshal([]byte(`[{"role":"user","content":[{"type":"text","text":"Orders 7 and 8?"}]},
		{"role":"assistant","content":[`+thinkingBlock+`,{"type":"text","text":"Looking it up."},
			{"type":"tool_use","id":"toolu_1","name":"lookup_order","input":{"order_id":"7"}},
			{"type":"tool_use","id":"toolu_2","name":"lookup_order","input":{"order_id":"8"}}]},
		{"role":"user","content":[{"type":"tool_result","tool_use_id":"toolu_1","content":[{"type":"text","text":"shipped"}],"is_error":false},
			{"type":"tool_result","tool_use_id":"toolu_2","content":[{"type":"text","text":"shipped too"}],"is_error":false}]}]`), &wantMessages)
	if !reflect.DeepEqual(gotMessages, wantMessages) {
		t.Errorf("replayed messages = %s", messages)
	}
}

func TestAnotherProvidersAnswerReplaysWithoutItsReasoning(t *testing.T) {
	s, c := newServer(t, events(messageStart, messageDelta("end_turn", 1), messageStop))
	other := agent.Message{Role: agent.RoleAssistant, Text: "Let me look.",
		ToolCalls: []agent.ToolCall{{ID: "call_a", Name: "lookup_order", Arguments: `{"order_id":"7"}`}},
		Output:    []agent.OutputItem{{Provider: "openai", API: "responses", Type: agent.OutputReasoning, Item: json.RawMessage(`{"type":"reasoning","encrypted_content":"opaque"}`)}}}
	if _, err := c.CallModel(context.Background(), agent.ModelRequest{Input: []agent.Message{
		{Role: agent.RoleUser, Text: "Order 7?"}, other, {Role: agent.RoleTool, ToolCallID: "call_a", Text: "shipped"},
	}}, nil); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(s.Raw(0), "opaque") {
		t.Errorf("another provider's reasoning was sent: %s", s.Raw(0))
	}
	if !strings.Contains(s.Raw(0), `{"id":"call_a","input":{"order_id":"7"},"name":"lookup_order","type":"tool_use"}`) {
		t.Errorf("the tool call was not replayed as tool_use: %s", s.Raw(0))
	}
}

func failing(status int, header map[string]string, message string) modeltest.Response {
	return modeltest.Failing(status, header, fmt.Sprintf(`{"type":"error","error":{"type":"api_error","message":%q}}`, message))
}

func TestFailuresBecomeModelErrorsThatNameTheProviderAndNeverTheKey(t *testing.T) {
	for _, tc := range []struct {
		name       string
		respond    modeltest.Response
		status     int
		retryable  bool
		retryAfter time.Duration
		message    string
	}{
		{"rate limited", failing(http.StatusTooManyRequests, map[string]string{"Retry-After": "3"}, "rate limited"), 429, true, 3 * time.Second, "rate limited"},
		{"overloaded", failing(529, nil, "Overloaded"), 529, true, 0, "Overloaded"},
		{"server error", failing(http.StatusInternalServerError, nil, "boom"), 500, true, 0, "boom"},
		{"bad key", failing(http.StatusUnauthorized, nil, "invalid x-api-key"), 401, false, 0, "invalid x-api-key"},
		{"stream cut mid-answer", events(messageStart, start(0, `{"type":"text","text":""}`), delta(0, `{"type":"text_delta","text":"Hal"}`)), 0, true, 0, "stream ended"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, c := newServer(t, tc.respond)
			_, err := c.CallModel(context.Background(), agent.ModelRequest{Input: []agent.Message{{Role: agent.RoleUser, Text: "Hi"}}}, nil)
			var me *agent.ModelError
			if !errors.As(err, &me) {
				t.Fatalf("error = %v, want a ModelError", err)
			}
			if me.StatusCode != tc.status || me.Retryable != tc.retryable || me.RetryAfter != tc.retryAfter || !strings.Contains(me.Message, tc.message) {
				t.Errorf("ModelError = %+v", me)
			}
			if strings.Contains(err.Error(), testKey) || !strings.Contains(err.Error(), Provider) {
				t.Errorf("error %q leaks the key or does not name the provider", err)
			}
		})
	}
}

func TestExtendedThinkingFollowsTheReasoningEffortAndRefusesAForcedToolChoice(t *testing.T) {
	s, c := newServer(t, events(messageStart, messageDelta("end_turn", 1), messageStop))
	req := agent.ModelRequest{Input: []agent.Message{{Role: agent.RoleUser, Text: "Hi"}}, Settings: agent.ModelSettings{ReasoningEffort: "medium"}}
	if _, err := c.CallModel(context.Background(), req, nil); err != nil {
		t.Fatal(err)
	}
	body := s.Body(0)
	if thinking, _ := json.Marshal(body["thinking"]); string(thinking) != `{"budget_tokens":8192,"type":"enabled"}` || body["max_tokens"] != float64(9216) {
		t.Errorf("thinking = %s, max_tokens = %v", thinking, body["max_tokens"])
	}
	if c.SupportsForcedToolChoice(req.Settings) || !c.SupportsForcedToolChoice(agent.ModelSettings{}) {
		t.Error("SupportsForcedToolChoice should be false with thinking and true without")
	}
	req.Tools, req.ToolChoice = []agent.ToolDefinition{lookupTool}, agent.ToolChoiceRequired
	_, err := c.CallModel(context.Background(), req, nil)
	var me *agent.ModelError
	if !errors.As(err, &me) || me.Retryable || !strings.Contains(me.Message, "forced tool choice") {
		t.Fatalf("a forced choice with thinking = %v, want a refusal that is not retried", err)
	}
	if s.Count() != 1 {
		t.Errorf("the refused request was sent")
	}
	req.Settings = agent.ModelSettings{}
	if _, err := c.CallModel(context.Background(), req, nil); err != nil {
		t.Fatal(err)
	}
	if choice, _ := json.Marshal(s.Body(1)["tool_choice"]); string(choice) != `{"type":"any"}` {
		t.Errorf("tool_choice = %s, want any", choice)
	}
}

func TestARequestCarriesTheActivationsTraceContext(t *testing.T) {
	s, c := newServer(t, thinkingAndTool)
	const traceparent = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
	req := agent.ModelRequest{Input: []agent.Message{{Role: agent.RoleUser, Text: "Orders 7 and 8?"}}, Tools: []agent.ToolDefinition{lookupTool}}
	if _, err := c.CallModel(tracing.ContextWithParent(context.Background(), traceparent), req, &deltas{}); err != nil {
		t.Fatal(err)
	}
	if got := s.Traceparent(0); got != traceparent {
		t.Errorf("traceparent = %q, want %q", got, traceparent)
	}
}

// Input tokens are the sum of three counts the server reports: counts near
// the largest int64 stop there instead of wrapping to a negative total the
// session would count as none.
func TestInputTokensFromCacheCountsNeverWrap(t *testing.T) {
	huge := `{"type":"message_start","message":{"id":"msg_1","type":"message","role":"assistant","model":"claude","content":[],"stop_reason":null,"stop_sequence":null,` +
		`"usage":{"input_tokens":9223372036854775807,"cache_read_input_tokens":9223372036854775807,"cache_creation_input_tokens":5,"output_tokens":1}}}`
	_, c := newServer(t, events(huge, messageDelta("end_turn", 1), messageStop))
	resp, err := c.CallModel(context.Background(), agent.ModelRequest{Input: []agent.Message{{Role: agent.RoleUser, Text: "hi"}}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if resp.Usage.InputTokens != math.MaxInt64 {
		t.Errorf("input tokens = %d, want the largest int64", resp.Usage.InputTokens)
	}
}
