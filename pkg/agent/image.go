package agent

import (
	"context"
	"fmt"
)

// ImageReference is an image as sessions and model requests carry it: where
// its bytes are in the agent's media store and what they must be. Sessions
// never hold image bytes.
type ImageReference struct {
	// Type is always "image".
	Type string `json:"type"`
	// URI is <store URI>/sha256/<SHA256>.
	URI string `json:"uri"`
	// MIMEType is image/png, image/jpeg, image/gif or image/webp.
	MIMEType string `json:"mimeType"`
	// SHA256 is the lowercase hex SHA-256 of the bytes.
	SHA256 string `json:"sha256"`
	// SizeBytes is the number of bytes, at most 3,750,000.
	SizeBytes int64 `json:"sizeBytes"`
}

// MediaStore keeps images for a tool. PutImage checks the bytes (a PNG,
// JPEG, GIF or WebP image of at most 3,750,000 bytes), stores them under
// their SHA-256 and returns their reference; the same bytes always make
// the same reference and one object, so a retried attempt may upload
// again.
type MediaStore interface {
	PutImage(ctx context.Context, data []byte) (ImageReference, error)
}

// ToolOutput is a tool result with images. A function tool returns it as
// its result, and a tool source from CallTool, to show the model images it
// uploaded with ToolContext.MediaStore: at most 20, each a reference of the
// agent's store. An invalid reference fails the attempt; images from an
// agent without a media store fail the call, since no retry could show
// them.
type ToolOutput struct {
	// Output is the result's text as the model sees it.
	Output string
	// Images are the result's images.
	Images []ImageReference
}

// ImageBytes returns the bytes of a request's image, which the session
// loaded from the media store before the call. A model client that shows
// images calls it for every reference of the request's messages; a missing
// image is an error, since sending the text alone would show the model
// something other than what the session stored.
func (r ModelRequest) ImageBytes(ref ImageReference) ([]byte, error) {
	data, ok := r.Images[ref.SHA256]
	if !ok {
		return nil, fmt.Errorf("the request carries no bytes for image %s", ref.URI)
	}
	return data, nil
}
