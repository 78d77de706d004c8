package mcp

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/stepwise-run/stepwise/internal/media"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"go.opentelemetry.io/otel/propagation"

	"github.com/stepwise-run/stepwise/internal/session"
	"github.com/stepwise-run/stepwise/internal/tracing"
	"github.com/stepwise-run/stepwise/pkg/agent"
)

// ToolProgressEvent is the session event of a tool's progress
// notification.
const ToolProgressEvent = "mcp.tool_progress"

// Texts of results that carry an outcome without any text, and of input
// the session cannot provide.
const (
	OutcomeUnknownNoText = "the MCP server could not tell whether the call took effect"
	RejectedNoText       = "the MCP server rejected the call"
	ErrorNoText          = "the MCP tool reported an error without a message"
	inputRequestPrefix   = "the MCP server asked for input that this agent session cannot provide yet"
)

// maxRepeatRequests bounds how often a call is sent again at once when the
// server asks for nothing but a repeat.
const maxRepeatRequests = 3

// CallInterruptedError is a call that was sent and broke before it gave an
// answer: a broken stream, a server that exited, a request that timed out,
// an internal error, or an answer that is not JSON-RPC. It is a Step
// failure, so only a read or an idempotent write is sent again.
type CallInterruptedError struct {
	Tool  string
	Cause error
}

func (e *CallInterruptedError) Error() string {
	return fmt.Sprintf("the MCP call of %s was interrupted after it was sent: %v", e.Tool, e.Cause)
}

func (e *CallInterruptedError) Unwrap() error { return e.Cause }

// callTool sends one tools/call over a new connection and maps the answer
// onto the outcomes a call records: succeeded, failed, outcome unknown, or
// an interruption the tool Step retries by the call's effect.
func callTool(ctx context.Context, server Server, call agent.ToolContext, mcpName string, tool agent.SourceCall) (agent.ToolOutput, error) {
	var args map[string]any
	if err := json.Unmarshal([]byte(tool.Arguments), &args); err != nil {
		return agent.ToolOutput{}, agent.Failed("invalid arguments for %s: arguments are not a JSON object", tool.Name)
	}
	opts := &mcp.ClientOptions{
		MultiRoundTrip: &mcp.MultiRoundTripOptions{Disabled: true},
		ProgressNotificationHandler: func(_ context.Context, req *mcp.ProgressNotificationClientRequest) {
			if call.Events == nil || req.Params == nil {
				return
			}
			call.Events.WriteEvent(ToolProgressEvent, map[string]any{
				"tool_call_id": call.ToolCallID, "tool_name": tool.Name,
				"progress": req.Params.Progress, "total": req.Params.Total, "message": req.Params.Message,
			})
		},
	}
	if server.TaskPolling == PollInSession && call.Checkpoint != "" {
		// An earlier attempt's tools/call returned a task: resume it
		// without calling the tool again.
		var cp taskCheckpoint
		if json.Unmarshal([]byte(call.Checkpoint), &cp) == nil && cp.TaskID != "" {
			return agent.ToolOutput{}, agent.StartTask(cp.TaskID, cp.Interval)
		}
	}
	cs, err := connectAttempts(ctx, server, opts)
	if err != nil {
		return agent.ToolOutput{}, err
	}
	defer func() { _ = cs.Close() }()
	params := &mcp.CallToolParams{Name: mcpName, Arguments: args, Meta: withTraceContext(ctx, mcp.Meta{IdempotencyKeyMetaKey: call.IdempotencyKey})}
	params.SetProgressToken(call.ToolCallID)
	reqCtx, cancel := context.WithTimeout(ctx, orDuration(server.RequestTimeout, DefaultRequestTimeout))
	defer cancel()
	for repeat := 0; ; repeat++ {
		res, err := cs.CallTool(reqCtx, params)
		if err != nil {
			return agent.ToolOutput{}, callError(tool.Name, err)
		}
		if task, ok := createdTask(res); ok {
			return startedTask(ctx, cs, server, call, tool.Name, task)
		}
		if !res.NeedsInput() {
			return callResult(ctx, server, res)
		}
		if len(res.InputRequests) > 0 {
			return agent.ToolOutput{}, agent.Failed("%s (%s)", inputRequestPrefix, describeInputRequests(res.InputRequests))
		}
		// A state-only answer asks for the same call again, with the state
		// it handed back.
		if repeat+1 >= maxRepeatRequests {
			return agent.ToolOutput{}, &CallInterruptedError{Tool: tool.Name, Cause: errors.New("the server kept asking to repeat the call")}
		}
		params.RequestState = res.RequestState
	}
}

