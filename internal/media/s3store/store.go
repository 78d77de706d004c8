// Package s3store keeps session images in a bucket of AWS S3 or any
// S3-compatible service, one object per image under
// <prefix>/sha256/<sha256>.
package s3store

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync/atomic"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/smithy-go"
	smithyhttp "github.com/aws/smithy-go/transport/http"

	"github.com/stepwise-run/stepwise/internal/media"
)

// conflictAttempts is how often an upload is sent while the service
// answers 409: two concurrent conditional writes of one key can both be
// told to try again.
const conflictAttempts = 3

// Options say where the store is and how to reach it.
type Options struct {
	// Bucket and Prefix locate the images; Prefix has no leading or
	// trailing slash and may be empty.
	Bucket, Prefix string
	// Endpoint is the service's URL; empty means AWS S3.
	Endpoint string
	// Region is the bucket's region; empty takes the standard chain's.
	Region string
	// ForcePathStyle puts the bucket in the URL path, as many
	// S3-compatible services need.
	ForcePathStyle bool
	// Credentials sign the requests; nil takes the standard AWS chain
	// (environment, shared files, the pod's web identity, instance roles).
	Credentials aws.CredentialsProvider
	// HTTPClient sends the requests; nil takes the SDK's.
	HTTPClient *http.Client
}

// Store is an S3 media store. Its String shows the store URI only, so
// credentials never reach a log.
type Store struct {
	client   *s3.Client
	bucket   string
	prefix   string
	storeURI string
	// conditional stays true until the service refuses a conditional
	// write; from then on uploads check with HEAD first.
	conditional atomic.Bool
}

var _ media.Store = (*Store)(nil)

// New builds a store. It sends no request: a wrong bucket or credential
// shows in the first PutImage or GetImage.
func New(ctx context.Context, opts Options) (*Store, error) {
	if opts.Bucket == "" {
		return nil, errors.New("s3 media store: bucket is required")
	}
	if strings.HasPrefix(opts.Prefix, "/") || strings.HasSuffix(opts.Prefix, "/") {
		return nil, fmt.Errorf("s3 media store: prefix %q must not start or end with a slash", opts.Prefix)
	}
	storeURI := media.S3StoreURI(opts.Bucket, opts.Prefix)
	if err := media.CheckStoreURI(storeURI); err != nil {
		return nil, fmt.Errorf("s3 media store: %w", err)
	}
	loads := []func(*config.LoadOptions) error{
		// Many S3-compatible services refuse the checksums the SDK adds by
		// default; VerifyBytes checks every read instead.
		config.WithRequestChecksumCalculation(aws.RequestChecksumCalculationWhenRequired),
		config.WithResponseChecksumValidation(aws.ResponseChecksumValidationWhenRequired),
	}
	if opts.Region != "" {
		loads = append(loads, config.WithRegion(opts.Region))
	}
	if opts.Credentials != nil {
		loads = append(loads, config.WithCredentialsProvider(opts.Credentials))
	}
	if opts.HTTPClient != nil {
		loads = append(loads, config.WithHTTPClient(opts.HTTPClient))
	}
	cfg, err := config.LoadDefaultConfig(ctx, loads...)
	if err != nil {
		return nil, fmt.Errorf("s3 media store %s: loading the AWS configuration: %w", storeURI, err)
	}
	if cfg.Region == "" {
		cfg.Region = "us-east-1"
	}
	s := &Store{
		client: s3.NewFromConfig(cfg, func(o *s3.Options) {
			if opts.Endpoint != "" {
				o.BaseEndpoint = aws.String(opts.Endpoint)
			}
			o.UsePathStyle = opts.ForcePathStyle
		}),
		bucket:   opts.Bucket,
		prefix:   opts.Prefix,
		storeURI: storeURI,
	}
	s.conditional.Store(true)
	return s, nil
}

// StaticCredentials signs with fixed keys, such as those a Secret gives.
func StaticCredentials(accessKeyID, secretAccessKey, sessionToken string) aws.CredentialsProvider {
	return credentials.NewStaticCredentialsProvider(accessKeyID, secretAccessKey, sessionToken)
}

// StoreURI is s3://<bucket>[/<prefix>].
func (s *Store) StoreURI() string { return s.storeURI }

// String shows the store's location and nothing of its credentials.
func (s *Store) String() string { return "s3 media store " + s.storeURI }

func (s *Store) key(sum string) string {
	if s.prefix == "" {
		return "sha256/" + sum
	}
	return s.prefix + "/sha256/" + sum
}

