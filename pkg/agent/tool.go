package agent

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"

	"github.com/google/jsonschema-go/jsonschema"
)

// Tool is a function tool: a Go function the model can call, with its effect
// class and approval. Build one with NewTool.
type Tool struct {
	// Name is what the model calls the tool.
	Name string
	// Description tells the model what the tool does.
	Description string
	// Parameters is the JSON Schema of the arguments.
	Parameters json.RawMessage
	// Policy is the tool's own effect class and approval; the Agent's tool
	// policies win over it.
	Policy Policy
	// StepLimit, when set, gives the tool's Step its own timeout and, for a
	// tool that retries, its own attempt count.
	StepLimit *StepLimit

	// Poller follows the tasks the tool starts; nil when it starts none.
	Poller TaskPoller

	schema  *jsonschema.Resolved
	prepare func(json.RawMessage) (json.RawMessage, error)
	run     func(ctx context.Context, call ToolContext, args json.RawMessage) (ToolOutput, error)
}

// ToolOption changes a tool that NewTool builds.
type ToolOption func(*toolOptions)

type toolOptions struct {
	stepLimit        *StepLimit
	requiresApproval *bool
	schema           json.RawMessage
	prepare          func(json.RawMessage) (json.RawMessage, error)
	poller           TaskPoller
}

// WithPrepareArguments converts the decoded arguments before the schema
// check, such as an argument shape an earlier version of the tool took. It
// must be deterministic; an error fails the call like a schema violation.
// The stored tool call and the approval keep the model's own arguments.
func WithPrepareArguments(prepare func(arguments json.RawMessage) (json.RawMessage, error)) ToolOption {
	return func(o *toolOptions) { o.prepare = prepare }
}

// WithApproval overrides whether the tool's calls wait for approval; the
// default follows the effect class.
func WithApproval(required bool) ToolOption {
	return func(o *toolOptions) { o.requiresApproval = &required }
}

// WithStepLimit gives the tool's Step its own timeout and attempt count,
// such as a longer timeout for a slow report.
func WithStepLimit(limit StepLimit) ToolOption {
	return func(o *toolOptions) { o.stepLimit = &limit }
}

// WithSchema gives the argument schema instead of deriving it from the
// argument type, for arguments a Go type cannot describe.
func WithSchema(schema json.RawMessage) ToolOption {
	return func(o *toolOptions) { o.schema = schema }
}

// toolNamePattern is what every provider accepts as a tool name.
var toolNamePattern = regexp.MustCompile(`^[a-zA-Z0-9_-]{1,64}$`)

// NewTool turns a function into a tool. The argument schema is derived from
// Args (a struct: fields without omitempty are required, a jsonschema tag
// describes a field) unless WithSchema gives one. The arguments are checked
// against it before fn runs, so fn sees only valid arguments. A string result
// is the output as is, a ToolOutput is the output with its images, and any
// other result is sent to the model as JSON.
func NewTool[Args, Result any](name, description string, effect Effect,
	fn func(ctx context.Context, call ToolContext, args Args) (Result, error), opts ...ToolOption) (Tool, error) {
	if !toolNamePattern.MatchString(name) {
		return Tool{}, fmt.Errorf("tool name %q must be 1 to 64 letters, digits, '_' or '-'", name)
	}
	if !effect.Valid() {
		return Tool{}, fmt.Errorf("tool %s: unknown effect %q", name, effect)
	}
	var o toolOptions
	for _, opt := range opts {
		opt(&o)
	}
	var schema *jsonschema.Schema
	if o.schema != nil {
		schema = new(jsonschema.Schema)
		if err := json.Unmarshal(o.schema, schema); err != nil {
			return Tool{}, fmt.Errorf("tool %s: the given schema is not a JSON Schema: %w", name, err)
		}
	} else {
		var err error
		if schema, err = jsonschema.For[Args](nil); err != nil {
			return Tool{}, fmt.Errorf("tool %s: deriving the argument schema: %w", name, err)
		}
	}
	resolved, err := schema.Resolve(nil)
	if err != nil {
		return Tool{}, fmt.Errorf("tool %s: the argument schema is invalid: %w", name, err)
	}
	params, err := json.Marshal(schema)
	if err != nil {
		return Tool{}, fmt.Errorf("tool %s: encoding the argument schema: %w", name, err)
	}
	run := func(ctx context.Context, call ToolContext, raw json.RawMessage) (ToolOutput, error) {
		var args Args
		if err := json.Unmarshal(raw, &args); err != nil {
			return ToolOutput{}, &ToolExecutionError{Message: fmt.Sprintf("invalid arguments for %s: %v", name, err)}
		}
		result, err := fn(ctx, call, args)
		if err != nil {
			return ToolOutput{}, err
		}
		return encodeResult(result)
	}
	return Tool{
		Name: name, Description: description, Parameters: params,
		Policy: Policy{Effect: effect, RequiresApproval: o.requiresApproval}, StepLimit: o.stepLimit,
		Poller: o.poller, schema: resolved, prepare: o.prepare, run: run,
	}, nil
}

