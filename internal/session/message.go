package session

import (
	"encoding/json"

	"github.com/stepwise-run/stepwise/internal/contract"
)

// The session's stored messages are its own types. They have the same JSON
// as the model interface's agent.Message, agent.Usage and
// agent.CallMetadata, and the built-in loop converts between them where it
// builds a model request and reads a model response, so a change to the
// public model interface never changes stored state or recorded histories,
// and a change here never changes the public API.

// Role says who a stored message comes from.
type Role string

// Message roles.
const (
	RoleUser      Role = "user"
	RoleAssistant Role = "assistant"
	RoleTool      Role = "tool"
)

// Message is one stored message of a session. User text and tool results are
// provider-neutral; a model's answer keeps its output items provider-exact,
// so opaque fields replay byte for byte to the same provider and API.
type Message struct {
	// Sequence numbers the session's messages from 1; the session assigns it.
	Sequence int64 `json:"sequence"`
	// TurnID is the turn the message belongs to.
	TurnID string `json:"turnId"`
	// Role says who the message comes from.
	Role Role `json:"role"`
	// Text is the message's text: the user's words, the model's answer, or a
	// tool result as the model sees it.
	Text string `json:"text,omitempty"`
	// ToolCalls are the calls an assistant message requested, in model order.
	ToolCalls []ToolCall `json:"toolCalls,omitempty"`
	// ToolCallID and ToolName identify the call a tool message answers.
	ToolCallID string `json:"toolCallId,omitempty"`
	ToolName   string `json:"toolName,omitempty"`
	// Output holds an assistant message's output items as the provider sent
	// them.
	Output []OutputItem `json:"output,omitempty"`
	// Images are a user message's images, or a tool result's; a message
	// without images has no images key, so its stored bytes are unchanged.
	Images []ImageReference `json:"images,omitempty"`
}

// ToolCall is one tool call a model requested, as stored.
type ToolCall struct {
	ID        string `json:"id"`
	Name      string `json:"name"`
	Arguments string `json:"arguments"`
}

// OutputItemType says what an output item carries.
type OutputItemType string

// Output item types.
const (
	OutputText      OutputItemType = "text"
	OutputToolCall  OutputItemType = "tool_call"
	OutputReasoning OutputItemType = "reasoning"
)

// OutputItem is one item of a model's output, provider-exact: Item is the
// provider's JSON; Type, Text and ToolCall are a provider-neutral reading
// of it.
type OutputItem struct {
	Provider string          `json:"provider"`
	API      string          `json:"api"`
	Item     json.RawMessage `json:"item,omitempty"`
	Type     OutputItemType  `json:"type"`
	Text     string          `json:"text,omitempty"`
	ToolCall *ToolCall       `json:"toolCall,omitempty"`
}

// Usage counts the tokens of model calls.
type Usage struct {
	ModelCalls        int64 `json:"modelCalls"`
	InputTokens       int64 `json:"inputTokens"`
	OutputTokens      int64 `json:"outputTokens"`
	CachedInputTokens int64 `json:"cachedInputTokens"`
	ReasoningTokens   int64 `json:"reasoningTokens"`
}

// Add returns the sum of two usages, a negative count as none and every
// sum stopping at the largest int64, so what a provider reports can lower
// no total and wrap none past a limit.
func (u Usage) Add(o Usage) Usage {
	return Usage{
		ModelCalls:        contract.AddCounts(u.ModelCalls, o.ModelCalls),
		InputTokens:       contract.AddCounts(u.InputTokens, o.InputTokens),
		OutputTokens:      contract.AddCounts(u.OutputTokens, o.OutputTokens),
		CachedInputTokens: contract.AddCounts(u.CachedInputTokens, o.CachedInputTokens),
		ReasoningTokens:   contract.AddCounts(u.ReasoningTokens, o.ReasoningTokens),
	}
}

// Tokens are the input and output tokens, the count spend limits bound.
func (u Usage) Tokens() int64 { return contract.AddCounts(u.InputTokens, u.OutputTokens) }

// CallMetadata names what a model call used, for tracing.
type CallMetadata struct {
	RequestModel  string   `json:"requestModel,omitempty"`
	ResponseModel string   `json:"responseModel,omitempty"`
	Provider      string   `json:"provider,omitempty"`
	ResponseID    string   `json:"responseId,omitempty"`
	FinishReasons []string `json:"finishReasons,omitempty"`
}
