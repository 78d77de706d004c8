// Package responses is the model client for OpenAI: the Responses API with
// store=false, so no conversation state stays with the provider, and the
// reasoning's encrypted content included, kept byte for byte and sent back
// unchanged on the next call, on the official OpenAI Go SDK.
package responses

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/packages/param"
	"github.com/openai/openai-go/v3/responses"
	"github.com/openai/openai-go/v3/shared"

	"github.com/stepwise-run/stepwise/internal/model"
	"github.com/stepwise-run/stepwise/internal/model/openaiapi"
	"github.com/stepwise-run/stepwise/pkg/agent"
)

// Provider and API name the output items this client writes; only items of
// this provider and API replay as they are.
const (
	Provider = "openai"
	API      = "responses"
)

// Config configures a client.
type Config = model.Config

// Client makes one streaming Responses request per model call.
type Client struct {
	cfg Config
	api openai.Client
}

var _ agent.ModelClient = (*Client)(nil)

// New returns a client with the SDK's own retries off: the RunModel Step's
// retry policy decides.
func New(cfg Config) *Client {
	return &Client{cfg: cfg, api: openaiapi.NewClient(cfg)}
}

// EstimateInputTokens applies the rule of thumb.
func (c *Client) EstimateInputTokens(req agent.ModelRequest) int64 { return agent.EstimateTokens(req) }

// outputItem is the part of a Responses output item the session reads.
type outputItem struct {
	Type      string `json:"type"`
	CallID    string `json:"call_id"`
	Name      string `json:"name"`
	Arguments string `json:"arguments"`
	Content   []struct {
		Type string `json:"type"`
		Text string `json:"text"`
	} `json:"content"`
	Summary []struct {
		Text string `json:"text"`
	} `json:"summary"`
}

// CallModel streams one response.
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
	stream := c.api.Responses.NewStreaming(ctx, params, opts...)
	defer func() { _ = stream.Close() }()

	resp := agent.ModelResponse{Metadata: agent.CallMetadata{Provider: Provider, RequestModel: c.cfg.Model}}
	completed := false
	for stream.Next() {
		ev := stream.Current()
		switch ev.Type {
		case "response.output_text.delta":
			out.TextDelta(ev.Delta)
		case "response.reasoning_summary_text.delta":
			out.ReasoningDelta(ev.Delta)
		case "response.output_item.done":
			item, err := readItem(ev.Item.RawJSON())
			if err != nil {
				return agent.ModelResponse{}, &agent.ModelError{Provider: Provider, Retryable: true, Message: err.Error()}
			}
			resp.Output = append(resp.Output, item...)
		case "response.completed", "response.incomplete":
			completed = true
			r := ev.Response
			resp.Metadata.ResponseID, resp.Metadata.ResponseModel = r.ID, r.Model
			reason := "completed"
			if ev.Type == "response.incomplete" {
				reason = "incomplete: " + r.IncompleteDetails.Reason
			}
			resp.Metadata.FinishReasons = []string{reason}
			u := r.Usage
			resp.Usage = agent.Usage{
				ModelCalls: 1, InputTokens: u.InputTokens, OutputTokens: u.OutputTokens,
				CachedInputTokens: u.InputTokensDetails.CachedTokens, ReasoningTokens: u.OutputTokensDetails.ReasoningTokens,
			}
		case "response.failed", "error":
			msg := ev.Response.Error.Message
			if msg == "" {
				msg = ev.Message
			}
			return agent.ModelResponse{}, &agent.ModelError{Provider: Provider, Retryable: true, Message: "the response failed: " + msg}
		}
	}
	if err := stream.Err(); err != nil {
		return agent.ModelResponse{}, openaiapi.Classify(Provider, err)
	}
	if !completed {
		return agent.ModelResponse{}, &agent.ModelError{Provider: Provider, Retryable: true, Message: "the stream ended before the response completed"}
	}
	return resp, nil
}

// readItem keeps one output item as the provider sent it, with the
// provider-neutral reading the session shows and replays elsewhere.
func readItem(raw string) ([]agent.OutputItem, error) {
	var it outputItem
	if err := json.Unmarshal([]byte(raw), &it); err != nil {
		return nil, fmt.Errorf("an output item is not JSON: %w", err)
	}
	item := agent.OutputItem{Provider: Provider, API: API, Item: json.RawMessage(raw)}
	switch it.Type {
	case "message":
		item.Type = agent.OutputText
		for _, part := range it.Content {
			if part.Type == "output_text" {
				item.Text += part.Text
			}
		}
	case "function_call":
		item.Type = agent.OutputToolCall
		item.ToolCall = &agent.ToolCall{ID: it.CallID, Name: it.Name, Arguments: it.Arguments}
	case "reasoning":
		item.Type = agent.OutputReasoning
		for _, s := range it.Summary {
			item.Text += s.Text
		}
	default:
		return nil, nil
	}
	return []agent.OutputItem{item}, nil
}

