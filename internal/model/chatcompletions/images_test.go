package chatcompletions

import (
	"context"
	"encoding/base64"
	"reflect"
	"testing"

	"github.com/stepwise-run/stepwise/internal/model/modeltest"
	"github.com/stepwise-run/stepwise/pkg/agent"
)

func TestImagesAreImageURLPartsAndToolResultImagesFollowInAUserMessage(t *testing.T) {
	s, c := newServer(t, sse([]string{chunk(`{"role":"assistant","content":"A bar chart."}`, "stop"), usageChunk}, true))
	req, png, gif := modeltest.ImageRequest()
	// A second tool result of the same run, without images: the images
	// follow the run's last tool message.
	req.Input[1].ToolCalls = append(req.Input[1].ToolCalls, agent.ToolCall{ID: "call_2", Name: "lookup", Arguments: "{}"})
	req.Input = append(req.Input, agent.Message{Role: agent.RoleTool, ToolCallID: "call_2", ToolName: "lookup", Text: "found"})
	if _, err := c.CallModel(context.Background(), req, &deltas{}); err != nil {
		t.Fatal(err)
	}
	messages := s.Body(0)["messages"].([]any)
	part := func(ref agent.ImageReference) map[string]any {
		return map[string]any{"type": "image_url", "image_url": map[string]any{
			"url": "data:" + ref.MIMEType + ";base64," + base64.StdEncoding.EncodeToString(req.Images[ref.SHA256]), "detail": "auto"}}
	}
	want := []any{
		map[string]any{"role": "user", "content": []any{map[string]any{"type": "text", "text": "What is in this chart?"}, part(png)}},
		messages[1], // the assistant's calls
		map[string]any{"role": "tool", "tool_call_id": "call_1", "content": "Took [image 1]"},
		map[string]any{"role": "tool", "tool_call_id": "call_2", "content": "found"},
		map[string]any{"role": "user", "content": []any{
			map[string]any{"type": "text", "text": "The screenshot tool call call_1 returned these images."}, part(gif)}},
	}
	if !reflect.DeepEqual(messages, want) {
		t.Errorf("messages = %v\nwant %v", messages, want)
	}
}
