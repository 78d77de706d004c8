package worker

import (
	"context"
	"errors"
	"fmt"

	"github.com/aws/aws-sdk-go-v2/aws"

	"github.com/stepwise-run/stepwise/internal/media"
	"github.com/stepwise-run/stepwise/internal/media/localstore"
	"github.com/stepwise-run/stepwise/internal/media/s3store"
	"github.com/stepwise-run/stepwise/pkg/workerconfig"
)

// mediaStore builds the configured media store, nil when there is none.
// The store must make the image URIs the operator rendered (StoreURI), so
// what a client was told and what the worker reads are one location.
func mediaStore(ctx context.Context, m *workerconfig.MediaStore) (media.Store, error) {
	if m == nil {
		return nil, nil
	}
	var store media.Store
	var err error
	switch {
	case m.LocalDirectory != nil:
		store, err = localstore.New(m.LocalDirectory.Root)
	case m.S3 != nil:
		s := m.S3
		opts := s3store.Options{Bucket: s.Bucket, Prefix: s.Prefix, Endpoint: s.Endpoint, Region: s.Region, ForcePathStyle: s.ForcePathStyle}
		if s.AccessKeyID != nil || s.SecretAccessKey != nil {
			if s.AccessKeyID == nil || s.SecretAccessKey == nil {
				return nil, errors.New("mediaStore.s3: accessKeyID and secretAccessKey come together")
			}
			opts.Credentials = secretCredentials(*s.AccessKeyID, *s.SecretAccessKey, s.SessionToken)
		}
		store, err = s3store.New(ctx, opts)
	default:
		return nil, errors.New("mediaStore needs exactly one of s3 or localDirectory")
	}
	if err != nil {
		return nil, fmt.Errorf("mediaStore: %w", err)
	}
	if store.StoreURI() != m.StoreURI {
		return nil, fmt.Errorf("mediaStore.storeURI is %s, but the store's images are under %s", m.StoreURI, store.StoreURI())
	}
	return store, nil
}

// secretCredentials reads the keys from the worker's environment at each
// signing, so a rotated Secret is read after the rollout it causes. Errors
// name the Secret and key, never a value.
func secretCredentials(accessKeyID, secretAccessKey workerconfig.SecretEnv, sessionToken *workerconfig.SecretEnv) aws.CredentialsProvider {
	return aws.CredentialsProviderFunc(func(context.Context) (aws.Credentials, error) {
		id, err := accessKeyID.Lookup()
		if err != nil {
			return aws.Credentials{}, fmt.Errorf("mediaStore.s3.accessKeyID: %w", err)
		}
		secret, err := secretAccessKey.Lookup()
		if err != nil {
			return aws.Credentials{}, fmt.Errorf("mediaStore.s3.secretAccessKey: %w", err)
		}
		creds := aws.Credentials{AccessKeyID: id, SecretAccessKey: secret, Source: "stepwise worker environment"}
		if sessionToken != nil {
			if creds.SessionToken, err = sessionToken.Lookup(); err != nil {
				return aws.Credentials{}, fmt.Errorf("mediaStore.s3.sessionToken: %w", err)
			}
		}
		return creds, nil
	})
}