// params builds the whole request: every item every time, nothing stored.
func (c *Client) params(req agent.ModelRequest) (responses.ResponseNewParams, error) {
	p := responses.ResponseNewParams{
		Model:   c.cfg.Model,
		Store:   openai.Bool(false),
		Include: []responses.ResponseIncludable{responses.ResponseIncludableReasoningEncryptedContent},
	}
	if req.Instructions != "" {
		p.Instructions = openai.String(req.Instructions)
	}
	var input responses.ResponseInputParam
	for _, m := range req.Input {
		switch {
		case m.Role == agent.RoleUser && len(m.Images) > 0:
			content := responses.ResponseInputMessageContentListParam{responses.ResponseInputContentParamOfInputText(m.Text)}
			for _, img := range m.Images {
				data, err := req.ImageBytes(img)
				if err != nil {
					return p, err
				}
				part := responses.ResponseInputContentParamOfInputImage(responses.ResponseInputImageDetailAuto)
				part.OfInputImage.ImageURL = openai.String(model.ImageDataURL(img, data))
				content = append(content, part)
			}
			input = append(input, responses.ResponseInputItemParamOfMessage(content, responses.EasyInputMessageRoleUser))
		case m.Role == agent.RoleUser:
			input = append(input, responses.ResponseInputItemParamOfMessage(m.Text, responses.EasyInputMessageRoleUser))
		case m.Role == agent.RoleTool:
			item := responses.ResponseInputItemParamOfFunctionCallOutput(m.Text)
			item.OfFunctionCallOutput.CallID = openai.String(m.ToolCallID)
			if len(m.Images) > 0 {
				// A function call's output takes the text and each image
				// as parts.
				parts := responses.ResponseFunctionCallOutputItemListParam{responses.ResponseFunctionCallOutputItemParamOfInputText(m.Text)}
				for _, img := range m.Images {
					data, err := req.ImageBytes(img)
					if err != nil {
						return p, err
					}
					parts = append(parts, responses.ResponseFunctionCallOutputItemUnionParam{OfInputImage: &responses.ResponseInputImageContentParam{
						ImageURL: openai.String(model.ImageDataURL(img, data)), Detail: responses.ResponseInputImageContentDetailAuto,
					}})
				}
				item.OfFunctionCallOutput.Output = responses.ResponseInputItemFunctionCallOutputOutputUnionParam{OfResponseFunctionCallOutputItemArray: parts}
			}
			input = append(input, item)
		case m.Role == agent.RoleAssistant:
			input = append(input, replay(m)...)
		}
	}
	p.Input = responses.ResponseNewParamsInputUnion{OfInputItemList: input}
	for _, t := range req.Tools {
		var schema map[string]any
		if err := json.Unmarshal(t.Parameters, &schema); err != nil {
			return p, fmt.Errorf("tool %s: the parameter schema is not a JSON object: %w", t.Name, err)
		}
		tool := responses.ToolParamOfFunction(t.Name, schema, false)
		if t.Description != "" {
			tool.OfFunction.Description = openai.String(t.Description)
		}
		p.Tools = append(p.Tools, tool)
	}
	if req.ToolChoice != "" && len(req.Tools) > 0 {
		p.ToolChoice.OfToolChoiceMode = param.NewOpt(responses.ToolChoiceOptions(req.ToolChoice))
	}
	if req.Settings.MaxOutputTokens > 0 {
		p.MaxOutputTokens = openai.Int(req.Settings.MaxOutputTokens)
	}
	if req.Settings.ReasoningEffort != "" {
		p.Reasoning.Effort = shared.ReasoningEffort(req.Settings.ReasoningEffort)
	}
	return p, nil
}

// replay sends an answer back: this provider's items exactly as received,
// encrypted reasoning included; another provider's as text and tool calls,
// its reasoning dropped.
func replay(m agent.Message) []responses.ResponseInputItemUnionParam {
	var items []responses.ResponseInputItemUnionParam
	native := len(m.Output) > 0
	for _, o := range m.Output {
		native = native && o.Provider == Provider && o.API == API && len(o.Item) > 0
	}
	if native {
		for _, o := range m.Output {
			raw := o.Item
			switch o.Type {
			case agent.OutputText:
				v := param.Override[responses.ResponseOutputMessageParam](raw)
				items = append(items, responses.ResponseInputItemUnionParam{OfOutputMessage: &v})
			case agent.OutputToolCall:
				v := param.Override[responses.ResponseFunctionToolCallParam](raw)
				items = append(items, responses.ResponseInputItemUnionParam{OfFunctionCall: &v})
			case agent.OutputReasoning:
				v := param.Override[responses.ResponseReasoningItemParam](raw)
				items = append(items, responses.ResponseInputItemUnionParam{OfReasoning: &v})
			}
		}
		return items
	}
	if m.Text != "" {
		items = append(items, responses.ResponseInputItemParamOfMessage(m.Text, responses.EasyInputMessageRoleAssistant))
	}
	for _, call := range m.ToolCalls {
		items = append(items, responses.ResponseInputItemParamOfFunctionCall(call.Arguments, call.ID, call.Name))
	}
	return items
}
