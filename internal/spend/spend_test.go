package spend

import (
	"encoding/json"
	"fmt"
	"math"
	"strings"
	"testing"
	"time"
)

var t0 = time.Date(2026, 12, 5, 10, 30, 0, 0, time.UTC)

func day(tokens int64) Limits {
	return Limits{Window: 24 * time.Hour, Agent: Amount{Tokens: tokens}}
}

// step is one thing that happens to a counter, and what the test expects.
type step struct {
	at     time.Duration // after t0
	admit  string        // call ID to admit, or
	record string        // call ID to record
	used   Amount
	limits Limits
	want   bool   // for admit: admitted
	reason string // for admit: part of the refusal
}

func TestCounter(t *testing.T) {
	expires := 15 * time.Minute
	cases := []struct {
		name  string
		steps []step
		spent Amount
	}{
		{"admits under the budget and counts what calls use", []step{
			{admit: "a", limits: day(100), want: true},
			{record: "a", used: Amount{Tokens: 40}},
			{admit: "b", limits: day(100), want: true},
			{record: "b", used: Amount{Tokens: 40}},
			{admit: "c", limits: day(100), want: true},
			{record: "c", used: Amount{Tokens: 40}},
			{admit: "d", limits: day(100), reason: "spent 120 of its 100 tokens in the window that began 2026-12-05T00:00:00Z; the next window begins 2026-12-06T00:00:00Z"},
		}, Amount{Tokens: 120}},
		{"a call in flight holds as much as the largest call so far", []step{
			{admit: "a", limits: day(100), want: true},
			{record: "a", used: Amount{Tokens: 30}},
			{admit: "b", limits: day(100), want: true},
			{admit: "c", limits: day(100), want: true},
			// 30 spent + 2 x 30 held: a fourth call could pass the budget.
			{admit: "d", limits: day(100), want: true},
			{admit: "e", limits: day(100), reason: "model calls running now may spend the rest"},
			{record: "b", used: Amount{Tokens: 10}},
			{admit: "e", limits: day(100), reason: "model calls running now"},
			{record: "c", used: Amount{Tokens: 10}},
			{admit: "e", limits: day(100), want: true},
		}, Amount{Tokens: 50}},
		{"an admission whose worker died expires", []step{
			{admit: "a", limits: day(100), want: true},
			{record: "a", used: Amount{Tokens: 60}},
			{admit: "b", limits: day(100), want: true},
			{at: time.Minute, admit: "c", limits: day(100), reason: "model calls running now"},
			{at: 16 * time.Minute, admit: "c", limits: day(100), want: true},
		}, Amount{Tokens: 60}},
		{"a new window starts unspent", []step{
			{admit: "a", limits: day(10), want: true},
			{record: "a", used: Amount{Tokens: 50}},
			{admit: "b", limits: day(10), reason: "spent 50 of its 10 tokens"},
			{at: 14 * time.Hour, admit: "b", limits: day(10), want: true},
			{at: 14 * time.Hour, record: "b", used: Amount{Tokens: 5}},
		}, Amount{Tokens: 5}},
		{"a record sent twice counts once, and its call is admitted again", []step{
			{admit: "a", limits: day(100), want: true},
			{record: "a", used: Amount{Tokens: 60}},
			{record: "a", used: Amount{Tokens: 60}},
			{admit: "a", limits: day(100), want: true},
		}, Amount{Tokens: 60}},
		{"a late record still counts", []step{
			{record: "lost", used: Amount{Tokens: 7}},
		}, Amount{Tokens: 7}},
		{"cost is bounded apart from tokens", []step{
			{admit: "a", limits: Limits{Window: time.Hour, Agent: Amount{MicroCost: 2_500_000}}, want: true},
			{record: "a", used: Amount{Tokens: 1000, MicroCost: 2_600_000}},
			{admit: "b", limits: Limits{Window: time.Hour, Agent: Amount{MicroCost: 2_500_000}}, reason: "spent 2.6 of its 2.5 cost in the window that began 2026-12-05T10:00:00Z"},
		}, Amount{Tokens: 1000, MicroCost: 2_600_000}},
		{"a changed window length starts a new window", []step{
			{admit: "a", limits: day(10), want: true},
			{record: "a", used: Amount{Tokens: 50}},
			{admit: "b", limits: Limits{Window: time.Hour, Agent: Amount{Tokens: 10}}, want: true},
		}, Amount{}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var c Counter
			for i, s := range tc.steps {
				now := t0.Add(s.at)
				if s.record != "" {
					c.Record(Record{CallID: s.record, Used: s.used}, now)
					continue
				}
				d := c.Admit(Request{CallID: s.admit, Limits: s.limits, Hold: expires}, now)
				if d.Admitted != s.want || (s.reason != "" && !strings.Contains(d.Reason, s.reason)) {
					t.Fatalf("step %d: admit %s = %+v, want admitted %v with reason containing %q", i, s.admit, d, s.want, s.reason)
				}
				// The counter survives continuing as new.
				raw, err := json.Marshal(c)
				if err != nil {
					t.Fatal(err)
				}
				c = Counter{}
				if err := json.Unmarshal(raw, &c); err != nil {
					t.Fatal(err)
				}
			}
			if c.Spent != tc.spent {
				t.Errorf("spent %+v, want %+v", c.Spent, tc.spent)
			}
		})
	}
}

func TestCounterForgetsOldRecords(t *testing.T) {
	var c Counter
	for i := range recentRecords + 10 {
		c.Record(Record{CallID: string(rune('a'+i%26)) + time.Duration(i).String(), Used: Amount{Tokens: 1}}, t0)
	}
	if len(c.Recorded) != recentRecords || c.Spent.Tokens != recentRecords+10 {
		t.Fatalf("remembers %d records and spent %d", len(c.Recorded), c.Spent.Tokens)
	}
}

