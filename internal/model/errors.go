// Package model holds what the model clients share: how an HTTP failure of
// a provider becomes an agent.ModelError the RunModel Step can act on.
package model

import (
	"context"
	"errors"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/stepwise-run/stepwise/pkg/agent"
)

// Config configures a model client.
type Config struct {
	// BaseURL is the API root; empty uses the provider's own.
	BaseURL string
	// Model is the model name sent in every request.
	Model string
	// APIKey returns the key for each request, so a rotated key is read when
	// it changes; nil sends none.
	APIKey func() (string, error)
	// HTTPClient, when set, makes the requests.
	HTTPClient *http.Client
}

// Key reads the request's key: ok is false when the client sends none. A
// failure is a ModelError that names the provider.
func (c Config) Key(provider string) (key string, ok bool, err error) {
	if c.APIKey == nil {
		return "", false, nil
	}
	key, err = c.APIKey()
	if err != nil {
		return "", false, &agent.ModelError{Provider: provider, Message: err.Error()}
	}
	return key, true, nil
}

// Retryable reports whether an HTTP status is worth another attempt: a
// timeout, a conflict, a rate limit, or a server error.
func Retryable(status int) bool {
	return status == http.StatusRequestTimeout || status == http.StatusConflict ||
		status == http.StatusTooManyRequests || status >= 500
}

// RetryAfter reads a Retry-After header: seconds, or an HTTP date.
func RetryAfter(header http.Header, now time.Time) time.Duration {
	v := strings.TrimSpace(header.Get("Retry-After"))
	if v == "" {
		return 0
	}
	if seconds, err := strconv.ParseFloat(v, 64); err == nil && seconds > 0 {
		return time.Duration(seconds * float64(time.Second))
	}
	if at, err := http.ParseTime(v); err == nil && at.After(now) {
		return at.Sub(now)
	}
	return 0
}

// HTTPError is a provider's HTTP failure as a ModelError. The message is
// the provider's own error message, which never holds the request's
// credentials.
func HTTPError(provider string, status int, header http.Header, message string) *agent.ModelError {
	if message == "" {
		message = http.StatusText(status)
	}
	return &agent.ModelError{
		Provider: provider, StatusCode: status, Retryable: Retryable(status),
		RetryAfter: RetryAfter(header, time.Now()), Message: message,
	}
}

// StreamError is a failure with no HTTP status: a connection that broke or a
// stream cut mid-answer, which another attempt may not meet. A cancelled
// call is returned as is, so the Step sees the cancellation.
func StreamError(provider string, err error) error {
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	return &agent.ModelError{Provider: provider, Retryable: true, Message: err.Error()}
}
