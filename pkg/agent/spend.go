package agent

import "context"

// SpendLimit is an application's limit on what model calls spend, usually
// per account or API key across many sessions. A session asks it before
// each model call, summaries included, and tells it what the call used;
// the counters and the limits are the application's. Without one, a
// session makes no checks.
type SpendLimit interface {
	// Admit is asked before each model call attempt. A *SpendLimitError
	// refuses the call: the turn fails with its reason as the session's
	// last turn error, and no other attempt is made. Any other error fails
	// the attempt, which the Step's retry policy may retry.
	Admit(ctx context.Context, call SpendCall) error
	// Record is told what an admitted call used once it returns, also when
	// it failed, so budget held for it is freed. An error is logged; the
	// call's answer stands.
	Record(ctx context.Context, call SpendCall, used SpendUsage) error
}

// SpendCall names one model call attempt.
type SpendCall struct {
	SessionID string
	TurnID    string
	// CallID is unique to this attempt and the same in Admit and Record,
	// so a counter can tell a retried message from a new call.
	CallID string
	// SessionTokens are the tokens the session's recorded calls used
	// before this one.
	SessionTokens int64
}

// SpendUsage is what one model call used, as the provider reported it.
type SpendUsage struct {
	// Provider names the provider called; Model the model the Agent asked
	// for, whose price applies whatever model the answer names. Empty
	// when the call failed before an answer.
	Provider, Model                    string
	InputTokens, OutputTokens          int64
	CachedInputTokens, ReasoningTokens int64
}

// SpendLimitError refuses a model call.
type SpendLimitError struct {
	// Reason says which limit is spent, and when it frees up if it does.
	Reason string
}

func (e *SpendLimitError) Error() string { return e.Reason }
