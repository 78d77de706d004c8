package model

import (
	"encoding/base64"

	"github.com/stepwise-run/stepwise/pkg/agent"
)

// ImageDataURL is an image as a base64 data: URL, the form every provider
// takes inline.
func ImageDataURL(ref agent.ImageReference, data []byte) string {
	return "data:" + ref.MIMEType + ";base64," + base64.StdEncoding.EncodeToString(data)
}

// ToolResultImagesText introduces the images of a tool result in the user
// message that carries them, for an API that takes no images in a tool
// result.
func ToolResultImagesText(toolName, toolCallID string) string {
	return "The " + toolName + " tool call " + toolCallID + " returned these images."
}
