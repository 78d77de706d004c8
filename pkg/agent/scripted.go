package agent

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"
)

// ScriptedReply is what a script answers to one model call.
type ScriptedReply struct {
	// Text is the answer's text.
	Text string
	// ToolCalls are tool calls, in order.
	ToolCalls []ScriptedToolCall
	// Reasoning, when set, is reported as a reasoning delta and item.
	Reasoning string
	// TextChunks, when set, stream Text as these deltas, in order, ChunkDelay
	// apart, the way a provider streams; they must join to Text. Unset,
	// Text is one delta.
	TextChunks []string
	// ChunkDelay is the pause before each chunk after the first.
	ChunkDelay time.Duration
}

// ScriptedToolCall is one tool call of a scripted reply.
type ScriptedToolCall struct {
	// ID is the call's ID; empty derives a deterministic one.
	ID string
	// Name is the tool to call.
	Name string
	// Arguments are encoded as JSON, unless they are a string, which is sent
	// as is.
	Arguments any
}

// Script answers a model request. Keep it deterministic: a crashed RunModel
// runs it again.
type Script func(req ModelRequest) (ScriptedReply, error)

// ScriptedModel is a model client that answers from a script, so an agent
// runs without a model key: a local demo, a tutorial, or a test.
type ScriptedModel struct {
	script      Script
	maxRecorded int

	mu       sync.Mutex
	requests []ModelRequest
}

// ScriptedProvider is the provider name of a scripted model's output items.
const ScriptedProvider = "scripted"

// NewScriptedModel returns a scripted model client that keeps the latest 100
// requests.
func NewScriptedModel(script Script) *ScriptedModel {
	return &ScriptedModel{script: script, maxRecorded: 100}
}

// Requests returns the latest requests, oldest first.
func (m *ScriptedModel) Requests() []ModelRequest {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([]ModelRequest(nil), m.requests...)
}

// CallModel answers from the script.
func (m *ScriptedModel) CallModel(ctx context.Context, req ModelRequest, out OutputWriter) (ModelResponse, error) {
	if err := ctx.Err(); err != nil {
		return ModelResponse{}, err
	}
	m.mu.Lock()
	m.requests = append(m.requests, req)
	if len(m.requests) > m.maxRecorded {
		m.requests = m.requests[len(m.requests)-m.maxRecorded:]
	}
	m.mu.Unlock()

	reply, err := m.script(req)
	if err != nil {
		return ModelResponse{}, err
	}
	if out == nil {
		out = DiscardOutput
	}
	var resp ModelResponse
	add := func(item OutputItem) {
		item.Provider, item.API = ScriptedProvider, ScriptedProvider
		raw, _ := json.Marshal(struct {
			Type     OutputItemType `json:"type"`
			Text     string         `json:"text,omitempty"`
			ToolCall *ToolCall      `json:"tool_call,omitempty"`
		}{item.Type, item.Text, item.ToolCall})
		item.Item = raw
		resp.Output = append(resp.Output, item)
	}
	if reply.Reasoning != "" {
		out.ReasoningDelta(reply.Reasoning)
		add(OutputItem{Type: OutputReasoning, Text: reply.Reasoning})
	}
	if len(reply.TextChunks) > 0 && strings.Join(reply.TextChunks, "") != reply.Text {
		return ModelResponse{}, errors.New("scripted reply: TextChunks do not join to Text")
	}
	if reply.Text != "" {
		chunks := reply.TextChunks
		if len(chunks) == 0 {
			chunks = []string{reply.Text}
		}
		for i, chunk := range chunks {
			if i > 0 && reply.ChunkDelay > 0 {
				select {
				case <-ctx.Done():
					return ModelResponse{}, ctx.Err()
				case <-time.After(reply.ChunkDelay):
				}
			}
			out.TextDelta(chunk)
		}
		add(OutputItem{Type: OutputText, Text: reply.Text})
	}
	for i, call := range reply.ToolCalls {
		id := call.ID
		if id == "" {
			id = fmt.Sprintf("call_%d_%d", len(req.Input), i+1)
		}
		args, ok := call.Arguments.(string)
		if !ok {
			encoded, err := json.Marshal(call.Arguments)
			if err != nil {
				return ModelResponse{}, fmt.Errorf("scripted tool call %s: encoding arguments: %w", call.Name, err)
			}
			args = string(encoded)
		}
		add(OutputItem{Type: OutputToolCall, ToolCall: &ToolCall{ID: id, Name: call.Name, Arguments: args}})
	}
	in := EstimateTokens(req)
	outTokens := int64(len(reply.Text)+len(reply.Reasoning)+3) / 4
	resp.Usage = Usage{ModelCalls: 1, InputTokens: in, OutputTokens: outTokens}
	resp.Metadata = CallMetadata{Provider: ScriptedProvider, RequestModel: "scripted", ResponseModel: "scripted", FinishReasons: []string{"stop"}}
	return resp, nil
}