// MustTool is NewTool for tools defined at package level, where a bad
// definition is a programming error.
func MustTool[Args, Result any](name, description string, effect Effect,
	fn func(ctx context.Context, call ToolContext, args Args) (Result, error), opts ...ToolOption) Tool {
	t, err := NewTool(name, description, effect, fn, opts...)
	if err != nil {
		panic(err)
	}
	return t
}

func encodeResult(result any) (ToolOutput, error) {
	switch r := result.(type) {
	case string:
		return ToolOutput{Output: r}, nil
	case ToolOutput:
		return r, nil
	case *ToolOutput:
		if r != nil {
			return *r, nil
		}
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(result); err != nil {
		return ToolOutput{}, fmt.Errorf("encoding the tool result: %w", err)
	}
	return ToolOutput{Output: string(bytes.TrimRight(buf.Bytes(), "\n"))}, nil
}

// Definition returns the tool as offered to a model.
func (t Tool) Definition() ToolDefinition {
	return ToolDefinition{Name: t.Name, Description: t.Description, Parameters: t.Parameters}
}

// Call checks the arguments against the schema and runs the tool once.
// Arguments that are not JSON or break the schema fail with a
// ToolExecutionError that the model sees.
func (t Tool) Call(ctx context.Context, call ToolContext, arguments string) (ToolOutput, error) {
	args, err := t.CheckArguments(arguments)
	if err != nil {
		return ToolOutput{}, err
	}
	return t.run(ctx, call, args)
}

// CheckArguments decodes and validates the arguments the model sent. A null
// for a property means the property is absent, because providers in strict
// schema mode send null for optional arguments.
func (t Tool) CheckArguments(arguments string) (json.RawMessage, error) {
	var value any
	if err := json.Unmarshal([]byte(arguments), &value); err != nil {
		return nil, &ToolExecutionError{Message: fmt.Sprintf("invalid arguments for %s: arguments are not valid JSON", t.Name)}
	}
	if t.prepare != nil {
		prepared, err := t.prepare(json.RawMessage(arguments))
		if err == nil {
			err = json.Unmarshal(prepared, &value)
		}
		if err != nil {
			return nil, &ToolExecutionError{Message: fmt.Sprintf("invalid arguments for %s: %v", t.Name, err)}
		}
	}
	if obj, ok := value.(map[string]any); ok {
		for k, v := range obj {
			if v == nil {
				delete(obj, k)
			}
		}
	}
	if t.schema != nil {
		if err := t.schema.Validate(value); err != nil {
			return nil, &ToolExecutionError{Message: fmt.Sprintf("invalid arguments for %s: %v", t.Name, err)}
		}
	}
	cleaned, err := json.Marshal(value)
	if err != nil {
		return nil, fmt.Errorf("re-encoding the arguments of %s: %w", t.Name, err)
	}
	return cleaned, nil
}

// ToolContext is what a tool call knows about itself.
type ToolContext struct {
	// SessionID, TurnID and ToolCallID name the call.
	SessionID  string
	TurnID     string
	ToolCallID string
	// IdempotencyKey is "<session's engine ID>/<turnID>/<toolCallID>", the
	// same on every attempt and unique on the engine: the engine's ID of a
	// session carries its Agent's namespace and Flow type, so sessions of
	// one ID in two namespaces never share a key. Pass it to the system the
	// tool writes to, so a repeated call changes nothing more.
	IdempotencyKey string
	// Attempt is the one-based attempt of the tool Step.
	Attempt int
	// Effect is the call's effect class after the tool policies; it chose the
	// tool Step.
	Effect Effect
	// Answers are the resolutions of the questions this call asked, oldest
	// first; Continuation is what the last InputRequest asked to get back.
	Answers      []QuestionAnswer
	Continuation string
	// Heartbeat records liveness for a long call; the session already
	// heartbeats in the background.
	Heartbeat func()
	// Checkpoint is what an earlier attempt of this Step saved with
	// SaveCheckpoint, such as the ID of a task it started; empty when none
	// did. SaveCheckpoint records text with the engine before it returns,
	// and with every later heartbeat of the attempt, so once it returns a
	// retried attempt gets the text even if the worker dies at once.
	// Checkpoints are best effort: one the engine could not be reached for
	// is recorded only if a later heartbeat gets through.
	Checkpoint     string
	SaveCheckpoint func(text string)
	// Events writes session events for this call.
	Events EventWriter
	// MediaStore keeps the images the tool returns in a ToolOutput; nil
	// when the agent has no media store.
	MediaStore MediaStore
}

// InputRequest asks the user a question before the tool takes any effect.
// A tool returns it as its error: the session asks the question, waits for
// the answer, and runs the tool again with the answer in
// ToolContext.Answers. Return it only before the tool has changed anything.
type InputRequest struct {
	Question       string
	Choices        []string
	AllowsFreeText bool
	// Continuation, the input continuation, is handed back in
	// ToolContext.Continuation on the next run, so the tool can tell which
	// question the answer is for. It is not a turn continuation, which
	// decides whether the model is called again.
	Continuation string
}

func (r *InputRequest) Error() string { return "the tool asks the user: " + r.Question }

// AskUser returns an InputRequest for a question; without choices the user
// answers in free text.
func AskUser(question string, choices ...string) error {
	return &InputRequest{Question: question, Choices: choices, AllowsFreeText: len(choices) == 0}
}

// QuestionResolution says how a tool's question ended.
type QuestionResolution string

// Question resolutions.
const (
	QuestionAnswered       QuestionResolution = "answered"
	QuestionDeclined       QuestionResolution = "declined"
	QuestionDeadlinePassed QuestionResolution = "deadline_passed"
)

// QuestionAnswer is how the user resolved a question a tool asked.
type QuestionAnswer struct {
	// QuestionID is the interrupt ID, "<toolCallID>-input-<n>".
	QuestionID string             `json:"questionId"`
	Question   string             `json:"question"`
	Resolution QuestionResolution `json:"resolution"`
	Answer     string             `json:"answer,omitempty"`
}

// EventWriter writes a tool's own session events. Events are best effort.
type EventWriter interface {
	WriteEvent(eventType string, payload any)
}

// ToolExecutionError is a failure the model should see. The call is recorded
// failed with this message and is not retried.
type ToolExecutionError struct {
	Message string
}

func (e *ToolExecutionError) Error() string { return e.Message }

// ToolOutcomeUnknownError says the tool sent a write and cannot tell whether
// it took effect. The call is recorded outcome_unknown and is not retried.
type ToolOutcomeUnknownError struct {
	Message string
}

func (e *ToolOutcomeUnknownError) Error() string { return e.Message }

// Failed returns a ToolExecutionError.
func Failed(format string, args ...any) error {
	return &ToolExecutionError{Message: fmt.Sprintf(format, args...)}
}

// OutcomeUnknown returns a ToolOutcomeUnknownError.
func OutcomeUnknown(format string, args ...any) error {
	return &ToolOutcomeUnknownError{Message: fmt.Sprintf(format, args...)}
}

// IsExecutionError reports whether err is, or wraps, a ToolExecutionError.
func IsExecutionError(err error) (*ToolExecutionError, bool) {
	var e *ToolExecutionError
	ok := errors.As(err, &e)
	return e, ok
}

// IsOutcomeUnknown reports whether err is, or wraps, a
// ToolOutcomeUnknownError.
func IsOutcomeUnknown(err error) (*ToolOutcomeUnknownError, bool) {
	var e *ToolOutcomeUnknownError
	ok := errors.As(err, &e)
	return e, ok
}
