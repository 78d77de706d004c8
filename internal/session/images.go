package session

import (
	"github.com/stepwise-run/stepwise/internal/media"
)

// ImageReference is an image as a session stores it: where its bytes are
// and what they must be, never the bytes. Its JSON is the media store's
// reference, so a reference a store made is stored as it was made.
type ImageReference struct {
	Type      string `json:"type"`
	URI       string `json:"uri"`
	MIMEType  string `json:"mimeType"`
	SHA256    string `json:"sha256"`
	SizeBytes int64  `json:"sizeBytes"`
}

// MediaReferences converts stored references for the media store.
func MediaReferences(refs []ImageReference) []media.Reference {
	if refs == nil {
		return nil
	}
	out := make([]media.Reference, len(refs))
	for i, r := range refs {
		out[i] = media.Reference(r)
	}
	return out
}

// ImageReferences converts a media store's references for storing.
func ImageReferences(refs []media.Reference) []ImageReference {
	if refs == nil {
		return nil
	}
	out := make([]ImageReference, len(refs))
	for i, r := range refs {
		out[i] = ImageReference(r)
	}
	return out
}

// CheckImages checks the images of one message or tool result: at most
// media.MaxImagesPerMessage, each a valid reference. It reads nothing but
// the references, so a handler may run it on replay.
func CheckImages(refs []ImageReference) error {
	return media.ValidateReferences(MediaReferences(refs))
}

// checkImagesOfStore is the validator's check of a message's images: the
// agent must have a media store, and each image must be in it, so a
// reference the runner could never read is refused when it is sent rather
// than failing a turn later.
func checkImagesOfStore(refs []ImageReference, storeURI string) error {
	if len(refs) == 0 {
		return nil
	}
	if storeURI == "" {
		return reject("this agent has no media store, so its sessions take no images")
	}
	if err := CheckImages(refs); err != nil {
		return reject("%v", err)
	}
	for i, r := range refs {
		if err := media.RequireStoreReference(media.Reference(r), storeURI); err != nil {
			return reject("images[%d].uri: %s is not in this agent's media store %s", i, r.URI, storeURI)
		}
	}
	return nil
}

// imageBytes is about what references add to the stored state.
func imageBytes(refs []ImageReference) int {
	n := 0
	for _, r := range refs {
		n += len(r.URI) + len(r.MIMEType) + len(r.SHA256) + 48
	}
	return n
}

// resultImages are the images the model sees with a call's result: a
// succeeded call's only.
func (r *ToolCallRecord) resultImages() []ImageReference {
	if r.Status != ToolCallSucceeded {
		return nil
	}
	return r.Images
}