// DiscardOutput drops deltas, for callers that do not stream.
var DiscardOutput OutputWriter = discardOutput{}

type discardOutput struct{}

func (discardOutput) TextDelta(string)      {}
func (discardOutput) ReasoningDelta(string) {}

// EstimateInputTokens applies the rule of thumb.
func (m *ScriptedModel) EstimateInputTokens(req ModelRequest) int64 {
	return EstimateTokens(req)
}

// UserTexts returns the request's user texts, oldest first.
func UserTexts(req ModelRequest) []string {
	var texts []string
	for _, m := range req.Input {
		if m.Role == RoleUser {
			texts = append(texts, m.Text)
		}
	}
	return texts
}

// ToolResult is one tool call's result: as a request carries it, or as a
// continuation decision sees it.
type ToolResult struct {
	ToolCallID string
	ToolName   string
	// Output is the result as the model sees it.
	Output string
	// Status is the call's final status (succeeded, failed, rejected or
	// outcome_unknown) where the session knows it; a request does not carry
	// it.
	Status string
}

// ToolResults returns the tool results since the request's last user
// message, oldest first: every result of the current turn so far. An
// answer without tool calls starts the list again.
func ToolResults(req ModelRequest) []ToolResult {
	var results []ToolResult
	for _, m := range req.Input {
		switch m.Role {
		case RoleUser:
			results = nil
		case RoleTool:
			results = append(results, ToolResult{ToolCallID: m.ToolCallID, ToolName: m.ToolName, Output: m.Text})
		case RoleAssistant:
			if len(m.ToolCalls) == 0 {
				results = nil
			}
		}
	}
	return results
}

// DemoScript is the stock demo model: it answers tool results with a
// summary of them, runs "call <tool> <JSON arguments>" as a tool call when the
// tool is offered, and otherwise echoes the user's last message. When the
// request shows images, the answer ends with "(images: ...)", the first 12
// hex digits of the SHA-256 of each image's bytes as the request carried
// them, in order, so a demo shows what the model was shown.
func DemoScript(req ModelRequest) (ScriptedReply, error) {
	reply := demoReply(req)
	if note := imagesNote(req); note != "" && reply.Text != "" {
		reply.Text += " " + note
	}
	return reply, nil
}

// imagesNote names the bytes of every image a request shows, or "" when it
// shows none.
func imagesNote(req ModelRequest) string {
	var sums []string
	for _, m := range req.Input {
		for _, img := range m.Images {
			data, err := req.ImageBytes(img)
			if err != nil {
				sums = append(sums, "missing")
				continue
			}
			sum := sha256.Sum256(data)
			sums = append(sums, hex.EncodeToString(sum[:6]))
		}
	}
	if len(sums) == 0 {
		return ""
	}
	return "(images: " + strings.Join(sums, ", ") + ")"
}

func demoReply(req ModelRequest) ScriptedReply {
	if results := ToolResults(req); len(results) > 0 {
		parts := make([]string, 0, len(results))
		for _, r := range results {
			parts = append(parts, r.ToolName+": "+r.Output)
		}
		return ScriptedReply{Text: "Done. " + strings.Join(parts, "; ")}
	}
	texts := UserTexts(req)
	if len(texts) == 0 {
		return ScriptedReply{Text: "Demo reply: (no message)"}
	}
	last := strings.TrimSpace(texts[len(texts)-1])
	if rest, ok := strings.CutPrefix(last, "call "); ok {
		name, args, _ := strings.Cut(strings.TrimSpace(rest), " ")
		if strings.TrimSpace(args) == "" {
			args = "{}"
		}
		for _, t := range req.Tools {
			if t.Name == name {
				return ScriptedReply{ToolCalls: []ScriptedToolCall{{Name: name, Arguments: strings.TrimSpace(args)}}}
			}
		}
	}
	return ScriptedReply{Text: "Demo reply: " + last}
}
