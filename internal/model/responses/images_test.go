package responses

import (
	"context"
	"encoding/base64"
	"reflect"
	"strings"
	"testing"

	"github.com/stepwise-run/stepwise/internal/model/modeltest"
	"github.com/stepwise-run/stepwise/pkg/agent"
)

func TestImagesAreInputImagePartsOfTheMessageAndTheCallOutput(t *testing.T) {
	s, c := newServer(t, events(itemDone(0, messageItem), completed))
	req, png, gif := modeltest.ImageRequest()
	if _, err := c.CallModel(context.Background(), req, &deltas{}); err != nil {
		t.Fatal(err)
	}
	input := s.Body(0)["input"].([]any)
	dataURL := func(ref agent.ImageReference) string {
		return "data:" + ref.MIMEType + ";base64," + base64.StdEncoding.EncodeToString(req.Images[ref.SHA256])
	}
	wantUser := []any{
		map[string]any{"type": "input_text", "text": "What is in this chart?"},
		map[string]any{"type": "input_image", "image_url": dataURL(png), "detail": "auto"},
	}
	if got := input[0].(map[string]any)["content"]; !reflect.DeepEqual(got, wantUser) {
		t.Errorf("user message content = %v\nwant %v", got, wantUser)
	}
	output := input[2].(map[string]any)
	wantOutput := []any{
		map[string]any{"type": "input_text", "text": "Took [image 1]"},
		map[string]any{"type": "input_image", "image_url": dataURL(gif), "detail": "auto"},
	}
	if output["type"] != "function_call_output" || output["call_id"] != "call_1" || !reflect.DeepEqual(output["output"], wantOutput) {
		t.Errorf("function_call_output = %v\nwant output %v", output, wantOutput)
	}

	// A request whose bytes the session did not load fails before it is
	// sent, rather than show the model the text alone.
	delete(req.Images, gif.SHA256)
	if _, err := c.CallModel(context.Background(), req, &deltas{}); err == nil || !strings.Contains(err.Error(), gif.URI) {
		t.Errorf("missing bytes: %v", err)
	}
	if s.Count() != 1 {
		t.Errorf("%d requests sent", s.Count())
	}
}
