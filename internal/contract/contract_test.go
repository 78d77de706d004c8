package contract

import (
	"encoding/json"
	"math"
	"strings"
	"testing"
	"time"
)

func TestEncodeSessionSettingsIsCompactAndUnescaped(t *testing.T) {
	raw, err := EncodeSessionSettings(map[string]any{"model": "gpt-5", "note": "<ü>&"})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := string(raw), `{"model":"gpt-5","note":"<ü>&"}`; got != want {
		t.Errorf("encoded = %s, want %s", got, want)
	}
	if raw, _ := EncodeSessionSettings(nil); string(raw) != "{}" {
		t.Errorf("nil settings encode as %s", raw)
	}
}

func TestCheckedSessionSettingsSize(t *testing.T) {
	// {"k":"<n bytes>"} is n+8 bytes of JSON.
	sized := func(n int) map[string]any { return map[string]any{"k": strings.Repeat("a", n-8)} }
	cases := []struct {
		name    string
		s       map[string]any
		wantErr string
	}{
		{"empty", map[string]any{}, ""},
		{"at the limit", sized(MaxSessionSettingsBytes), ""},
		{"one byte over", sized(MaxSessionSettingsBytes + 1), "session settings are 16385 bytes of JSON, more than the limit of 16384"},
		{"multi-byte characters count as bytes", map[string]any{"k": strings.Repeat("ü", MaxSessionSettingsBytes/2)}, "more than the limit of 16384"},
		{"not JSON", map[string]any{"f": func() {}}, "session settings are not JSON"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := CheckedSessionSettings(c.s)
			if c.wantErr == "" && err != nil || c.wantErr != "" && (err == nil || !strings.Contains(err.Error(), c.wantErr)) {
				t.Errorf("CheckedSessionSettings = %v, want %q", err, c.wantErr)
			}
		})
	}
}

func TestDecodeSessionSettings(t *testing.T) {
	cases := []struct {
		raw     string
		want    string
		wantErr bool
	}{
		{"", "{}", false},
		{"null", "{}", false},
		// Numbers keep their digits: settings are read, never rewritten.
		{`{"model":"large","n":12345678901234567890}`, `{"model":"large","n":12345678901234567890}`, false},
		{`[1]`, "", true},
		{`{"a":`, "", true},
	}
	for _, c := range cases {
		got, err := DecodeSessionSettings(json.RawMessage(c.raw))
		if (err != nil) != c.wantErr {
			t.Errorf("DecodeSessionSettings(%s) error = %v", c.raw, err)
			continue
		}
		if c.wantErr {
			continue
		}
		if encoded, _ := EncodeSessionSettings(got); got == nil || string(encoded) != c.want {
			t.Errorf("DecodeSessionSettings(%s) = %s, want %s", c.raw, encoded, c.want)
		}
	}
}

func TestTaskPollIntervalRoundsUpToWholeSecondsWithinADay(t *testing.T) {
	for in, want := range map[time.Duration]time.Duration{
		0: time.Second, time.Millisecond: time.Second, 1500 * time.Millisecond: 2 * time.Second,
		5 * time.Second: 5 * time.Second, 48 * time.Hour: 24 * time.Hour,
	} {
		if got := TaskPollInterval(in); got != want {
			t.Errorf("TaskPollInterval(%v) = %v, want %v", in, got, want)
		}
	}
}

func TestCountsNeitherGoDownNorWrap(t *testing.T) {
	cases := []struct {
		a, b, sum, product int64
	}{
		{2, 3, 5, 6},
		{5, -7, 5, 0},
		{-1, -1, 0, 0},
		{math.MaxInt64, 1, math.MaxInt64, math.MaxInt64},
		{math.MaxInt64 - 1, 1, math.MaxInt64, math.MaxInt64 - 1},
		{1 << 32, 1 << 31, 1<<32 + 1<<31, math.MaxInt64},
		{0, math.MaxInt64, math.MaxInt64, 0},
	}
	for _, c := range cases {
		if got := AddCounts(c.a, c.b); got != c.sum {
			t.Errorf("AddCounts(%d, %d) = %d, want %d", c.a, c.b, got, c.sum)
		}
		if got := MulCounts(c.a, c.b); got != c.product {
			t.Errorf("MulCounts(%d, %d) = %d, want %d", c.a, c.b, got, c.product)
		}
	}
}