// PutImage uploads an image unless its object exists. The upload is
// conditional (If-None-Match: *), so two writers of one image write one
// object and "already exists" (412) is success. A service that answers
// 409 is asked twice more; when every attempt conflicts, the object must
// then exist with the image's size. A service that refuses conditional
// writes gets a HEAD first from then on, and two concurrent uploads may
// both write the same bytes.
func (s *Store) PutImage(ctx context.Context, data []byte) (media.Reference, error) {
	ref, err := media.BuildReference(data, s.storeURI)
	if err != nil {
		return media.Reference{}, err
	}
	if s.conditional.Load() {
		done, err := s.putConditional(ctx, ref, data)
		if done || err != nil {
			return ref, err
		}
	}
	if found, err := s.exists(ctx, ref); err != nil || found {
		return ref, err
	}
	if err := s.put(ctx, ref, data, false); err != nil {
		return media.Reference{}, &media.StoreError{Op: "upload", URI: ref.URI, Err: err}
	}
	return ref, nil
}

// putConditional reports done once the object is known to exist; false
// without an error means the service refuses conditional writes.
func (s *Store) putConditional(ctx context.Context, ref media.Reference, data []byte) (bool, error) {
	for range conflictAttempts {
		err := s.put(ctx, ref, data, true)
		switch status := httpStatus(err); {
		case err == nil, status == http.StatusPreconditionFailed:
			return true, nil
		case status == http.StatusConflict:
			continue
		case status == http.StatusNotImplemented || errorCode(err) == "NotImplemented":
			s.conditional.Store(false)
			return false, nil
		default:
			return false, &media.StoreError{Op: "upload", URI: ref.URI, Err: err}
		}
	}
	found, err := s.exists(ctx, ref)
	if err != nil {
		return false, err
	}
	if !found {
		return false, &media.StoreError{Op: "upload", URI: ref.URI,
			Err: fmt.Errorf("%d uploads conflicted (409) and the object is not there with %d bytes", conflictAttempts, ref.SizeBytes)}
	}
	return true, nil
}

func (s *Store) put(ctx context.Context, ref media.Reference, data []byte, conditional bool) error {
	in := &s3.PutObjectInput{
		Bucket:        aws.String(s.bucket),
		Key:           aws.String(s.key(ref.SHA256)),
		Body:          bytes.NewReader(data),
		ContentLength: aws.Int64(ref.SizeBytes),
		ContentType:   aws.String(ref.MIMEType),
	}
	if conditional {
		in.IfNoneMatch = aws.String("*")
	}
	_, err := s.client.PutObject(ctx, in)
	return err
}

// exists reports whether the image's object is there with its size. An
// object of another size under the key is an error: the key names bytes
// of exactly that size.
func (s *Store) exists(ctx context.Context, ref media.Reference) (bool, error) {
	out, err := s.client.HeadObject(ctx, &s3.HeadObjectInput{Bucket: aws.String(s.bucket), Key: aws.String(s.key(ref.SHA256))})
	if httpStatus(err) == http.StatusNotFound {
		return false, nil
	}
	if err != nil {
		return false, &media.StoreError{Op: "check", URI: ref.URI, Err: err}
	}
	if out.ContentLength == nil || *out.ContentLength != ref.SizeBytes {
		return false, &media.StoreError{Op: "check", URI: ref.URI, Err: fmt.Errorf("the object has %s bytes, the image %d", lengthText(out.ContentLength), ref.SizeBytes)}
	}
	return true, nil
}

// GetImage reads an image of this store. It refuses a reference outside
// the store's bucket and prefix, an object whose Content-Length is not the
// reference's size, and more bytes than that size; VerifyBytes checks the
// rest.
func (s *Store) GetImage(ctx context.Context, ref media.Reference) ([]byte, error) {
	if err := media.RequireStoreReference(ref, s.storeURI); err != nil {
		return nil, err
	}
	out, err := s.client.GetObject(ctx, &s3.GetObjectInput{Bucket: aws.String(s.bucket), Key: aws.String(s.key(ref.SHA256))})
	if err != nil {
		if httpStatus(err) == http.StatusNotFound {
			return nil, &media.StoreError{Op: "read", URI: ref.URI, Err: errors.New("the object does not exist")}
		}
		return nil, &media.StoreError{Op: "read", URI: ref.URI, Err: err}
	}
	defer func() { _ = out.Body.Close() }()
	if out.ContentLength != nil && *out.ContentLength != ref.SizeBytes {
		return nil, &media.StoreError{Op: "read", URI: ref.URI,
			Err: fmt.Errorf("the object has %d bytes, the reference %d", *out.ContentLength, ref.SizeBytes)}
	}
	data, err := io.ReadAll(io.LimitReader(out.Body, ref.SizeBytes+1))
	if err != nil {
		return nil, &media.StoreError{Op: "read", URI: ref.URI, Err: err}
	}
	if err := media.VerifyBytes(ref, data); err != nil {
		return nil, err
	}
	return data, nil
}

func httpStatus(err error) int {
	var resp *smithyhttp.ResponseError
	if errors.As(err, &resp) {
		return resp.HTTPStatusCode()
	}
	return 0
}

func errorCode(err error) string {
	var api smithy.APIError
	if errors.As(err, &api) {
		return api.ErrorCode()
	}
	return ""
}

func lengthText(n *int64) string {
	if n == nil {
		return "an unknown number of"
	}
	return fmt.Sprint(*n)
}
