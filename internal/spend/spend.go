// Package spend holds the rules of an Agent's built-in spend limit: a
// budget of tokens and cost per window, shared by every session of the
// Agent, and a budget of tokens per session. It is plain Go: the engine
// keeps a Counter in a durable counter workflow that every worker of the
// Agent asks, and the operator reads it for the Agent's status.
package spend

import (
	"fmt"
	"math"
	"math/bits"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/stepwise-run/stepwise/internal/contract"
)

// The counter's names on the engine.
const (
	// CounterWorkflow is the workflow type of a Flow type's spend counter.
	CounterWorkflow = "stepwise.SpendCounter"
	// UsageQuery answers with the counter's Counter.
	UsageQuery = "usage"
)

// Amount is what model calls spent: tokens, and cost in millionths of the
// currency the Agent's prices are in.
type Amount struct {
	Tokens int64 `json:"tokens"`
	// MicroCost is the cost in millionths of a currency unit, so sums stay
	// exact.
	MicroCost int64 `json:"microCost"`
}

// add returns the sum of two amounts; it never wraps past a limit.
func (a Amount) add(b Amount) Amount {
	return Amount{Tokens: contract.AddCounts(a.Tokens, b.Tokens), MicroCost: contract.AddCounts(a.MicroCost, b.MicroCost)}
}

// Limits are the bounds of one Agent's budget. A zero bound is no bound.
type Limits struct {
	// Window is how long each budget window lasts; windows are aligned to
	// whole multiples of it since the Unix epoch, so every worker agrees on
	// where one ends.
	Window time.Duration `json:"window"`
	// Agent bounds what all the Agent's sessions spend in one window.
	Agent Amount `json:"agent"`
	// SessionTokens bounds the tokens one session spends over its life.
	SessionTokens int64 `json:"sessionTokens,omitempty"`
}

// WindowStart is the start of the window that holds now.
func (l Limits) WindowStart(now time.Time) time.Time {
	if l.Window <= 0 {
		return time.Time{}
	}
	return time.Unix(0, 0).UTC().Add(now.Sub(time.Unix(0, 0)).Truncate(l.Window))
}

// Request asks the counter to admit one model call.
type Request struct {
	// CallID names the call attempt; its Record names it again.
	CallID string `json:"callId"`
	// Limits are the asking worker's limits.
	Limits Limits `json:"limits"`
	// Hold is how long an unrecorded admission holds budget: the call
	// attempt's timeout, after which its worker is gone.
	Hold time.Duration `json:"hold"`
}

// Validate refuses a request the counter cannot account for.
func (r Request) Validate() error {
	if err := checkCallID(r.CallID); err != nil {
		return err
	}
	switch {
	case r.Limits.Window < time.Minute:
		return fmt.Errorf("limits.window must be at least one minute, not %s", r.Limits.Window)
	case r.Limits.Agent.Tokens < 0 || r.Limits.Agent.MicroCost < 0:
		return fmt.Errorf("limits.agent must not be negative")
	case r.Hold <= 0:
		return fmt.Errorf("hold must be positive, not %s", r.Hold)
	}
	return nil
}

// Record tells the counter what an admitted call used.
type Record struct {
	CallID string `json:"callId"`
	Used   Amount `json:"used"`
}

// Validate refuses a record the counter cannot account for.
func (r Record) Validate() error {
	if err := checkCallID(r.CallID); err != nil {
		return err
	}
	if r.Used.Tokens < 0 || r.Used.MicroCost < 0 {
		return fmt.Errorf("used must not be negative")
	}
	return nil
}

// checkCallID refuses a call ID the counter would not keep.
func checkCallID(id string) error {
	if id == "" || len(id) > 512 {
		return fmt.Errorf("callId must have 1 to 512 characters, not %d", len(id))
	}
	return nil
}

// Decision is the counter's answer to a Request.
type Decision struct {
	Admitted bool `json:"admitted"`
	// Reason says, when not admitted, which limit is spent and when the
	// next window begins.
	Reason string `json:"reason,omitempty"`
}

// Reservation is budget an admitted call holds until its record arrives.
type Reservation struct {
	CallID  string    `json:"callId"`
	Amount  Amount    `json:"amount"`
	Expires time.Time `json:"expires"`
}

// recentRecords is how many recorded call IDs a counter remembers, so a
// record sent twice counts once.
const recentRecords = 256

