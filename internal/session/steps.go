// Package session is the session Flow: its Steps, their rules and records, as
// plain Go that runs without an engine. An engine binding maps each Step onto
// the engine's primitives; nothing here imports one.
package session

import "time"

// StepName names a Step of the session Flow. The names are part of the
// session's history and of the published Flow graph, so they never change.
type StepName string

// The Steps of the session Flow.
const (
	StepStartAgentSession        StepName = "StartAgentSession"
	StepAwaitUserMessage         StepName = "AwaitUserMessage"
	StepRunModel                 StepName = "RunModel"
	StepCompactContext           StepName = "CompactContext"
	StepAwaitToolApproval        StepName = "AwaitToolApproval"
	StepAwaitQuestionAnswer      StepName = "AwaitQuestionAnswer"
	StepAwaitTimer               StepName = "AwaitTimer"
	StepCallTool                 StepName = "CallTool"
	StepCallSingleAttemptTool    StepName = "CallSingleAttemptTool"
	StepPollToolTask             StepName = "PollToolTask"
	StepRecordToolFailure        StepName = "RecordToolFailure"
	StepRecordToolOutcomeUnknown StepName = "RecordToolOutcomeUnknown"
	StepResumeTurn               StepName = "ResumeTurn"
	StepApplyTurnControl         StepName = "ApplyTurnControl"
	StepRecordTurnFailure        StepName = "RecordTurnFailure"
	StepCancelToolTask           StepName = "CancelToolTask"
)

// StepKind says how a Step runs, which decides how an engine binds it.
type StepKind string

// Step kinds.
const (
	// StepKindStart initializes a session.
	StepKindStart StepKind = "start"
	// StepKindCall calls something outside the session (a model or a tool)
	// and may be retried: an engine activity.
	StepKindCall StepKind = "call"
	// StepKindWait waits for a person, a timer or other Steps; no worker holds
	// the wait.
	StepKindWait StepKind = "wait"
	// StepKindFailureRoute records the outcome of a call Step whose
	// attempts ran out.
	StepKindFailureRoute StepKind = "failure_route"
	// StepKindControl moves the session between turns.
	StepKindControl StepKind = "control"
)

// StepInput says what a Step receives, so parallel tool Steps never share
// state.
type StepInput string

// Step inputs.
const (
	StepInputNone           StepInput = "none"
	StepInputStart          StepInput = "session_start"
	StepInputToolCallID     StepInput = "tool_call_id"
	StepInputThroughSeq     StepInput = "through_sequence"
	StepInputResultCount    StepInput = "expected_result_count"
	StepInputTurnID         StepInput = "turn_id"
	StepInputFailingStepArg StepInput = "failing_step_input"
)

// RetryPolicy bounds the attempts of a call Step.
type RetryPolicy struct {
	// MaxAttempts is the number of attempts, the first included.
	MaxAttempts int `json:"maxAttempts"`
	// Within bounds all attempts together; zero means no bound beyond the
	// attempts.
	Within time.Duration `json:"within,omitempty"`
}

// StepSpec is the fixed definition of one Step.
type StepSpec struct {
	// Name of the Step.
	Name StepName `json:"name"`
	// Kind says how the Step runs.
	Kind StepKind `json:"kind"`
	// Input is what the Step receives.
	Input StepInput `json:"input"`
	// PerToolCall is true for Steps that run once per tool call, in
	// parallel with the turn's other tool calls.
	PerToolCall bool `json:"perToolCall,omitempty"`
	// Summary says what the Step does.
	Summary string `json:"summary"`
	// AttemptTimeout bounds one attempt of a call Step.
	AttemptTimeout time.Duration `json:"attemptTimeout,omitempty"`
	// HeartbeatTimeout fails an attempt whose worker stopped reporting.
	HeartbeatTimeout time.Duration `json:"heartbeatTimeout,omitempty"`
	// Retry bounds the attempts of a call Step.
	Retry *RetryPolicy `json:"retry,omitempty"`
	// FailureRoutes are the Steps that record the outcome when the attempts
	// run out; a tool Step's effect class chooses between two.
	FailureRoutes []StepName `json:"failureRoutes,omitempty"`
	// Cancellable is true when cancel_turn stops the Step: a model call's
	// answer is dropped, a wait ends rejected, a task is abandoned.
	Cancellable bool `json:"cancellable,omitempty"`
	// WaitsForPerson is true when a session in this Step waits for a person;
	// such sessions are found by searching the Steps they wait in.
	WaitsForPerson bool `json:"waitsForPerson,omitempty"`
	// since is the engine version that first ran the Step.
	since string
}

