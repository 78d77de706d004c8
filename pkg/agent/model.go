package agent

import (
	"context"
	"encoding/json"
	"fmt"
	"time"
)

// ModelClient makes model calls. A call sends exactly one request with no
// retries of its own (the RunModel Step's retry policy decides), sends the
// whole input every time with no provider-side conversation state, and
// returns each output item provider-exact.
type ModelClient interface {
	// CallModel makes one model call, streaming text and reasoning deltas to
	// out as they arrive.
	CallModel(ctx context.Context, req ModelRequest, out OutputWriter) (ModelResponse, error)
	// EstimateInputTokens estimates the request's input size without I/O,
	// for compaction.
	EstimateInputTokens(req ModelRequest) int64
}

// ForcedToolChoice is implemented by a model client that cannot always force
// a tool call. The session asks it before a request with ToolChoiceRequired,
// so a planning turn that needs a forced choice is refused with a clear
// error rather than sent.
type ForcedToolChoice interface {
	// SupportsForcedToolChoice reports whether a request with these
	// settings may require a tool call.
	SupportsForcedToolChoice(settings ModelSettings) bool
}

// ToolChoice says whether the model may, must, or must not call tools.
type ToolChoice string

// Tool choices.
const (
	ToolChoiceAuto     ToolChoice = "auto"
	ToolChoiceRequired ToolChoice = "required"
	ToolChoiceNone     ToolChoice = "none"
)

// ModelRequest is the whole input of one model call, built from committed
// session state.
type ModelRequest struct {
	// Instructions are the agent's instructions.
	Instructions string `json:"instructions,omitempty"`
	// Input is every stored message in sequence order; each assistant
	// tool call is followed by its result.
	Input []Message `json:"input"`
	// Tools are the tools offered to this call.
	Tools []ToolDefinition `json:"tools,omitempty"`
	// ToolChoice constrains tool use.
	ToolChoice ToolChoice `json:"toolChoice,omitempty"`
	// Settings are the model settings.
	Settings ModelSettings `json:"settings"`
	// TurnID and ModelCall name the call: its turn, and its one-based
	// number among the turn's model calls. Every attempt of one RunModel
	// Step carries the same, so an ID a client makes up from them (for a
	// tool call whose provider sent none) is the same on a retry. Zero
	// outside a turn.
	TurnID    string `json:"turnId,omitempty"`
	ModelCall int    `json:"modelCall,omitempty"`
	// Images are the bytes of every image the Input references, by
	// SHA-256, read from the media store right before the call; read them
	// with ImageBytes.
	Images map[string][]byte `json:"-"`
}

// ModelSettings tune a model call.
type ModelSettings struct {
	MaxOutputTokens int64  `json:"maxOutputTokens,omitempty"`
	ReasoningEffort string `json:"reasoningEffort,omitempty"`
}

// ToolDefinition is a tool as offered to a model.
type ToolDefinition struct {
	Name        string `json:"name"`
	Description string `json:"description,omitempty"`
	// Parameters is the JSON Schema of the arguments.
	Parameters json.RawMessage `json:"parameters"`
}

// ModelResponse is the result of one model call.
type ModelResponse struct {
	// Output is the model's output items in order.
	Output []OutputItem `json:"output"`
	// Usage is this call's usage only.
	Usage Usage `json:"usage"`
	// Metadata describes the call for tracing; the session never stores it.
	Metadata CallMetadata `json:"metadata"`
}

// Text joins the text items of the output.
func (r ModelResponse) Text() string {
	var text string
	for _, item := range r.Output {
		if item.Type == OutputText {
			text += item.Text
		}
	}
	return text
}

// ToolCalls lists the tool calls of the output in model order.
func (r ModelResponse) ToolCalls() []ToolCall {
	var calls []ToolCall
	for _, item := range r.Output {
		if item.Type == OutputToolCall && item.ToolCall != nil {
			calls = append(calls, *item.ToolCall)
		}
	}
	return calls
}

// CallMetadata names what a model call used, where the client knows it.
type CallMetadata struct {
	RequestModel  string   `json:"requestModel,omitempty"`
	ResponseModel string   `json:"responseModel,omitempty"`
	Provider      string   `json:"provider,omitempty"`
	ResponseID    string   `json:"responseId,omitempty"`
	FinishReasons []string `json:"finishReasons,omitempty"`
}

// OutputWriter receives a model call's streamed deltas as session events.
// Writes are best effort and never fail the call.
type OutputWriter interface {
	TextDelta(text string)
	ReasoningDelta(text string)
}

// ModelError is a model call the provider refused or failed. Retryable
// failures (timeouts, 408, 409, 429, 5xx, a broken stream) are retried by the
// RunModel Step's retry policy, after RetryAfter when the provider asked for
// a delay; others (400, 401, 403, 404) fail the turn at once. The message
// names the provider and never carries a credential.
type ModelError struct {
	Provider   string
	StatusCode int
	Retryable  bool
	RetryAfter time.Duration
	Message    string
}

func (e *ModelError) Error() string {
	if e.StatusCode > 0 {
		return fmt.Sprintf("%s model call failed with HTTP %d: %s", e.Provider, e.StatusCode, e.Message)
	}
	return fmt.Sprintf("%s model call failed: %s", e.Provider, e.Message)
}

// EstimateTokens is the rule of thumb for clients without a tokenizer: about
// four bytes of UTF-8 per token, counted over everything the request sends.
func EstimateTokens(req ModelRequest) int64 {
	n := len(req.Instructions)
	for _, m := range req.Input {
		n += len(m.Text)
		for _, c := range m.ToolCalls {
			n += len(c.Name) + len(c.Arguments)
		}
	}
	for _, t := range req.Tools {
		n += len(t.Name) + len(t.Description) + len(t.Parameters)
	}
	return int64(n+3) / 4
}