// Counter is the durable state of one Agent's budget: what the current
// window spent, and the calls admitted and not yet recorded.
type Counter struct {
	// WindowStart is the start of the window Spent belongs to.
	WindowStart time.Time `json:"windowStart"`
	// Window is the window length WindowStart was computed with.
	Window time.Duration `json:"window"`
	// Spent is what the Agent's sessions spent in the window.
	Spent Amount `json:"spent"`
	// Calls counts the calls recorded in the window.
	Calls int64 `json:"calls"`
	// LargestCall is the most one call has used; an admitted call
	// reserves this much until its record arrives.
	LargestCall Amount `json:"largestCall"`
	// Reserved are the admitted calls not yet recorded, in the order they
	// were admitted; a list, not a map, so workflow code that walks it
	// replays the same.
	Reserved []Reservation `json:"reserved,omitempty"`
	// Recorded are the last recorded call IDs, oldest first.
	Recorded []string `json:"recorded,omitempty"`
}

// roll starts a new window when now is past the counter's, and lets
// expired reservations go.
func (c *Counter) roll(window time.Duration, now time.Time) {
	start := Limits{Window: window}.WindowStart(now)
	if window != c.Window || start.After(c.WindowStart) {
		c.WindowStart, c.Window, c.Spent, c.Calls = start, window, Amount{}, 0
	}
	c.Reserved = slices.DeleteFunc(c.Reserved, func(r Reservation) bool { return !now.Before(r.Expires) })
}

// reservation is the index of a call's reservation, or -1.
func (c *Counter) reservation(id string) int {
	return slices.IndexFunc(c.Reserved, func(r Reservation) bool { return r.CallID == id })
}

// reserved is what the admitted calls hold.
func (c *Counter) reserved() Amount {
	var sum Amount
	for _, r := range c.Reserved {
		sum = sum.add(r.Amount)
	}
	return sum
}

// Admit admits a model call when what the window spent, plus what the
// calls already admitted may spend, is under each of the Agent's bounds.
// An admitted call reserves as much as the largest call so far, so calls
// that run at once stop at the budget within about one call's usage.
func (c *Counter) Admit(req Request, now time.Time) Decision {
	c.roll(req.Limits.Window, now)
	if c.reservation(req.CallID) >= 0 || slices.Contains(c.Recorded, req.CallID) {
		// The same attempt asking again, as after a lost answer.
		return Decision{Admitted: true}
	}
	held := c.Spent.add(c.reserved())
	next := c.WindowStart.Add(c.Window).UTC().Format(time.RFC3339)
	if limit := req.Limits.Agent.Tokens; limit > 0 && held.Tokens >= limit {
		return Decision{Reason: c.refusal(fmt.Sprintf("%d of its %d tokens", c.Spent.Tokens, limit), held.Tokens > c.Spent.Tokens, next)}
	}
	if limit := req.Limits.Agent.MicroCost; limit > 0 && held.MicroCost >= limit {
		return Decision{Reason: c.refusal(fmt.Sprintf("%s of its %s cost", FormatMicro(c.Spent.MicroCost), FormatMicro(limit)), held.MicroCost > c.Spent.MicroCost, next)}
	}
	c.Reserved = append(c.Reserved, Reservation{CallID: req.CallID, Amount: c.LargestCall, Expires: now.Add(req.Hold)})
	return Decision{Admitted: true}
}

func (c *Counter) refusal(spent string, inFlight bool, next string) string {
	msg := "spend limit reached: the Agent's sessions spent " + spent + " in the window that began " +
		c.WindowStart.UTC().Format(time.RFC3339)
	if inFlight {
		msg += ", and model calls running now may spend the rest"
	}
	return msg + "; the next window begins " + next
}

// Record counts what an admitted call used and frees its reservation. A
// call whose reservation expired still counts: its usage was spent. A
// record sent twice counts once.
func (c *Counter) Record(rec Record, now time.Time) {
	c.roll(c.Window, now)
	if slices.Contains(c.Recorded, rec.CallID) {
		return
	}
	if i := c.reservation(rec.CallID); i >= 0 {
		c.Reserved = slices.Delete(c.Reserved, i, i+1)
	}
	c.Spent = c.Spent.add(rec.Used)
	c.Calls++
	c.LargestCall = Amount{Tokens: max(c.LargestCall.Tokens, rec.Used.Tokens), MicroCost: max(c.LargestCall.MicroCost, rec.Used.MicroCost)}
	c.Recorded = append(c.Recorded, rec.CallID)
	if len(c.Recorded) > recentRecords {
		c.Recorded = append([]string(nil), c.Recorded[len(c.Recorded)-recentRecords:]...)
	}
}

