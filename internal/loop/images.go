package loop

import (
	"context"

	"github.com/stepwise-run/stepwise/internal/media"
	"github.com/stepwise-run/stepwise/internal/session"
	"github.com/stepwise-run/stepwise/pkg/agent"
)

// Option changes a runner that New builds.
type Option func(*Runner)

// WithMediaStore shows the model the images of its sessions, read from the
// store for each model call, and gives function tools the store for the
// images they return. Without a store the model sees text only, and a
// function tool's images fail its call.
func WithMediaStore(store media.Store) Option {
	return func(r *Runner) { r.store = store }
}

// toolMediaStore is the store as a function tool sees it.
type toolMediaStore struct{ store media.Store }

func (s toolMediaStore) PutImage(ctx context.Context, data []byte) (agent.ImageReference, error) {
	ref, err := s.store.PutImage(ctx, data)
	return agent.ImageReference(ref), err
}

// noImagesText fails a call whose tool returned images to a runner without
// a store: no retry could show them.
const noImagesText = "the tool returned images, but this agent has no media store to keep them"

// resultImages checks the images a tool returned: each must be a reference
// of this runner's store, so the model calls that replay them can read
// them. A reference of another store fails the attempt.
func (r *Runner) resultImages(out agent.ToolOutput) ([]session.ImageReference, error) {
	if len(out.Images) == 0 {
		return nil, nil
	}
	refs := make([]session.ImageReference, len(out.Images))
	for i, img := range out.Images {
		if err := media.RequireStoreReference(media.Reference(img), r.store.StoreURI()); err != nil {
			return nil, err
		}
		refs[i] = session.ImageReference(img)
	}
	if err := session.CheckImages(refs); err != nil {
		return nil, err
	}
	return refs, nil
}

// withImageBytes reads the bytes of every image the request's messages
// reference, once per image, right before the call, so a retried attempt
// or one on another worker sends the same bytes. Without a store the
// references are dropped and the model sees the text. A failed read fails
// the attempt.
func (r *Runner) withImageBytes(ctx context.Context, req agent.ModelRequest) (agent.ModelRequest, error) {
	if r.store == nil {
		req.Input = withoutImages(req.Input)
		return req, nil
	}
	for _, m := range req.Input {
		for _, img := range m.Images {
			if _, ok := req.Images[img.SHA256]; ok {
				continue
			}
			data, err := r.store.GetImage(ctx, media.Reference(img))
			if err != nil {
				return req, err
			}
			if req.Images == nil {
				req.Images = map[string][]byte{}
			}
			req.Images[img.SHA256] = data
		}
	}
	return req, nil
}

// withoutImages copies messages without their image references.
func withoutImages(in []agent.Message) []agent.Message {
	out := make([]agent.Message, len(in))
	for i, m := range in {
		m.Images = nil
		out[i] = m
	}
	return out
}
