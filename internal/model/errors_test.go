package model

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/stepwise-run/stepwise/pkg/agent"
)

func TestRetryableStatuses(t *testing.T) {
	for status, want := range map[int]bool{400: false, 401: false, 403: false, 404: false, 408: true, 409: true, 429: true, 500: true, 503: true, 529: true} {
		if got := Retryable(status); got != want {
			t.Errorf("Retryable(%d) = %v, want %v", status, got, want)
		}
	}
}

func TestRetryAfter(t *testing.T) {
	now := time.Date(2026, 12, 2, 10, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		header string
		want   time.Duration
	}{
		{"", 0},
		{"7", 7 * time.Second},
		{"1.5", 1500 * time.Millisecond},
		{now.Add(30 * time.Second).Format(http.TimeFormat), 30 * time.Second},
		{now.Add(-time.Minute).Format(http.TimeFormat), 0},
		{"soon", 0},
		{"-3", 0},
	} {
		h := http.Header{}
		if tc.header != "" {
			h.Set("Retry-After", tc.header)
		}
		if got := RetryAfter(h, now); got != tc.want {
			t.Errorf("RetryAfter(%q) = %v, want %v", tc.header, got, tc.want)
		}
	}
}

func TestErrorsNameTheProvider(t *testing.T) {
	e := HTTPError("openai", 401, nil, "")
	if e.Retryable || e.Message != "Unauthorized" || e.Error() != "openai model call failed with HTTP 401: Unauthorized" {
		t.Errorf("HTTPError = %+v, %q", e, e.Error())
	}
	var me *agent.ModelError
	if err := StreamError("anthropic", errors.New("unexpected EOF")); !errors.As(err, &me) || !me.Retryable || me.Error() != "anthropic model call failed: unexpected EOF" {
		t.Errorf("StreamError = %v", err)
	}
	if err := StreamError("anthropic", fmt.Errorf("reading: %w", context.Canceled)); !errors.Is(err, context.Canceled) || errors.As(err, &me) {
		t.Errorf("a cancelled call = %v, want the cancellation as is", err)
	}
	cfg := Config{APIKey: func() (string, error) { return "", errors.New("no key in the environment") }}
	if _, _, err := cfg.Key("openai"); !errors.As(err, &me) || me.Provider != "openai" {
		t.Errorf("Key = %v", err)
	}
	if _, ok, err := (Config{}).Key("openai"); ok || err != nil {
		t.Errorf("Key without a key reader = %v, %v", ok, err)
	}
}
