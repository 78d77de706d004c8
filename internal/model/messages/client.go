// Package messages is the model client for Anthropic: the streaming
// Messages API with tool use and extended thinking, on the official
// Anthropic Go SDK. Thinking blocks keep their signature and are sent back
// unchanged on the next call, as the API requires.
package messages

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"sort"

	"github.com/anthropics/anthropic-sdk-go/v2"
	"github.com/anthropics/anthropic-sdk-go/v2/option"
	"github.com/anthropics/anthropic-sdk-go/v2/packages/param"

	"github.com/stepwise-run/stepwise/internal/contract"
	"github.com/stepwise-run/stepwise/internal/model"
	"github.com/stepwise-run/stepwise/pkg/agent"
)

// Provider and API name the output items this client writes.
const (
	Provider = "anthropic"
	API      = "messages"
)

// thinkingBudgets maps the Agent's reasoningEffort to extended thinking's
// token budget; an empty effort, or "none", leaves thinking off.
var thinkingBudgets = map[string]int64{"minimal": 1024, "low": 2048, "medium": 8192, "high": 24576, "xhigh": 32000}

// SupportsForcedToolChoice reports whether a tool call may be forced: not
// with extended thinking, which the Messages API refuses to combine with a
// forced choice.
func (c *Client) SupportsForcedToolChoice(settings agent.ModelSettings) bool {
	return thinkingBudgets[settings.ReasoningEffort] == 0
}

var _ agent.ForcedToolChoice = (*Client)(nil)

// DefaultMaxTokens is sent when the Agent sets no maxOutputTokens: the
// Messages API requires a bound.
const DefaultMaxTokens = 8192

// Config configures a client.
type Config = model.Config

// Client makes one streaming Messages request per model call.
type Client struct {
	cfg Config
	api anthropic.Client
}

var _ agent.ModelClient = (*Client)(nil)

// New returns a client with the SDK's own retries off.
func New(cfg Config) *Client {
	opts := []option.RequestOption{option.WithMaxRetries(0), option.WithAPIKey(""), option.WithMiddleware(model.PropagateTraceContext)}
	if cfg.BaseURL != "" {
		opts = append(opts, option.WithBaseURL(cfg.BaseURL))
	}
	if cfg.HTTPClient != nil {
		opts = append(opts, option.WithHTTPClient(cfg.HTTPClient))
	}
	return &Client{cfg: cfg, api: anthropic.NewClient(opts...)}
}

// EstimateInputTokens applies the rule of thumb.
func (c *Client) EstimateInputTokens(req agent.ModelRequest) int64 { return agent.EstimateTokens(req) }

// block is one content block as it streams in.
type block struct {
	kind, text, thinking, signature, data, id, name, input string
}

// wire is the block as the API takes it back.
func (b *block) wire() (json.RawMessage, agent.OutputItem) {
	var raw []byte
	item := agent.OutputItem{Provider: Provider, API: API}
	switch b.kind {
	case "text":
		raw, _ = json.Marshal(map[string]string{"type": "text", "text": b.text})
		item.Type, item.Text = agent.OutputText, b.text
	case "thinking":
		raw, _ = json.Marshal(map[string]string{"type": "thinking", "thinking": b.thinking, "signature": b.signature})
		item.Type, item.Text = agent.OutputReasoning, b.thinking
	case "redacted_thinking":
		raw, _ = json.Marshal(map[string]string{"type": "redacted_thinking", "data": b.data})
		item.Type = agent.OutputReasoning
	case "tool_use":
		input := b.input
		if input == "" {
			input = "{}"
		}
		raw, _ = json.Marshal(map[string]any{"type": "tool_use", "id": b.id, "name": b.name, "input": json.RawMessage(input)})
		item.Type, item.ToolCall = agent.OutputToolCall, &agent.ToolCall{ID: b.id, Name: b.name, Arguments: input}
	default:
		return nil, item
	}
	item.Item = raw
	return raw, item
}