// startedTask follows a task a tools/call returned: the session polls a
// Streamable HTTP server's task, after the Step saved its ID; a stdio
// server's task is polled here.
func startedTask(ctx context.Context, cs *mcp.ClientSession, server Server, call agent.ToolContext, tool string, task *Task) (agent.ToolOutput, error) {
	if len(task.TaskID) > session.MaxTaskIDBytes {
		// Not kept, not polled, not sent back: the server named its task
		// with more than a session keeps, and the task may run.
		return agent.ToolOutput{}, lostTask(call.Effect, fmt.Sprintf(
			"MCP server %s started a task for %s with a taskId of %d bytes, over the %d allowed; the task may run",
			server.Name, tool, len(task.TaskID), session.MaxTaskIDBytes))
	}
	if server.TaskPolling != PollInSession {
		return waitTask(ctx, cs, server, call, tool, task)
	}
	interval := nextPollInterval(0, task)
	if call.SaveCheckpoint != nil {
		cp, _ := json.Marshal(taskCheckpoint{TaskID: task.TaskID, Interval: interval})
		call.SaveCheckpoint(string(cp))
	}
	return agent.ToolOutput{}, agent.StartTask(task.TaskID, interval)
}

// connectAttempts connects for a request, up to ConnectionAttempts times;
// a request that never connected was never sent.
func connectAttempts(ctx context.Context, server Server, opts *mcp.ClientOptions) (*mcp.ClientSession, error) {
	var last error
	for attempt := 1; attempt <= ConnectionAttempts; attempt++ {
		cs, err := connect(ctx, server, opts)
		if err == nil {
			return cs, nil
		}
		last = err
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		if attempt < ConnectionAttempts {
			select {
			case <-time.After(time.Duration(attempt) * 200 * time.Millisecond):
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		}
	}
	return nil, agent.Failed("%s: %d connection attempts failed: %v", session.ToolCallNotRunPrefix, ConnectionAttempts, last)
}

// callError maps a failed tools/call. A JSON-RPC error answer is the tool's
// failure, unless it is an internal or parse error, which a gateway can
// return after the server ran the call; anything else broke after the call
// was sent. The Dex outcome key in error.data._meta wins over the code.
func callError(tool string, err error) error {
	wire := serverError(err)
	if wire == nil {
		return &CallInterruptedError{Tool: tool, Cause: err}
	}
	text := fmt.Sprintf("MCP error %d: %s", wire.Code, wire.Message)
	switch outcome(errorMeta(wire)) {
	case outcomeUnknown:
		return agent.OutcomeUnknown("%s", text)
	case outcomeRejected:
		return agent.Failed("%s", text)
	}
	if wire.Code == jsonrpc.CodeInternalError || wire.Code == jsonrpc.CodeParseError {
		return &CallInterruptedError{Tool: tool, Cause: err}
	}
	return agent.Failed("%s", text)
}

// localErrors are the codes and messages the SDK gives failures of its own
// side, such as a request whose HTTP exchange broke; they are never the
// server's answer.
var localErrors = map[int64]string{
	-32001: "unknown error", -32003: "client is closing", -32004: "server is closing", -32005: "rejected by transport",
}

// serverError finds the JSON-RPC error the server answered with in an
// error chain, skipping the SDK's own.
func serverError(err error) *jsonrpc.Error {
	var found *jsonrpc.Error
	var walk func(error) bool
	walk = func(e error) bool {
		if e == nil {
			return false
		}
		// The chain is walked by hand: errors.As would stop at the SDK's
		// own error and miss the server's beside it.
		if w, ok := e.(*jsonrpc.Error); ok && localErrors[w.Code] != w.Message { //nolint:errorlint // see above
			found = w
			return true
		}
		switch u := e.(type) { //nolint:errorlint // see above
		case interface{ Unwrap() []error }:
			for _, inner := range u.Unwrap() {
				if walk(inner) {
					return true
				}
			}
		case interface{ Unwrap() error }:
			return walk(u.Unwrap())
		}
		return false
	}
	walk(err)
	return found
}

// errorMeta reads a JSON-RPC error's data._meta, where the Dex outcome key
// goes in the error form.
func errorMeta(wire *jsonrpc.Error) map[string]any {
	var data struct {
		Meta map[string]any `json:"_meta"`
	}
	if len(wire.Data) > 0 {
		_ = json.Unmarshal(wire.Data, &data)
	}
	return data.Meta
}

const (
	outcomeUnknown  = "unknown"
	outcomeRejected = "rejected"
)

// outcome reads the Dex outcome key; other values are reserved and
// ignored.
func outcome(meta map[string]any) string {
	value, _ := meta[OutcomeMetaKey].(string)
	switch value {
	case outcomeUnknown, outcomeRejected:
		return value
	}
	return ""
}

// callResult maps a tools/call result: the Dex outcome key first, then
// isError, else the result's text and images. An error result's images are
// omitted from its text, so the recorded error holds no image bytes.
func callResult(ctx context.Context, server Server, res *mcp.CallToolResult) (agent.ToolOutput, error) {
	switch outcome(res.Meta) {
	case outcomeUnknown:
		return agent.ToolOutput{}, agent.OutcomeUnknown("%s", orText(ResultText(res, true), OutcomeUnknownNoText))
	case outcomeRejected:
		return agent.ToolOutput{}, agent.Failed("%s", orText(ResultText(res, true), RejectedNoText))
	}
	if res.IsError {
		return agent.ToolOutput{}, agent.Failed("%s", orText(ResultText(res, true), ErrorNoText))
	}
	images, err := uploadImages(ctx, server.media, res)
	if err != nil {
		return agent.ToolOutput{}, err
	}
	return agent.ToolOutput{Output: ResultText(res, false), Images: images}, nil
}

// uploadImages puts the image content of a successful result into the
// media store, in order, and returns their references. More than
// media.MaxImagesPerMessage images, or bytes that are not a supported
// image, fail the call, since the server would send the same again; a
// store that cannot write fails the attempt, which the call's effect may
// retry. The same bytes make the same object, so a retried upload is
// harmless.
func uploadImages(ctx context.Context, store media.Store, res *mcp.CallToolResult) ([]agent.ImageReference, error) {
	var images []*mcp.ImageContent
	for _, c := range res.Content {
		if img, ok := c.(*mcp.ImageContent); ok {
			images = append(images, img)
		}
	}
	if store == nil || len(images) == 0 {
		return nil, nil
	}
	if len(images) > media.MaxImagesPerMessage {
		return nil, agent.Failed("the tool returned %d images, more than the %d a result may carry", len(images), media.MaxImagesPerMessage)
	}
	refs := make([]agent.ImageReference, 0, len(images))
	for i, img := range images {
		ref, err := store.PutImage(ctx, img.Data)
		if errors.Is(err, media.ErrInvalidImage) {
			return nil, agent.Failed("image %d of the result (%s): %v", i+1, img.MIMEType, err)
		}
		if err != nil {
			return nil, fmt.Errorf("keeping image %d of the result: %w", i+1, err)
		}
		refs = append(refs, agent.ImageReference(ref))
	}
	return refs, nil
}

func orText(text, fallback string) string {
	if strings.TrimSpace(text) == "" {
		return fallback
	}
	return text
}

// ResultText is a result as the model reads it: text blocks joined with
// newlines, other content as JSON, and "[image n]" in place of each image,
// counting from 1 ("[image n omitted]" when omitted). A result with only
// structured content shows it as JSON.
func ResultText(res *mcp.CallToolResult, omitImages bool) string {
	var parts []string
	images := 0
	for _, c := range res.Content {
		switch c := c.(type) {
		case *mcp.TextContent:
			parts = append(parts, c.Text)
		case *mcp.ImageContent:
			images++
			if omitImages {
				parts = append(parts, fmt.Sprintf("[image %d omitted]", images))
			} else {
				parts = append(parts, fmt.Sprintf("[image %d]", images))
			}
		default:
			raw, err := json.Marshal(c)
			if err != nil {
				raw = []byte(fmt.Sprintf("%q", fmt.Sprint(c)))
			}
			parts = append(parts, string(raw))
		}
	}
	if len(parts) == 0 && res.StructuredContent != nil {
		if raw, err := json.Marshal(res.StructuredContent); err == nil {
			parts = append(parts, string(raw))
		}
	}
	return strings.Join(parts, "\n")
}

// describeInputRequests names each input a server asked for, in a stable
// order.
func describeInputRequests(requests mcp.InputRequestMap) string {
	var out []string
	for _, key := range slices.Sorted(maps.Keys(requests)) {
		switch r := requests[key].(type) {
		case *mcp.ElicitParams:
			out = append(out, describeRequest("elicitation/create", r.Message))
		case *mcp.CreateMessageParams, *mcp.CreateMessageWithToolsParams: //nolint:staticcheck // servers of older protocols still ask
			out = append(out, describeRequest("sampling/createMessage", ""))
		case *mcp.ListRootsParams: //nolint:staticcheck // servers of older protocols still ask
			out = append(out, describeRequest("roots/list", ""))
		default:
			out = append(out, fmt.Sprintf("a request of type %T", r))
		}
	}
	return strings.Join(out, ", ")
}

// describeRequest names one input request in the text of a call that asked
// for input the session cannot provide.
func describeRequest(method, message string) string {
	switch {
	case method == "elicitation/create" && message != "":
		return fmt.Sprintf("an answer to '%s'", message)
	case method == "sampling/createMessage":
		return "a model completion"
	case method == "roots/list":
		return "the list of roots"
	}
	return "a " + method + " request"
}

// withTraceContext adds the W3C trace context of ctx's current span, the
// tool Step's, to a request's _meta, so a server that traces joins the
// trace.
func withTraceContext(ctx context.Context, meta mcp.Meta) mcp.Meta {
	carrier := propagation.MapCarrier{}
	tracing.Inject(ctx, carrier)
	if len(carrier) == 0 {
		return meta
	}
	if meta == nil {
		meta = mcp.Meta{}
	}
	for k, v := range carrier {
		meta[k] = v
	}
	return meta
}