// Usage is what a counter shows of the current window.
type Usage struct {
	WindowStart time.Time `json:"windowStart"`
	WindowEnd   time.Time `json:"windowEnd"`
	Spent       Amount    `json:"spent"`
	Calls       int64     `json:"calls"`
	// InFlight counts the admitted calls not recorded yet.
	InFlight int `json:"inFlight"`
}

// Usage is the counter seen at now with the given window: a window that
// ended shows as a new, unspent one.
func (c Counter) Usage(window time.Duration, now time.Time) Usage {
	start := Limits{Window: window}.WindowStart(now)
	u := Usage{WindowStart: start, WindowEnd: start.Add(window)}
	if window == c.Window && c.WindowStart.Equal(start) {
		u.Spent, u.Calls = c.Spent, c.Calls
	}
	for _, r := range c.Reserved {
		if now.Before(r.Expires) {
			u.InFlight++
		}
	}
	return u
}

// SessionRefusal says why a session that spent used tokens may make no
// more model calls under limits, or "" when it may.
func SessionRefusal(limits Limits, used int64) string {
	if limits.SessionTokens <= 0 || used < limits.SessionTokens {
		return ""
	}
	return fmt.Sprintf("spend limit reached: this session spent %d of its %d tokens", used, limits.SessionTokens)
}

// Price is what a model charges per million tokens, in millionths of a
// currency unit.
type Price struct {
	InputMicroPerMillion       int64 `json:"inputMicroPerMillion"`
	CachedInputMicroPerMillion int64 `json:"cachedInputMicroPerMillion,omitempty"`
	OutputMicroPerMillion      int64 `json:"outputMicroPerMillion"`
}

// Cost is what a call with these token counts costs, in millionths,
// rounded up so a budget is never under-charged. Cached input tokens are
// part of input and charged at the cached price when there is one.
func (p Price) Cost(input, cachedInput, output int64) int64 {
	cachedPrice := p.CachedInputMicroPerMillion
	if cachedPrice == 0 {
		cachedPrice = p.InputMicroPerMillion
	}
	input = max(input, 0)
	cachedInput = min(max(cachedInput, 0), input)
	// In 128 bits, so even counts a provider reports near the largest
	// int64 cost exactly what they say, up to the largest cost a counter
	// holds.
	var hi, lo uint64
	for _, term := range [][2]int64{{input - cachedInput, p.InputMicroPerMillion}, {cachedInput, cachedPrice}, {max(output, 0), p.OutputMicroPerMillion}} {
		h, l := bits.Mul64(uint64(term[0]), uint64(max(term[1], 0))) //nolint:gosec // both are non-negative
		var carry uint64
		lo, carry = bits.Add64(lo, l, 0)
		hi, _ = bits.Add64(hi, h, carry)
	}
	if hi >= 1_000_000 {
		return math.MaxInt64
	}
	cost, rest := bits.Div64(hi, lo, 1_000_000)
	if rest != 0 {
		cost++
	}
	if cost > math.MaxInt64 {
		return math.MaxInt64
	}
	return int64(cost)
}

// FormatMicro writes millionths as a decimal with no trailing zeros.
func FormatMicro(micro int64) string {
	sign := ""
	if micro < 0 {
		sign, micro = "-", -micro
	}
	whole, frac := micro/1_000_000, micro%1_000_000
	if frac == 0 {
		return sign + strconv.FormatInt(whole, 10)
	}
	return sign + strconv.FormatInt(whole, 10) + "." + strings.TrimRight(fmt.Sprintf("%06d", frac), "0")
}

// ParseMicro reads a decimal such as "25" or "0.15", with up to six
// decimal places, as millionths.
func ParseMicro(s string) (int64, error) {
	whole, frac, _ := strings.Cut(s, ".")
	if whole == "" || len(whole) > 12 || len(frac) > 6 || strings.HasSuffix(s, ".") {
		return 0, fmt.Errorf("%q is not a decimal with at most 12 digits before the point and 6 after", s)
	}
	w, err := strconv.ParseUint(whole, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("%q is not a decimal: %w", s, err)
	}
	var f uint64
	if frac != "" {
		if f, err = strconv.ParseUint(frac+strings.Repeat("0", 6-len(frac)), 10, 64); err != nil {
			return 0, fmt.Errorf("%q is not a decimal: %w", s, err)
		}
	}
	return int64(w*1_000_000 + f), nil //nolint:gosec // at most 13 digits before the point
}