// CallModel streams one message.
func (c *Client) CallModel(ctx context.Context, req agent.ModelRequest, out agent.OutputWriter) (agent.ModelResponse, error) {
	if out == nil {
		out = agent.DiscardOutput
	}
	params, err := c.params(req)
	if err != nil {
		return agent.ModelResponse{}, err
	}
	var opts []option.RequestOption
	key, ok, err := c.cfg.Key(Provider)
	if err != nil {
		return agent.ModelResponse{}, err
	}
	if ok {
		opts = append(opts, option.WithAPIKey(key))
	}
	stream := c.api.Messages.NewStreaming(ctx, params, opts...)
	defer func() { _ = stream.Close() }()

	resp := agent.ModelResponse{Metadata: agent.CallMetadata{Provider: Provider, RequestModel: c.cfg.Model}}
	blocks := map[int64]*block{}
	stopped := false
	for stream.Next() {
		ev := stream.Current()
		switch ev.Type {
		case "message_start":
			resp.Metadata.ResponseID, resp.Metadata.ResponseModel = ev.Message.ID, ev.Message.Model
			u := ev.Message.Usage
			resp.Usage.InputTokens = contract.AddCounts(contract.AddCounts(u.InputTokens, u.CacheReadInputTokens), u.CacheCreationInputTokens)
			resp.Usage.CachedInputTokens = u.CacheReadInputTokens
			resp.Usage.OutputTokens = u.OutputTokens
		case "content_block_start":
			cb := ev.ContentBlock
			blocks[ev.Index] = &block{kind: cb.Type, text: cb.Text, thinking: cb.Thinking, signature: cb.Signature, data: cb.Data, id: cb.ID, name: cb.Name}
		case "content_block_delta":
			b := blocks[ev.Index]
			if b == nil {
				continue
			}
			switch d := ev.Delta; d.Type {
			case "text_delta":
				b.text += d.Text
				out.TextDelta(d.Text)
			case "thinking_delta":
				b.thinking += d.Thinking
				out.ReasoningDelta(d.Thinking)
			case "signature_delta":
				b.signature += d.Signature
			case "input_json_delta":
				b.input += d.PartialJSON
			}
		case "message_delta":
			if ev.Delta.StopReason != "" {
				resp.Metadata.FinishReasons = []string{string(ev.Delta.StopReason)}
			}
			if ev.Usage.OutputTokens > 0 {
				resp.Usage.OutputTokens = ev.Usage.OutputTokens
			}
		case "message_stop":
			stopped = true
		}
	}
	if err := stream.Err(); err != nil {
		return agent.ModelResponse{}, classify(err)
	}
	if !stopped {
		return agent.ModelResponse{}, &agent.ModelError{Provider: Provider, Retryable: true, Message: "the stream ended before the message stopped"}
	}
	indexes := make([]int64, 0, len(blocks))
	for i := range blocks {
		indexes = append(indexes, i)
	}
	sort.Slice(indexes, func(a, b int) bool { return indexes[a] < indexes[b] })
	for _, i := range indexes {
		if raw, item := blocks[i].wire(); raw != nil {
			resp.Output = append(resp.Output, item)
		}
	}
	resp.Usage.ModelCalls = 1
	return resp, nil
}

func classify(err error) error {
	var apiErr *anthropic.Error
	if errors.As(err, &apiErr) {
		var header http.Header
		if apiErr.Response != nil {
			header = apiErr.Response.Header
		}
		return model.HTTPError(Provider, apiErr.StatusCode, header, apiMessage(apiErr))
	}
	return model.StreamError(Provider, err)
}

// apiMessage reads the message of an Anthropic error body.
func apiMessage(e *anthropic.Error) string {
	var body struct {
		Error struct {
			Message string `json:"message"`
		} `json:"error"`
	}
	if json.Unmarshal([]byte(e.RawJSON()), &body) == nil && body.Error.Message != "" {
		return body.Error.Message
	}
	return http.StatusText(e.StatusCode)
}

