package messages

import (
	"context"
	"encoding/base64"
	"reflect"
	"testing"

	"github.com/stepwise-run/stepwise/internal/model/modeltest"
	"github.com/stepwise-run/stepwise/pkg/agent"
)

func TestImagesAreImageBlocksOfTheUserMessageAndTheToolResult(t *testing.T) {
	s, c := newServer(t, events(messageStart,
		start(0, `{"type":"text","text":""}`), delta(0, `{"type":"text_delta","text":"A chart."}`), stop(0),
		messageDelta("end_turn", 3), messageStop))
	req, png, gif := modeltest.ImageRequest()
	if _, err := c.CallModel(context.Background(), req, &deltas{}); err != nil {
		t.Fatal(err)
	}
	messages := s.Body(0)["messages"].([]any)
	block := func(ref agent.ImageReference) map[string]any {
		return map[string]any{"type": "image", "source": map[string]any{
			"type": "base64", "media_type": ref.MIMEType, "data": base64.StdEncoding.EncodeToString(req.Images[ref.SHA256])}}
	}
	wantUser := map[string]any{"role": "user", "content": []any{map[string]any{"type": "text", "text": "What is in this chart?"}, block(png)}}
	if !reflect.DeepEqual(messages[0], wantUser) {
		t.Errorf("user message = %v\nwant %v", messages[0], wantUser)
	}
	wantResult := map[string]any{"role": "user", "content": []any{map[string]any{
		"type": "tool_result", "tool_use_id": "call_1", "is_error": false,
		"content": []any{map[string]any{"type": "text", "text": "Took [image 1]"}, block(gif)},
	}}}
	if !reflect.DeepEqual(messages[2], wantResult) {
		t.Errorf("tool result = %v\nwant %v", messages[2], wantResult)
	}
}