func TestUsage(t *testing.T) {
	c := Counter{}
	c.Admit(Request{CallID: "a", Limits: day(100), Hold: time.Minute}, t0)
	c.Record(Record{CallID: "a", Used: Amount{Tokens: 9}}, t0)
	c.Admit(Request{CallID: "b", Limits: day(100), Hold: time.Minute}, t0)
	for _, tc := range []struct {
		name     string
		window   time.Duration
		now      time.Time
		spent    int64
		inFlight int
	}{
		{"this window", 24 * time.Hour, t0, 9, 1},
		{"after the call's timeout", 24 * time.Hour, t0.Add(2 * time.Minute), 9, 0},
		{"the next window", 24 * time.Hour, t0.Add(24 * time.Hour), 0, 0},
		{"another window length", time.Hour, t0, 0, 1},
	} {
		u := c.Usage(tc.window, tc.now)
		if u.Spent.Tokens != tc.spent || u.InFlight != tc.inFlight || !u.WindowEnd.Equal(u.WindowStart.Add(tc.window)) {
			t.Errorf("%s: %+v", tc.name, u)
		}
	}
}

func TestSessionRefusal(t *testing.T) {
	for _, tc := range []struct {
		limit, used int64
		want        string
	}{
		{0, 1 << 40, ""},
		{100, 99, ""},
		{100, 100, "spend limit reached: this session spent 100 of its 100 tokens"},
	} {
		if got := SessionRefusal(Limits{SessionTokens: tc.limit}, tc.used); got != tc.want {
			t.Errorf("SessionRefusal(%d, %d) = %q, want %q", tc.limit, tc.used, got, tc.want)
		}
	}
}

func TestPriceAndFormat(t *testing.T) {
	// $3 per million input, $0.30 cached, $15 per million output.
	p := Price{InputMicroPerMillion: 3_000_000, CachedInputMicroPerMillion: 300_000, OutputMicroPerMillion: 15_000_000}
	for _, tc := range []struct {
		input, cached, output int64
		want                  string
	}{
		{1_000_000, 0, 0, "3"},
		{1000, 0, 1000, "0.018"},
		{1000, 1000, 0, "0.0003"},
		{1, 0, 0, "0.000003"},
		{0, 0, 0, "0"},
		{10, 50, 0, "0.000003"}, // cached beyond input is capped at input
		// What a provider reports negative counts as none, and what would
		// overflow costs the most a counter holds, never a negative sum.
		{-1_000_000, 0, 1000, "0.015"},
		{1000, -5, -1000, "0.003"},
		{10_000_000_000_000, 0, 0, "30000000"}, // past int64 before the division
		{math.MaxInt64, 0, 0, "9223372036854.775807"},
		{math.MaxInt64, 0, math.MaxInt64, "9223372036854.775807"},
	} {
		if got := FormatMicro(p.Cost(tc.input, tc.cached, tc.output)); got != tc.want {
			t.Errorf("Cost(%d, %d, %d) = %s, want %s", tc.input, tc.cached, tc.output, got, tc.want)
		}
	}
	var c Counter
	for _, used := range []Amount{{Tokens: math.MaxInt64, MicroCost: math.MaxInt64}, {Tokens: 5, MicroCost: 5}} {
		c.Record(Record{CallID: fmt.Sprint(used), Used: used}, time.Unix(0, 0))
	}
	if c.Spent.Tokens != math.MaxInt64 || c.Spent.MicroCost != math.MaxInt64 {
		t.Errorf("a counter past the largest int64 holds %+v, want it held there", c.Spent)
	}
	if got := FormatMicro(-1_500_000); got != "-1.5" {
		t.Errorf("FormatMicro(-1.5) = %s", got)
	}
}

func TestValidate(t *testing.T) {
	ok := Request{CallID: "a", Limits: day(1), Hold: time.Minute}
	if err := ok.Validate(); err != nil {
		t.Fatal(err)
	}
	for name, r := range map[string]Request{
		"callId": {Limits: day(1), Hold: time.Minute},
		"window": {CallID: "a", Limits: Limits{Window: time.Second}, Hold: time.Minute},
		"agent":  {CallID: "a", Limits: Limits{Window: time.Hour, Agent: Amount{Tokens: -1}}, Hold: time.Minute},
		"hold":   {CallID: "a", Limits: day(1)},
	} {
		if err := r.Validate(); err == nil || !strings.Contains(err.Error(), name) {
			t.Errorf("%s: %v", name, err)
		}
	}
	if err := (Record{CallID: "a", Used: Amount{Tokens: -1}}).Validate(); err == nil {
		t.Error("a negative record passed")
	}
}

func TestParseMicro(t *testing.T) {
	for in, want := range map[string]int64{"25": 25_000_000, "2.50": 2_500_000, "0.000001": 1, "999999999999.999999": 999_999_999_999_999_999} {
		if got, err := ParseMicro(in); err != nil || got != want {
			t.Errorf("ParseMicro(%q) = %d, %v, want %d", in, got, err, want)
		}
		if got, _ := ParseMicro(in); FormatMicro(got) != strings.TrimRight(strings.TrimRight(in, "0"), ".") && in != "25" {
			t.Errorf("FormatMicro(ParseMicro(%q)) = %s", in, FormatMicro(got))
		}
	}
	for _, in := range []string{"", ".5", "5.", "-1", "1.2345678", "1e3", "1,5", "+1", "1.-5", "1234567890123"} {
		if _, err := ParseMicro(in); err == nil {
			t.Errorf("ParseMicro(%q) passed", in)
		}
	}
}
