// Package chatcompletions is the model client for OpenAI-compatible servers
// (vLLM, Ollama, LM Studio, gateways): streaming Chat Completions against
// the Agent's base URL, with tool calls, on the official OpenAI Go SDK.
package chatcompletions

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/shared"

	"github.com/stepwise-run/stepwise/internal/model"
	"github.com/stepwise-run/stepwise/internal/model/openaiapi"
	"github.com/stepwise-run/stepwise/pkg/agent"
)

// Provider and API name the output items this client writes: items of
// another provider or API replay as text and tool calls.
const (
	Provider = "openai-compatible"
	API      = "chat.completions"
)

// Config configures a client.
type Config = model.Config

// Client makes one streaming Chat Completions request per model call.
type Client struct {
	cfg Config
	api openai.Client
}

var _ agent.ModelClient = (*Client)(nil)

// New returns a client. The SDK's own retries are off: the RunModel Step's
// retry policy decides.
func New(cfg Config) *Client {
	return &Client{cfg: cfg, api: openaiapi.NewClient(cfg)}
}

// EstimateInputTokens applies the rule of thumb: no tokenizer is known for
// an arbitrary server.
func (c *Client) EstimateInputTokens(req agent.ModelRequest) int64 { return agent.EstimateTokens(req) }

// CallModel streams one completion.
func (c *Client) CallModel(ctx context.Context, req agent.ModelRequest, out agent.OutputWriter) (agent.ModelResponse, error) {
	if out == nil {
		out = agent.DiscardOutput
	}
	params, err := c.params(req)
	if err != nil {
		return agent.ModelResponse{}, err
	}
	opts, err := openaiapi.CallOptions(c.cfg, Provider)
	if err != nil {
		return agent.ModelResponse{}, err
	}
	stream := c.api.Chat.Completions.NewStreaming(ctx, params, opts...)
	defer func() { _ = stream.Close() }()

	var (
		text    string
		calls   = map[int64]*agent.ToolCall{}
		usage   agent.Usage
		meta    = agent.CallMetadata{Provider: Provider, RequestModel: c.cfg.Model}
		reasons []string
	)
	for stream.Next() {
		chunk := stream.Current()
		meta.ResponseID, meta.ResponseModel = chunk.ID, chunk.Model
		if u := chunk.Usage; u.JSON.PromptTokens.Valid() {
			usage.InputTokens, usage.OutputTokens = u.PromptTokens, u.CompletionTokens
			usage.CachedInputTokens = u.PromptTokensDetails.CachedTokens
			usage.ReasoningTokens = u.CompletionTokensDetails.ReasoningTokens
		}
		for _, choice := range chunk.Choices {
			if choice.Index != 0 {
				continue
			}
			if d := choice.Delta.Content; d != "" {
				text += d
				out.TextDelta(d)
			}
			if r, ok := choice.Delta.JSON.ExtraFields["reasoning_content"]; ok {
				var reasoning string
				if json.Unmarshal([]byte(r.Raw()), &reasoning) == nil && reasoning != "" {
					out.ReasoningDelta(reasoning)
				}
			}
			for _, tc := range choice.Delta.ToolCalls {
				call := calls[tc.Index]
				if call == nil {
					call = &agent.ToolCall{}
					calls[tc.Index] = call
				}
				if tc.ID != "" {
					call.ID = tc.ID
				}
				call.Name += tc.Function.Name
				call.Arguments += tc.Function.Arguments
			}
			if choice.FinishReason != "" {
				reasons = append(reasons, choice.FinishReason)
			}
		}
	}
	if err := stream.Err(); err != nil {
		return agent.ModelResponse{}, openaiapi.Classify(Provider, err)
	}
	if len(reasons) == 0 {
		return agent.ModelResponse{}, &agent.ModelError{Provider: Provider, Retryable: true, Message: "the stream ended before the answer finished"}
	}
	meta.FinishReasons = reasons
	usage.ModelCalls = 1
	resp := agent.ModelResponse{Usage: usage, Metadata: meta}
	if text != "" {
		item, _ := json.Marshal(map[string]string{"type": "text", "text": text})
		resp.Output = append(resp.Output, agent.OutputItem{Provider: Provider, API: API, Item: item, Type: agent.OutputText, Text: text})
	}
	indexes := make([]int64, 0, len(calls))
	for i := range calls {
		indexes = append(indexes, i)
	}
	sort.Slice(indexes, func(a, b int) bool { return indexes[a] < indexes[b] })
	ordered := make([]agent.ToolCall, 0, len(indexes))
	for _, i := range indexes {
		ordered = append(ordered, *calls[i])
	}
	// Many OpenAI-compatible servers send empty or repeated IDs, which
	// would fail the turn after the call was paid for.
	model.UsableToolCallIDs(req, ordered)
	for _, call := range ordered {
		item, _ := json.Marshal(map[string]any{
			"id": call.ID, "type": "function",
			"function": map[string]string{"name": call.Name, "arguments": call.Arguments},
		})
		resp.Output = append(resp.Output, agent.OutputItem{Provider: Provider, API: API, Item: item, Type: agent.OutputToolCall, ToolCall: &call})
	}
	return resp, nil
}

