// Package openaiapi is what the two OpenAI clients (Responses and Chat
// Completions) share: the SDK client with its own retries off, the key of
// each call, and how an SDK failure becomes an agent.ModelError.
package openaiapi

import (
	"errors"
	"net/http"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"

	"github.com/stepwise-run/stepwise/internal/model"
)

// NewClient returns the SDK client for a configuration. Its own retries are
// off: the RunModel Step's retry policy decides. The key is set per call.
func NewClient(cfg model.Config) openai.Client {
	opts := []option.RequestOption{option.WithMaxRetries(0), option.WithAPIKey(""), option.WithMiddleware(model.PropagateTraceContext)}
	if cfg.BaseURL != "" {
		opts = append(opts, option.WithBaseURL(cfg.BaseURL))
	}
	if cfg.HTTPClient != nil {
		opts = append(opts, option.WithHTTPClient(cfg.HTTPClient))
	}
	return openai.NewClient(opts...)
}

// CallOptions are one call's request options: its key, read now.
func CallOptions(cfg model.Config, provider string) ([]option.RequestOption, error) {
	key, ok, err := cfg.Key(provider)
	if err != nil || !ok {
		return nil, err
	}
	return []option.RequestOption{option.WithAPIKey(key)}, nil
}

// Classify turns an SDK failure into a ModelError.
func Classify(provider string, err error) error {
	var apiErr *openai.Error
	if errors.As(err, &apiErr) {
		var header http.Header
		if apiErr.Response != nil {
			header = apiErr.Response.Header
		}
		return model.HTTPError(provider, apiErr.StatusCode, header, apiErr.Message)
	}
	return model.StreamError(provider, err)
}
