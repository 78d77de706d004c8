package agent

import "encoding/json"

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
	// Images are a user message's images, or a tool result's; their bytes
	// are in the request's Images.
	Images []ImageReference `json:"images,omitempty"`
}

// ToolCall is one tool call a model requested.
type ToolCall struct {
	// ID is the model's ID for the call: non-empty, without "/", unique in
	// its turn.
	ID string `json:"id"`
	// Name is the tool's name as offered to the model.
	Name string `json:"name"`
	// Arguments is the JSON text the model sent, kept as sent.
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

// OutputItem is one item of a model's output, provider-exact. Item is the
// provider's JSON, replayed unchanged to the same Provider and API; Type,
// Text and ToolCall are a provider-neutral reading of it, used to replay the
// item to another provider (reasoning dropped) and to show it.
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

// Add returns the sum of two usages.
func (u Usage) Add(o Usage) Usage {
	return Usage{
		ModelCalls:        u.ModelCalls + o.ModelCalls,
		InputTokens:       u.InputTokens + o.InputTokens,
		OutputTokens:      u.OutputTokens + o.OutputTokens,
		CachedInputTokens: u.CachedInputTokens + o.CachedInputTokens,
		ReasoningTokens:   u.ReasoningTokens + o.ReasoningTokens,
	}
}