// Attempt bounds the operator sizes a stopping worker's grace period by.
const (
	// ModelAttemptTimeout bounds one attempt of a Step that calls a model.
	ModelAttemptTimeout = modelAttemptTimeout
	// ToolAttemptTimeout bounds one attempt of a tool Step.
	ToolAttemptTimeout = toolAttemptTimeout
)

const (
	modelAttemptTimeout   = 15 * time.Minute
	modelHeartbeatTimeout = 2 * time.Minute
	modelRetryWithin      = 30 * time.Minute
	effectAttempts        = 3
	// toolAttemptTimeout bounds a hung tool; a dead worker is found sooner,
	// by the heartbeat timeout, since every tool Step heartbeats.
	toolAttemptTimeout = time.Hour
)

// modelRetry is the retry policy of the Steps that call a model.
var modelRetry = RetryPolicy{MaxAttempts: effectAttempts, Within: modelRetryWithin}

// stepSpecs lists every Step in the order the graph shows them.
var stepSpecs = []StepSpec{
	{
		Name: StepStartAgentSession, Kind: StepKindStart, Input: StepInputStart, since: since010,
		Summary: "Initializes state, usage, interrupts and session settings; a non-blank initial message starts the first turn.",
	},
	{
		Name: StepAwaitUserMessage, Kind: StepKindWait, Input: StepInputNone, since: since010,
		Summary: "Waits for a turn control request, a queued user message, or the approval of the current plan revision, in that order, and starts a chat, planning or executing turn.",
	},
	{
		Name: StepRunModel, Kind: StepKindCall, Input: StepInputNone, since: since010,
		Summary:        "Makes exactly one model call from committed state and records its answer, or the tool calls it requested with their records and interrupts.",
		AttemptTimeout: modelAttemptTimeout, HeartbeatTimeout: modelHeartbeatTimeout, Retry: &modelRetry,
		FailureRoutes: []StepName{StepRecordTurnFailure}, Cancellable: true,
	},
	{
		Name: StepCompactContext, Kind: StepKindCall, Input: StepInputThroughSeq, since: since020,
		Summary:        "Summarizes the messages through a cut point with one model call and stores the summary.",
		AttemptTimeout: modelAttemptTimeout, HeartbeatTimeout: modelHeartbeatTimeout, Retry: &modelRetry,
		FailureRoutes: []StepName{StepRecordTurnFailure}, Cancellable: true,
	},
	{
		Name: StepAwaitToolApproval, Kind: StepKindWait, Input: StepInputToolCallID, PerToolCall: true, since: since010,
		Summary:     "Waits for a person to approve or reject a tool call, or for its deadline on the engine's clock.",
		Cancellable: true, WaitsForPerson: true,
	},
	{
		Name: StepAwaitQuestionAnswer, Kind: StepKindWait, Input: StepInputToolCallID, PerToolCall: true, since: since010,
		Summary:     "Waits for the answer to an ask_user question or to a question a tool asked, a decline, or the deadline.",
		Cancellable: true, WaitsForPerson: true,
	},
	{
		Name: StepAwaitTimer, Kind: StepKindWait, Input: StepInputToolCallID, PerToolCall: true, since: since010,
		Summary:     "Waits on an engine timer for a durable_wait call; no worker holds the wait.",
		Cancellable: true,
	},
	{
		Name: StepCallTool, Kind: StepKindCall, Input: StepInputToolCallID, PerToolCall: true, since: since010,
		Summary:        "Runs one read or idempotent_write tool call with the call's idempotency key, retried with the same key.",
		AttemptTimeout: toolAttemptTimeout, HeartbeatTimeout: modelHeartbeatTimeout,
		Retry:         &RetryPolicy{MaxAttempts: effectAttempts},
		FailureRoutes: []StepName{StepRecordToolFailure},
	},
	{
		Name: StepCallSingleAttemptTool, Kind: StepKindCall, Input: StepInputToolCallID, PerToolCall: true, since: since010,
		Summary:        "Runs one non_idempotent_write or unclassified tool call once; a failure records outcome_unknown.",
		AttemptTimeout: toolAttemptTimeout, HeartbeatTimeout: modelHeartbeatTimeout,
		Retry:         &RetryPolicy{MaxAttempts: 1},
		FailureRoutes: []StepName{StepRecordToolOutcomeUnknown},
	},
	{
		Name: StepPollToolTask, Kind: StepKindCall, Input: StepInputToolCallID, PerToolCall: true, since: since020,
		Summary:        "Waits on a timer, then polls a tool task once: its result, a question, or the next interval.",
		AttemptTimeout: toolAttemptTimeout, HeartbeatTimeout: modelHeartbeatTimeout,
		Retry:         &RetryPolicy{MaxAttempts: effectAttempts},
		FailureRoutes: []StepName{StepRecordToolFailure, StepRecordToolOutcomeUnknown}, Cancellable: true,
	},
	{
		Name: StepRecordToolFailure, Kind: StepKindFailureRoute, Input: StepInputToolCallID, PerToolCall: true, since: since010,
		Summary: "Records failed for a read and outcome_unknown for a write whose attempts ran out; failed with the not-run prefix when no attempt reached a worker.",
	},
	{
		Name: StepRecordToolOutcomeUnknown, Kind: StepKindFailureRoute, Input: StepInputToolCallID, PerToolCall: true, since: since010,
		Summary: "Records outcome_unknown for a single-attempt call that failed; failed with the not-run prefix when no attempt reached a worker.",
	},
	{
		Name: StepResumeTurn, Kind: StepKindWait, Input: StepInputResultCount, since: since010,
		Summary: "Waits for every tool call of the response to publish its result, or for a steer or cancellation.",
	},
	{
		Name: StepApplyTurnControl, Kind: StepKindControl, Input: StepInputNone, since: since020,
		Summary: "Ends a steered or cancelled turn with its unfinished-turn messages or a note, and starts the next turn with the steered messages.",
	},
	{
		Name: StepRecordTurnFailure, Kind: StepKindFailureRoute, Input: StepInputFailingStepArg, since: since010,
		Summary: "Records the turn's error and, when tool calls ran, a note listing them so the next turn does not repeat a write.",
	},
	{
		Name: StepCancelToolTask, Kind: StepKindCall, Input: StepInputToolCallID, PerToolCall: true, since: since020,
		Summary:        "Asks the tool to cancel an abandoned task, best-effort, and records outcome_unknown.",
		AttemptTimeout: 30 * time.Second, Retry: &RetryPolicy{MaxAttempts: effectAttempts, Within: 2 * time.Minute},
		FailureRoutes: []StepName{StepRecordToolOutcomeUnknown},
	},
}

// Steps returns the definition of every Step, in graph order.
func Steps() []StepSpec {
	out := make([]StepSpec, len(stepSpecs))
	copy(out, stepSpecs)
	return out
}

// Step returns the definition of one Step.
func Step(name StepName) (StepSpec, bool) {
	for _, s := range stepSpecs {
		if s.Name == name {
			return s, true
		}
	}
	return StepSpec{}, false
}