// params builds the whole request. Consecutive tool results become one user
// message, as the API wants them.
func (c *Client) params(req agent.ModelRequest) (anthropic.MessageNewParams, error) {
	p := anthropic.MessageNewParams{Model: c.cfg.Model, MaxTokens: DefaultMaxTokens}
	if req.Settings.MaxOutputTokens > 0 {
		p.MaxTokens = req.Settings.MaxOutputTokens
	}
	if budget := thinkingBudgets[req.Settings.ReasoningEffort]; budget > 0 {
		if req.ToolChoice == agent.ToolChoiceRequired && len(req.Tools) > 0 {
			return p, &agent.ModelError{Provider: Provider, Message: "a forced tool choice cannot be combined with extended thinking (reasoningEffort " + req.Settings.ReasoningEffort + ")"}
		}
		p.Thinking = anthropic.ThinkingConfigParamOfEnabled(budget)
		p.MaxTokens = max(p.MaxTokens, budget+1024)
	}
	if req.Instructions != "" {
		p.System = []anthropic.TextBlockParam{{Text: req.Instructions}}
	}
	for _, m := range req.Input {
		switch m.Role {
		case agent.RoleUser:
			blocks := []anthropic.ContentBlockParamUnion{anthropic.NewTextBlock(m.Text)}
			for _, img := range m.Images {
				data, err := req.ImageBytes(img)
				if err != nil {
					return p, err
				}
				blocks = append(blocks, anthropic.NewImageBlockBase64(img.MIMEType, base64.StdEncoding.EncodeToString(data)))
			}
			p.Messages = append(p.Messages, anthropic.NewUserMessage(blocks...))
		case agent.RoleTool:
			result := anthropic.NewToolResultBlock(m.ToolCallID, m.Text, false)
			for _, img := range m.Images {
				// A tool result takes image blocks after its text.
				data, err := req.ImageBytes(img)
				if err != nil {
					return p, err
				}
				block := anthropic.NewImageBlockBase64(img.MIMEType, base64.StdEncoding.EncodeToString(data))
				result.OfToolResult.Content = append(result.OfToolResult.Content, anthropic.ToolResultBlockParamContentUnion{OfImage: block.OfImage})
			}
			if n := len(p.Messages); n > 0 && isToolResults(p.Messages[n-1]) {
				p.Messages[n-1].OfUser.Content = append(p.Messages[n-1].OfUser.Content, result)
			} else {
				p.Messages = append(p.Messages, anthropic.NewUserMessage(result))
			}
		case agent.RoleAssistant:
			p.Messages = append(p.Messages, anthropic.NewAssistantMessage(replay(m)...))
		}
	}
	for _, t := range req.Tools {
		var schema struct {
			Properties any      `json:"properties"`
			Required   []string `json:"required"`
		}
		if err := json.Unmarshal(t.Parameters, &schema); err != nil {
			return p, fmt.Errorf("tool %s: the parameter schema is not a JSON object: %w", t.Name, err)
		}
		tool := anthropic.ToolUnionParamOfTool(anthropic.ToolInputSchemaParam{Properties: schema.Properties, Required: schema.Required}, t.Name)
		if t.Description != "" {
			tool.OfTool.Description = anthropic.String(t.Description)
		}
		p.Tools = append(p.Tools, tool)
	}
	switch {
	case len(req.Tools) == 0:
	case req.ToolChoice == agent.ToolChoiceRequired:
		p.ToolChoice = anthropic.ToolChoiceUnionParam{OfAny: &anthropic.ToolChoiceAnyParam{}}
	case req.ToolChoice == agent.ToolChoiceNone:
		p.ToolChoice = anthropic.ToolChoiceUnionParam{OfNone: &anthropic.ToolChoiceNoneParam{}}
	}
	return p, nil
}

func isToolResults(m anthropic.MessageParam) bool {
	if m.OfUser == nil || len(m.OfUser.Content) == 0 {
		return false
	}
	for _, b := range m.OfUser.Content {
		if b.OfToolResult == nil {
			return false
		}
	}
	return true
}

// replay sends an answer back: this provider's blocks as they were,
// thinking and its signature included; another provider's as text and tool
// calls, its reasoning dropped.
func replay(m agent.Message) []anthropic.ContentBlockParamUnion {
	native := len(m.Output) > 0
	for _, o := range m.Output {
		native = native && o.Provider == Provider && o.API == API && len(o.Item) > 0
	}
	var blocks []anthropic.ContentBlockParamUnion
	if native {
		for _, o := range m.Output {
			var kind struct {
				Type string `json:"type"`
			}
			_ = json.Unmarshal(o.Item, &kind)
			switch kind.Type {
			case "text":
				v := param.Override[anthropic.TextBlockParam](o.Item)
				blocks = append(blocks, anthropic.ContentBlockParamUnion{OfText: &v})
			case "thinking":
				v := param.Override[anthropic.ThinkingBlockParam](o.Item)
				blocks = append(blocks, anthropic.ContentBlockParamUnion{OfThinking: &v})
			case "redacted_thinking":
				v := param.Override[anthropic.RedactedThinkingBlockParam](o.Item)
				blocks = append(blocks, anthropic.ContentBlockParamUnion{OfRedactedThinking: &v})
			case "tool_use":
				v := param.Override[anthropic.ToolUseBlockParam](o.Item)
				blocks = append(blocks, anthropic.ContentBlockParamUnion{OfToolUse: &v})
			}
		}
		return blocks
	}
	if m.Text != "" {
		blocks = append(blocks, anthropic.NewTextBlock(m.Text))
	}
	for _, call := range m.ToolCalls {
		var input any = map[string]any{}
		if call.Arguments != "" {
			if err := json.Unmarshal([]byte(call.Arguments), &input); err != nil {
				input = map[string]any{}
			}
		}
		blocks = append(blocks, anthropic.NewToolUseBlock(call.ID, input, call.Name))
	}
	return blocks
}
