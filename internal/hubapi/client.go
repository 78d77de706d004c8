package hubapi

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/stepwise-run/stepwise/internal/hub"
)

// Reader reads one hub for a gateway replica.
type Reader struct {
	base  string
	token func() string
	http  *http.Client
}

// NewReader reads the hub at base (http://host:port) with the read token
// that token returns at each request.
func NewReader(base string, token func() string, c *http.Client) *Reader {
	if c == nil {
		// A read waits at most MaxWait for an event; a hub that holds it
		// longer is stuck.
		c = &http.Client{Timeout: MaxWait + 15*time.Second}
	}
	return &Reader{base: base, token: token, http: c}
}

func (r *Reader) get(ctx context.Context, path string, q url.Values, out any) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, r.base+path+"?"+q.Encode(), nil)
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+r.token())
	resp, err := r.http.Do(req)
	if err != nil {
		return fmt.Errorf("reading the event hub: %w", err)
	}
	defer func() { _ = resp.Body.Close() }()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 2*maxReadBytes))
	if err != nil {
		return fmt.Errorf("reading the event hub: %w", err)
	}
	if resp.StatusCode != http.StatusOK {
		var refusal ErrorResponse
		_ = json.Unmarshal(body, &refusal)
		switch refusal.Reason {
		case "invalid_token":
			return hub.ErrInvalidToken
		case "expired_token":
			return hub.ErrExpiredToken
		}
		return fmt.Errorf("the event hub answered %s: %s", resp.Status, refusal.Message)
	}
	return json.Unmarshal(body, out)
}

func keyQuery(k hub.Key) url.Values {
	return url.Values{"namespace": {k.Namespace}, "agent": {k.Agent}, "uid": {k.AgentUID}, "session": {k.Session}}
}

// Position returns the token after the session's newest event, and, when a
// turn is named, the token that replays that turn.
func (r *Reader) Position(ctx context.Context, k hub.Key, turnID string) (PositionResponse, error) {
	q := keyQuery(k)
	if turnID != "" {
		q.Set("turn", turnID)
	}
	var out PositionResponse
	err := r.get(ctx, PositionPath, q, &out)
	return out, err
}

// Events returns the session's events after the token, waiting up to wait
// for one. It returns hub.ErrInvalidToken or hub.ErrExpiredToken for a token
// the hub refuses.
func (r *Reader) Events(ctx context.Context, k hub.Key, after string, wait time.Duration) ([]WireRecord, error) {
	q := keyQuery(k)
	q.Set("after", after)
	q.Set("wait", strconv.FormatFloat(wait.Seconds(), 'f', 3, 64))
	var out EventsResponse
	err := r.get(ctx, EventsPath, q, &out)
	return out.Records, err
}

// post sends one publish request.
func post(ctx context.Context, c *http.Client, base, token string, req PublishRequest) error {
	body, err := json.Marshal(req)
	if err != nil {
		return err
	}
	httpReq, err := http.NewRequestWithContext(ctx, http.MethodPost, base+PublishPath, bytes.NewReader(body))
	if err != nil {
		return err
	}
	httpReq.Header.Set("Authorization", "Bearer "+token)
	httpReq.Header.Set("Content-Type", "application/json")
	resp, err := c.Do(httpReq)
	if err != nil {
		return err
	}
	defer func() { _ = resp.Body.Close() }()
	if resp.StatusCode != http.StatusNoContent {
		var refusal ErrorResponse
		_ = json.NewDecoder(io.LimitReader(resp.Body, 64<<10)).Decode(&refusal)
		return &statusError{code: resp.StatusCode, status: resp.Status, message: refusal.Message}
	}
	return nil
}

// statusError is a hub answer other than success.
type statusError struct {
	code            int
	status, message string
}

func (e *statusError) Error() string {
	return fmt.Sprintf("the event hub answered %s: %s", e.status, e.message)
}