// classify turns an SDK error into a ModelError.
// params builds the whole request: no server-side conversation state.
func (c *Client) params(req agent.ModelRequest) (openai.ChatCompletionNewParams, error) {
	p := openai.ChatCompletionNewParams{
		Model:         c.cfg.Model,
		StreamOptions: openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)},
	}
	if req.Instructions != "" {
		p.Messages = append(p.Messages, openai.SystemMessage(req.Instructions))
	}
	// Tool messages take text only: the images of a run of tool results
	// follow its last one, one user message per result.
	var pendingImages []agent.Message
	flushImages := func() error {
		for _, m := range pendingImages {
			msg, err := userWithImages(req, model.ToolResultImagesText(m.ToolName, m.ToolCallID), m.Images)
			if err != nil {
				return err
			}
			p.Messages = append(p.Messages, msg)
		}
		pendingImages = nil
		return nil
	}
	for _, m := range req.Input {
		if m.Role != agent.RoleTool {
			if err := flushImages(); err != nil {
				return p, err
			}
		}
		switch m.Role {
		case agent.RoleUser:
			if len(m.Images) == 0 {
				p.Messages = append(p.Messages, openai.UserMessage(m.Text))
				continue
			}
			msg, err := userWithImages(req, m.Text, m.Images)
			if err != nil {
				return p, err
			}
			p.Messages = append(p.Messages, msg)
		case agent.RoleTool:
			p.Messages = append(p.Messages, openai.ToolMessage(m.Text, m.ToolCallID))
			if len(m.Images) > 0 {
				pendingImages = append(pendingImages, m)
			}
		case agent.RoleAssistant:
			msg := openai.ChatCompletionAssistantMessageParam{}
			if m.Text != "" {
				msg.Content.OfString = openai.String(m.Text)
			}
			for _, call := range m.ToolCalls {
				msg.ToolCalls = append(msg.ToolCalls, openai.ChatCompletionMessageToolCallUnionParam{
					OfFunction: &openai.ChatCompletionMessageFunctionToolCallParam{
						ID:       call.ID,
						Function: openai.ChatCompletionMessageFunctionToolCallFunctionParam{Name: call.Name, Arguments: call.Arguments},
					},
				})
			}
			p.Messages = append(p.Messages, openai.ChatCompletionMessageParamUnion{OfAssistant: &msg})
		}
	}
	if err := flushImages(); err != nil {
		return p, err
	}
	for _, t := range req.Tools {
		var schema map[string]any
		if err := json.Unmarshal(t.Parameters, &schema); err != nil {
			return p, fmt.Errorf("tool %s: the parameter schema is not a JSON object: %w", t.Name, err)
		}
		fn := shared.FunctionDefinitionParam{Name: t.Name, Parameters: shared.FunctionParameters(schema)}
		if t.Description != "" {
			fn.Description = openai.String(t.Description)
		}
		p.Tools = append(p.Tools, openai.ChatCompletionFunctionTool(fn))
	}
	if req.ToolChoice != "" && len(req.Tools) > 0 {
		p.ToolChoice.OfAuto = openai.String(string(req.ToolChoice))
	}
	if req.Settings.MaxOutputTokens > 0 {
		p.MaxCompletionTokens = openai.Int(req.Settings.MaxOutputTokens)
	}
	if req.Settings.ReasoningEffort != "" {
		p.ReasoningEffort = shared.ReasoningEffort(req.Settings.ReasoningEffort)
	}
	return p, nil
}

// userWithImages is a user message of a text part and one image_url part
// per image, each a base64 data: URL.
func userWithImages(req agent.ModelRequest, text string, images []agent.ImageReference) (openai.ChatCompletionMessageParamUnion, error) {
	parts := []openai.ChatCompletionContentPartUnionParam{openai.TextContentPart(text)}
	for _, img := range images {
		data, err := req.ImageBytes(img)
		if err != nil {
			return openai.ChatCompletionMessageParamUnion{}, err
		}
		parts = append(parts, openai.ImageContentPart(openai.ChatCompletionContentPartImageImageURLParam{
			URL: model.ImageDataURL(img, data), Detail: "auto",
		}))
	}
	return openai.UserMessage(parts), nil
}
