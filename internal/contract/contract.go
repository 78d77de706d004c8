// Package contract holds the engine's fixed texts and limits: what a session
// tells users and models in set words, and the bounds it enforces. The
// session rules, the built-in loop, the Temporal binding, the worker and the
// client share them from here, so none of them is part of the public API a
// worker author or an application programs against, and changing one never
// changes those APIs.
//
// A text here may be stored in session state or shown to a model: changing
// one changes what recorded sessions hold, so it is a change of the session
// Flow.
package contract

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"time"
)

// AddCounts adds two counts of tokens or cost, a negative one as none,
// stopping at the largest int64 instead of wrapping to a negative sum:
// providers report usage, and a hostile or broken one reporting negative or
// enormous numbers must never lower a total below what was spent, or make
// it pass a spend limit by overflowing.
func AddCounts(a, b int64) int64 {
	a, b = max(a, 0), max(b, 0)
	if a > math.MaxInt64-b {
		return math.MaxInt64
	}
	return a + b
}

// MulCounts multiplies two counts, a negative one as none, stopping at the
// largest int64.
func MulCounts(a, b int64) int64 {
	a, b = max(a, 0), max(b, 0)
	if a != 0 && b > math.MaxInt64/a {
		return math.MaxInt64
	}
	return a * b
}

// MaxConsecutiveTurnContinuations bounds the continuations that may follow
// answers without tools in a row; a tool call resets the count.
const MaxConsecutiveTurnContinuations = 8

// TurnContinuationLimitError is the turn error of a turn that asked for
// one continuation more than MaxConsecutiveTurnContinuations in a row.
var TurnContinuationLimitError = fmt.Sprintf(
	"the turn was continued %d times in a row without a tool call, the limit; it ended with the model's last answer",
	MaxConsecutiveTurnContinuations)

// Size limits of session settings. Clients check MaxSessionSettingsBytes
// before they send; the session itself accepts SessionSettingsSizeTolerance
// more, because other encoders write some values differently.
const (
	MaxSessionSettingsBytes      = 16 * 1024
	SessionSettingsSizeTolerance = 1024
)

// EncodeSessionSettings returns settings as the compact JSON text their size
// is measured on: UTF-8, with non-ASCII and HTML characters unescaped. Nil
// settings encode as {}.
func EncodeSessionSettings(s map[string]any) ([]byte, error) {
	if s == nil {
		s = map[string]any{}
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(s); err != nil {
		return nil, fmt.Errorf("session settings are not JSON: %w", err)
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n")), nil
}

// CheckedSessionSettings encodes settings as a client does before it sends
// them, refusing settings beyond MaxSessionSettingsBytes.
func CheckedSessionSettings(s map[string]any) (json.RawMessage, error) {
	raw, err := EncodeSessionSettings(s)
	if err != nil {
		return nil, err
	}
	if len(raw) > MaxSessionSettingsBytes {
		return nil, fmt.Errorf("session settings are %d bytes of JSON, more than the limit of %d", len(raw), MaxSessionSettingsBytes)
	}
	return raw, nil
}

// DecodeSessionSettings reads stored settings; none read as empty settings.
// Numbers stay json.Number, so a value reads as it was written.
func DecodeSessionSettings(raw json.RawMessage) (map[string]any, error) {
	out := map[string]any{}
	if len(bytes.TrimSpace(raw)) == 0 {
		return out, nil
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	if err := dec.Decode(&out); err != nil {
		return nil, fmt.Errorf("session settings are not a JSON object: %w", err)
	}
	if out == nil {
		return map[string]any{}, nil
	}
	return out, nil
}

// Defaults of an agent definition's zero fields, as the session options
// set them.
const (
	DefaultMaxModelCallsPerTurn     = 100
	DefaultMaxDurableWait           = 365 * 24 * time.Hour
	DefaultToolSourceListingTimeout = 10 * time.Second
	DefaultCompactionTriggerRatio   = 0.85
	DefaultCompactionKeepRatio      = 0.3
)

// TaskPollInterval rounds a tool task's poll interval up to whole seconds,
// from one second to a day.
func TaskPollInterval(d time.Duration) time.Duration {
	d = (d + time.Second - 1).Truncate(time.Second)
	return min(max(d, time.Second), 24*time.Hour)
}

// MissingTaskPollerText fails a call whose tool started a task that no
// poller can follow.
func MissingTaskPollerText(tool string) string {
	return fmt.Sprintf("tool %s started a task, but it has no task poller, so the session cannot follow the task", tool)
}

// SignalMoveToCurrentVersion wakes a session that waits for its next
// message while pinned to a worker version that new sessions no longer
// start on. Awake between turns, it continues as new on the current
// version, so the old version drains without waiting for its idle
// sessions' next messages. A session mid-turn moves when the turn ends.
// The operator sends it during a versioned rollout.
const SignalMoveToCurrentVersion = "stepwise_move_to_current_version"
