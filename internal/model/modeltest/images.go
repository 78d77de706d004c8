package modeltest

import (
	"crypto/sha256"
	"encoding/hex"

	"github.com/stepwise-run/stepwise/internal/media/mediatest"
	"github.com/stepwise-run/stepwise/pkg/agent"
)

// ImageRequest is a conversation with images where every provider shows
// them: a user message with a PNG, the model's tool call, and the call's
// result with a GIF. Its Images hold the bytes of both.
func ImageRequest() (req agent.ModelRequest, png, gif agent.ImageReference) {
	pngData, gifData := mediatest.PNG(3, 2, 1), mediatest.GIF(2, 2, 5)
	png, gif = reference("image/png", pngData), reference("image/gif", gifData)
	req = agent.ModelRequest{
		Input: []agent.Message{
			{Role: agent.RoleUser, Text: "What is in this chart?", Images: []agent.ImageReference{png}},
			{Role: agent.RoleAssistant, ToolCalls: []agent.ToolCall{{ID: "call_1", Name: "screenshot", Arguments: "{}"}}},
			{Role: agent.RoleTool, ToolCallID: "call_1", ToolName: "screenshot", Text: "Took [image 1]", Images: []agent.ImageReference{gif}},
		},
		Images: map[string][]byte{png.SHA256: pngData, gif.SHA256: gifData},
	}
	return req, png, gif
}

func reference(mime string, data []byte) agent.ImageReference {
	sum := sha256.Sum256(data)
	h := hex.EncodeToString(sum[:])
	return agent.ImageReference{Type: "image", URI: "s3://media/sha256/" + h, MIMEType: mime, SHA256: h, SizeBytes: int64(len(data))}
}
