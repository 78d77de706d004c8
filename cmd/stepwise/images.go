package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"strings"

	"github.com/stepwise-run/stepwise/internal/media"
	"github.com/stepwise-run/stepwise/internal/media/localstore"
	"github.com/stepwise-run/stepwise/internal/media/s3store"
	sessions "github.com/stepwise-run/stepwise/pkg/client"
)

// imageFlags are the flags of send's images: the files, and the Agent's
// media store they go to first.
type imageFlags struct {
	files []string
	// store is the store URI: s3://<bucket>[/<prefix>] or
	// file://<percent-encoded root>, as the MediaStore's status shows it.
	store       string
	s3Endpoint  string
	s3Region    string
	s3PathStyle bool
}

// imageList collects repeated --image flags.
type imageList []string

func (l *imageList) String() string     { return strings.Join(*l, ",") }
func (l *imageList) Set(v string) error { *l = append(*l, v); return nil }

// openStore opens the store a URI names. S3 credentials come from the
// standard AWS chain (AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, shared
// files, or the machine's role).
func openStore(ctx context.Context, f imageFlags) (media.Store, error) {
	switch {
	case f.store == "":
		return nil, errors.New("--image needs --media-store: the Agent's MediaStore URI (kubectl get mediastore shows it)")
	case strings.HasPrefix(f.store, "s3://"):
		bucket, prefix, _ := strings.Cut(strings.TrimPrefix(f.store, "s3://"), "/")
		if bucket == "" || strings.HasSuffix(f.store, "/") {
			return nil, fmt.Errorf("--media-store %s is not a bucket and prefix: write it as s3://<bucket>[/<prefix>], without a trailing slash", f.store)
		}
		return s3store.New(ctx, s3store.Options{Bucket: bucket, Prefix: prefix, Endpoint: f.s3Endpoint, Region: f.s3Region, ForcePathStyle: f.s3PathStyle})
	case strings.HasPrefix(f.store, "file://"):
		root, err := url.PathUnescape(strings.TrimPrefix(f.store, "file://"))
		if err != nil {
			return nil, fmt.Errorf("--media-store %s: %w", f.store, err)
		}
		store, err := localstore.New(root)
		if err != nil {
			return nil, err
		}
		if store.StoreURI() != f.store {
			return nil, fmt.Errorf("--media-store %s is not written as the store writes it: %s", f.store, store.StoreURI())
		}
		return store, nil
	}
	return nil, fmt.Errorf("--media-store %s must start with s3:// or file://", f.store)
}

// uploadImages puts each file into the store and returns the references to
// send. A file larger than an image may be is refused before it is read
// whole.
func uploadImages(ctx context.Context, f imageFlags) ([]sessions.ImageReference, error) {
	if len(f.files) == 0 {
		return nil, nil
	}
	if len(f.files) > media.MaxImagesPerMessage {
		return nil, fmt.Errorf("%d images; a message carries at most %d", len(f.files), media.MaxImagesPerMessage)
	}
	store, err := openStore(ctx, f)
	if err != nil {
		return nil, err
	}
	refs := make([]sessions.ImageReference, 0, len(f.files))
	for _, name := range f.files {
		data, err := readImageFile(name)
		if err != nil {
			return nil, err
		}
		ref, err := store.PutImage(ctx, data)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
		refs = append(refs, sessions.ImageReference(ref))
	}
	return refs, nil
}

func readImageFile(name string) ([]byte, error) {
	file, err := os.Open(name)
	if err != nil {
		return nil, err
	}
	defer func() { _ = file.Close() }()
	data, err := io.ReadAll(io.LimitReader(file, media.MaxImageBytes+1))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	if len(data) > media.MaxImageBytes {
		return nil, fmt.Errorf("%s is larger than the %d bytes an image may have", name, media.MaxImageBytes)
	}
	return data, nil
}
