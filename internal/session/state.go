package session

import (
	"cmp"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/stepwise-run/stepwise/pkg/agent"
)

// State is a session's durable state. The engine binding holds it and calls
// the methods below from its Steps and RPC handlers; each method is one
// commit: it changes the state and returns the events to write.
type State struct {
	SessionID string `json:"sessionId"`
	// StartRequestID identifies the start_session call that started the
	// session, so a repeated call can tell it started it.
	StartRequestID string          `json:"startRequestId"`
	Started        bool            `json:"started"`
	Status         Status          `json:"status"`
	Mode           InteractionMode `json:"mode"`
	// Window holds the newest stored messages; Chunks the older ones that
	// retention has kept, oldest first; Index says where each is.
	Window       []Message      `json:"window"`
	Chunks       []MessageChunk `json:"chunks,omitempty"`
	Index        MessageIndex   `json:"index"`
	NextSequence int64          `json:"nextSequence"`
	TurnCount    int            `json:"turnCount"`
	Turn         *Turn          `json:"turn,omitempty"`
	Interrupts   []Interrupt    `json:"interrupts,omitempty"`
	Usage        Usage          `json:"usage"`
	Queued       []UserMessage  `json:"queued,omitempty"`
	// Steered are the steered messages not applied yet; they start the next
	// turn, ahead of queued ones.
	Steered []UserMessage `json:"steered,omitempty"`
	// NextMessageID numbers the user messages as they are queued.
	NextMessageID int64 `json:"nextMessageId"`
	// LastTurnError is set when a turn fails and cleared when a later turn
	// completes.
	LastTurnError string `json:"lastTurnError,omitempty"`
	// Settings are the session settings the next turn starts with, as
	// compact JSON; nil when there are none.
	Settings json.RawMessage `json:"settings,omitempty"`
	// StoredBytes is about how much the stored messages take.
	StoredBytes int64 `json:"storedBytes,omitempty"`
	// Summary summarizes the earlier messages once the session compacted.
	Summary *ContextSummary `json:"summary,omitempty"`
	// DeletedBeforeSequence is where the messages retention deleted end;
	// zero while none was deleted.
	DeletedBeforeSequence int64 `json:"deletedBeforeSequence,omitempty"`
	// Plan is the session's plan; nil until write_todos first succeeds.
	Plan *Plan `json:"plan,omitempty"`
	// PendingPlanExecution is the plan revision execute_plan approved and
	// no turn has started yet; zero when none.
	PendingPlanExecution int `json:"pendingPlanExecution,omitempty"`
	// AcceptedRequests are the IDs of the newest requests the session
	// accepted, oldest first, at most MaxAcceptedRequests. They travel
	// with the state into a new run, so a request sent again after the
	// session continued as new is still the same request.
	AcceptedRequests []string `json:"acceptedRequests,omitempty"`
	// PlanModeEnabled says whether messages may ask for a planning turn. It
	// is the worker's configuration, set by the engine binding on every run,
	// not session state, so only validators read it: a validator runs when
	// a request arrives and never on replay, while a handler decides from
	// the request and the state alone, which the history holds.
	PlanModeEnabled bool `json:"-"`
	// ImageStoreURI is the location of the agent's media store, empty when
	// it has none. Like PlanModeEnabled it is the worker's configuration,
	// read by validators only.
	ImageStoreURI string `json:"-"`
	// TraceContext is the W3C traceparent of the newest activation's root
	// span, empty when its worker traced nothing.
	TraceContext string `json:"traceContext,omitempty"`
}

// Rejection is the reason an RPC returns false. Nothing changed.
type Rejection struct {
	Reason string
}

func (r *Rejection) Error() string { return r.Reason }

func reject(format string, args ...any) error {
	return &Rejection{Reason: fmt.Sprintf(format, args...)}
}

// StartInput starts a session.
type StartInput struct {
	// RequestID identifies the start call.
	RequestID string `json:"requestId"`
	// InitialMessage, when not blank, starts the first turn.
	InitialMessage string `json:"initialMessage,omitempty"`
	// Settings are the session settings, a JSON object; CheckStartSettings
	// must accept them before Start.
	Settings json.RawMessage `json:"settings,omitempty"`
}

// NewState returns the state of a session that has not started.
func NewState(sessionID string) *State {
	return &State{SessionID: sessionID, NextSequence: 1, NextMessageID: 1}
}

// Start is StartAgentSession: it initializes the session, and a non-blank
// initial message starts the first turn at once.
func (s *State) Start(in StartInput) []Event {
	s.Started = true
	s.StartRequestID = in.RequestID
	s.Status = StatusWaitingForUserMessage
	s.Mode = ModeChat
	if len(in.Settings) > 0 {
		s.Settings, _ = normalizeSettings(in.Settings)
	}
	if strings.TrimSpace(in.InitialMessage) == "" {
		return nil
	}
	s.queue(in.InitialMessage)
	return s.BeginTurn()
}

// SendRequest is send_user_message's input.
type SendRequest struct {
	Text string `json:"text"`
	// Images are references to images already in the agent's media store.
	Images []ImageReference `json:"images,omitempty"`
	// PlanMode asks for a planning turn; plan mode must be enabled.
	PlanMode bool `json:"planMode,omitempty"`
}

// CheckSend is send_user_message's validator.
func (s *State) CheckSend(req SendRequest) error {
	if req.PlanMode && !s.PlanModeEnabled {
		return reject("plan mode is not enabled for this agent")
	}
	if err := checkImagesOfStore(req.Images, s.ImageStoreURI); err != nil {
		return err
	}
	return s.checkSendable(req)
}

// checkSendable holds a message to what the session's state decides.
func (s *State) checkSendable(req SendRequest) error {
	switch {
	case !s.Started:
		return reject("the session has not started")
	case strings.TrimSpace(req.Text) == "":
		return reject("the message text is blank")
	}
	if err := CheckImages(req.Images); err != nil {
		return reject("%v", err)
	}
	return nil
}

// Send is send_user_message: the message waits for the running turn to end.
// It runs once CheckSend accepted the request, and again whenever a worker
// replays the session, so it reads nothing but the request and the state:
// a plan-mode message CheckSend accepted stays accepted after the Agent
// turns plan mode off.
func (s *State) Send(req SendRequest) (UserMessage, error) {
	if err := s.checkSendable(req); err != nil {
		return UserMessage{}, err
	}
	m := s.queue(req.Text)
	m.PlanMode = req.PlanMode
	m.Images = req.Images
	s.Queued[len(s.Queued)-1] = m
	return m, nil
}

// QueueUserMessage sends a chat message.
func (s *State) QueueUserMessage(text string) (UserMessage, error) {
	return s.Send(SendRequest{Text: text})
}

func (s *State) queue(text string) UserMessage {
	m := s.newMessage(text)
	s.Queued = append(s.Queued, m)
	return m
}

// CanBeginTurn reports whether AwaitUserMessage has a message or a plan
// approval to start a turn with.
func (s *State) CanBeginTurn() bool {
	return s.Turn == nil && (len(s.Queued) > 0 || len(s.Steered) > 0 || s.planExecutionPending())
}

// BeginTurn is AwaitUserMessage, or ApplyTurnControl with steered messages:
// it starts a turn with every steered message in order, or else the next
// queued one, or else an approved plan. A turn plans when one of its
// messages asks for plan mode or a draft plan waits for review.
func (s *State) BeginTurn() []Event {
	for s.CanBeginTurn() {
		var msgs []UserMessage
		switch {
		case len(s.Steered) > 0:
			msgs, s.Steered = s.Steered, nil
		case len(s.Queued) > 0:
			msgs, s.Queued = s.Queued[:1], s.Queued[1:]
		default:
			if events := s.beginPlanExecution(); events != nil {
				return events
			}
			// A stale approval is dropped; look again.
			continue
		}
		mode := ModeChat
		if s.Plan != nil && s.Plan.Status == PlanDraft {
			mode = ModePlanning
		}
		for _, m := range msgs {
			if m.PlanMode {
				mode = ModePlanning
			}
		}
		return s.startTurn(mode, msgs)
	}
	return nil
}

// startTurn stores a turn's user messages and starts it.
func (s *State) startTurn(mode InteractionMode, msgs []UserMessage) []Event {
	s.TurnCount++
	turn := &Turn{
		ID: fmt.Sprintf("turn-%d", s.TurnCount), Number: s.TurnCount, Mode: mode,
		FirstSequence: s.NextSequence, Settings: s.Settings,
	}
	s.Turn = turn
	s.Status = StatusRunningModel
	s.Mode = turn.Mode
	first := s.NextSequence
	for _, m := range msgs {
		s.store(Message{Role: RoleUser, Text: m.Text, Images: m.Images})
	}
	return []Event{NewEvent(EventTurnStarted, turn.ID, map[string]any{"sequence": first})}
}

// store appends a message to the active turn.
func (s *State) store(m Message) {
	m.Sequence = s.NextSequence
	if s.Turn != nil {
		m.TurnID = s.Turn.ID
	}
	s.NextSequence++
	s.storeMessage(m)
}

// messageBytes is about what a message adds to the state a session carries.
func messageBytes(m Message) int64 {
	n := len(m.Text) + len(m.TurnID) + len(m.ToolCallID) + len(m.ToolName) + imageBytes(m.Images) + 64
	for _, c := range m.ToolCalls {
		n += len(c.ID) + len(c.Name) + len(c.Arguments)
	}
	for _, o := range m.Output {
		n += len(o.Item) + len(o.Text)
	}
	return int64(n)
}

// MaxStoredMessageBytes is how much message content one session may store:
// its state travels in one payload when it continues as new, and Temporal
// refuses payloads over 2 MB. Compaction with a retention limit keeps a
// session under it however long it runs.
const MaxStoredMessageBytes = 1536 << 10

// StorageFull reports whether the session stores as much as it may carry;
// a turn that starts then fails before its model call.
func (s *State) StorageFull() bool {
	return s.StoredBytes > MaxStoredMessageBytes
}

// StorageFullError is the turn error of a session that stores too much.
func (s *State) StorageFullError() string {
	return fmt.Sprintf("the session stores %d bytes of messages, more than the %d one session may carry; "+
		"enable compaction with a retention limit, or start a new session", s.StoredBytes, int64(MaxStoredMessageBytes))
}

// TurnContext is the committed state a RunModel attempt of the turn works
// from. It fails when the session is no longer in that turn's RunModel, so a
// stale attempt never runs on another turn's state.
func (s *State) TurnContext(turnID string) (TurnContext, error) {
	if s.Turn == nil || s.Turn.ID != turnID || (s.Status != StatusRunningModel && s.Status != StatusCompactingContext) {
		return TurnContext{}, fmt.Errorf("session %s is not running a model call for %s", s.SessionID, turnID)
	}
	tc := TurnContext{
		SessionID: s.SessionID, TurnID: turnID, Mode: s.Turn.Mode,
		Messages: s.messagesAfterSummary(), ModelCalls: s.Turn.ModelCalls, RunState: s.Turn.RunState,
		Settings: s.Turn.Settings, Plan: s.Plan, Summary: s.Summary, CompactThrough: s.Turn.CompactThrough,
		SessionUsage: s.Usage, TraceContext: s.TraceContext, NextSequence: s.NextSequence,
	}
	for _, r := range s.Turn.ToolCalls {
		tc.ToolCalls = append(tc.ToolCalls, *r)
	}
	return tc, nil
}

// ApplyModelOutcome is RunModel's commit. It returns the records of the tool
// calls to start, in model order.
func (s *State) ApplyModelOutcome(out ModelOutcome, now time.Time) ([]*ToolCallRecord, []Event) {
	turn := s.Turn
	if turn == nil {
		return nil, nil
	}
	turn.Options = out.Options
	var events []Event
	if out.Usage != (Usage{}) {
		turn.ModelCalls += int(out.Usage.ModelCalls)
		turn.Usage = turn.Usage.Add(out.Usage)
		s.Usage = s.Usage.Add(out.Usage)
		events = append(events, usageRecorded(turn.ID, out.Usage, s.Usage, out.Metadata))
	}
	switch out.Kind {
	case OutcomeToolCallsRequested:
		if err := checkToolCallIDs(turn, out.ToolCalls); err != nil {
			// The answer is not stored: its calls could never be paired
			// with results a provider accepts.
			return nil, append(events, s.FailTurn(err.Error())...)
		}
		for _, m := range out.NewMessages {
			s.store(m)
		}
		turn.RunState = out.RunState
		s.Status = StatusRunningTools
		records := make([]*ToolCallRecord, 0, len(out.ToolCalls))
		todoCalls := 0
		for _, call := range out.ToolCalls {
			if call.Name == string(agent.BuiltInWriteTodos) {
				todoCalls++
			}
		}
		lastWrite := ""
		for _, call := range out.ToolCalls {
			r, evs := s.deferToolCall(call, todoCalls > 1, lastWrite, now)
			if r.Ordered {
				lastWrite = r.ID
			}
			records = append(records, r)
			events = append(events, evs...)
		}
		if turn.Control.Requested() {
			// Steered while the model call ran: none of its calls started.
			events = append(events, s.settleNewCalls(records)...)
		}
		return records, events
	case OutcomeTurnContinued:
		for _, m := range out.NewMessages {
			s.store(m)
		}
		turn.RunState = out.RunState
		return nil, events
	case OutcomeCompactionNeeded:
		if s.Summary != nil && out.CompactThrough <= s.Summary.LastSequence {
			// Nothing new to summarize: the runner must not ask again.
			return nil, append(events, s.FailTurn(fmt.Sprintf("the runner asked to compact through message %d, which the summary already covers", out.CompactThrough))...)
		}
		return nil, append(events, s.requestCompaction(out.CompactThrough)...)
	default:
		for _, m := range out.NewMessages {
			s.store(m)
		}
		if out.TurnError != "" {
			return nil, append(events, s.endTurn(out.TurnError)...)
		}
		return nil, append(events, s.endTurn("")...)
	}
}

func checkToolCallIDs(turn *Turn, calls []DeferredToolCall) error {
	seen := map[string]bool{}
	for _, r := range turn.ToolCalls {
		seen[r.ID] = true
	}
	for _, c := range calls {
		if c.ID == "" || strings.Contains(c.ID, "/") || seen[c.ID] {
			return fmt.Errorf("%s; the model sent %q", ToolCallIDError, c.ID)
		}
		seen[c.ID] = true
	}
	return nil
}

// deferToolCall records one requested call and decides its first Step.
// repeatedTodos is true when the response called write_todos more than once;
// lastWrite is the response's ordered write before this call, if any.
func (s *State) deferToolCall(call DeferredToolCall, repeatedTodos bool, lastWrite string, now time.Time) (*ToolCallRecord, []Event) {
	turn := s.Turn
	r := &ToolCallRecord{
		ID: call.ID, Name: call.Name, Arguments: call.Arguments, Order: len(turn.ToolCalls),
		Effect: call.Policy.Effect, RequiresApproval: call.Policy.ApprovalRequired(),
		SourceReference: call.SourceReference, StepLimit: call.StepLimit, TraceContext: s.TraceContext,
	}
	if call.Ordered {
		r.Ordered, r.AfterWrite = true, lastWrite
	}
	turn.ToolCalls = append(turn.ToolCalls, r)
	builtIn := agent.BuiltInTool(call.Name)
	if turn.Mode == ModePlanning && builtIn != agent.BuiltInWriteTodos {
		// Recorded final in this commit: the call never runs.
		r.Effect, r.RequiresApproval = agent.EffectRead, false
		return r, append([]Event{s.deferredEvent(r)}, s.finish(r, ToolCallRejected, PlanningOnlyText, "")...)
	}
	if builtIn == agent.BuiltInAskUser || builtIn == agent.BuiltInDurableWait || builtIn == agent.BuiltInWriteTodos {
		if turn.Options.Enabled(builtIn) {
			return r, s.deferBuiltIn(r, builtIn, repeatedTodos, now)
		}
	}
	events := []Event{s.deferredEvent(r)}
	if r.AfterWrite != "" {
		r.Status = ToolCallWriteQueued
		return r, events
	}
	return r, append(events, s.admit(r, now)...)
}

// admit asks a call's approval, or approves it when it needs none.
func (s *State) admit(r *ToolCallRecord, now time.Time) []Event {
	if r.RequiresApproval {
		r.Status = ToolCallAwaitingApproval
		return []Event{s.raise(Interrupt{ID: r.ID, Kind: InterruptApproval, Arguments: r.Arguments}, r, now)}
	}
	r.Status = ToolCallApproved
	return nil
}

// SkippedAfterWriteDetail follows ToolCallNotRunPrefix in the error of an
// ordered write skipped because an earlier one did not succeed.
const SkippedAfterWriteDetail = "an earlier write of the same model response did not succeed"

// WriteReleasable reports whether a queued write's earlier write is final,
// so the write may be admitted or skipped.
func (s *State) WriteReleasable(id string) bool {
	r := s.activeRecord(id)
	if r == nil || r.Status != ToolCallWriteQueued {
		return true
	}
	before := s.Turn.ToolCall(r.AfterWrite)
	return before == nil || before.Status.Final()
}

// ReleaseWrite admits a queued write once the write before it succeeded,
// and skips it, as not run, when that write did not.
func (s *State) ReleaseWrite(id string, now time.Time) []Event {
	r := s.activeRecord(id)
	if r == nil || r.Status != ToolCallWriteQueued || !s.WriteReleasable(id) {
		return nil
	}
	if before := s.Turn.ToolCall(r.AfterWrite); before != nil && before.Status != ToolCallSucceeded {
		return s.finish(r, ToolCallFailed, "", ToolCallNotRunPrefix+": "+SkippedAfterWriteDetail)
	}
	return s.admit(r, now)
}

func (s *State) deferredEvent(r *ToolCallRecord) Event {
	return NewEvent(EventToolCallDeferred, s.Turn.ID, map[string]any{
		"tool_call_id": r.ID, "tool_name": r.Name, "effect": r.Effect, "requires_approval": r.RequiresApproval,
	})
}

// deferBuiltIn routes a built-in call: no approval, the read effect, and a
// call with invalid arguments fails at once.
func (s *State) deferBuiltIn(r *ToolCallRecord, b agent.BuiltInTool, repeatedTodos bool, now time.Time) []Event {
	r.BuiltIn, r.Effect, r.RequiresApproval = b, agent.EffectRead, false
	events := []Event{s.deferredEvent(r)}
	switch b {
	case agent.BuiltInAskUser:
		args, err := ParseAskUser(r.Arguments)
		if err != nil {
			return append(events, s.finish(r, ToolCallFailed, "", err.Error())...)
		}
		q := &Question{Text: args.Question, Choices: args.Choices, AllowsFreeText: args.AllowsFreeText}
		r.Status, r.Question = ToolCallAwaitingAnswer, q
		return append(events, s.raise(Interrupt{ID: r.ID, Kind: InterruptQuestion, Question: q}, r, now))
	case agent.BuiltInDurableWait:
		args, err := ParseDurableWait(r.Arguments, s.Turn.Options.MaxDurableWait)
		if err != nil {
			return append(events, s.finish(r, ToolCallFailed, "", err.Error())...)
		}
		until := now.Add(args.Duration)
		r.Status, r.WaitUntil, r.WaitReason = ToolCallWaitingForTimer, &until, args.Reason
		return append(events, NewEvent(EventTimerStarted, s.Turn.ID, map[string]any{
			"tool_call_id": r.ID, "wait_until": until, "reason": args.Reason,
		}))
	default:
		return append(events, s.writeTodos(r, repeatedTodos)...)
	}
}

// raise adds an interrupt for a record, with the turn's deadline.
func (s *State) raise(in Interrupt, r *ToolCallRecord, now time.Time) Event {
	in.TurnID, in.ToolCallID, in.ToolName = s.Turn.ID, r.ID, r.Name
	if d := s.Turn.Options.InterruptDeadline; d > 0 {
		deadline := now.Add(d)
		in.Deadline = &deadline
	}
	s.Interrupts = append(s.Interrupts, in)
	payload := map[string]any{
		"interrupt_id": in.ID, "tool_call_id": in.ToolCallID, "tool_name": in.ToolName,
		"deadline": in.Deadline, "kind": in.Kind, "question": nil, "choices": nil, "allows_free_text": nil,
	}
	if in.Question != nil {
		payload["question"], payload["choices"], payload["allows_free_text"] = in.Question.Text, in.Question.Choices, in.Question.AllowsFreeText
	}
	return NewEvent(EventInterruptRaised, s.Turn.ID, payload)
}

// finish makes a record final and writes tool_call_finished.
func (s *State) finish(r *ToolCallRecord, status ToolCallStatus, output, errText string) []Event {
	r.Status, r.Output, r.Error = status, output, errText
	return []Event{NewEvent(EventToolCallFinished, s.Turn.ID, map[string]any{
		"tool_call_id": r.ID, "tool_name": r.Name, "status": status, "effect": r.Effect,
	})}
}

// usageRecorded is the event of one model call's usage, with the provider
// and model that metrics count it under.
func usageRecorded(turnID string, recorded, session Usage, meta CallMetadata) Event {
	return NewEvent(EventUsageRecorded, turnID, map[string]any{
		"recorded": recorded, "session": session,
		"provider": meta.Provider, "model": cmp.Or(meta.RequestModel, meta.ResponseModel),
	})
}

// Interrupt returns a pending interrupt.
func (s *State) Interrupt(id string) (Interrupt, bool) {
	for _, in := range s.Interrupts {
		if in.ID == id {
			return in, true
		}
	}
	return Interrupt{}, false
}

// InterruptOf returns the pending interrupt of a tool call.
func (s *State) InterruptOf(toolCallID string) (Interrupt, bool) {
	for _, in := range s.Interrupts {
		if in.ToolCallID == toolCallID {
			return in, true
		}
	}
	return Interrupt{}, false
}

func (s *State) removeInterrupt(id string) {
	s.Interrupts = slices.DeleteFunc(s.Interrupts, func(in Interrupt) bool { return in.ID == id })
}

// ResolveRequest is resolve_interrupt's input.
type ResolveRequest struct {
	InterruptID      string `json:"interruptId"`
	Approved         bool   `json:"approved"`
	RejectionMessage string `json:"rejectionMessage,omitempty"`
}

// pendingInterrupt finds an interrupt that still waits at now.
func (s *State) pendingInterrupt(id string, now time.Time) (Interrupt, *ToolCallRecord, error) {
	in, ok := s.Interrupt(id)
	if !ok || s.Turn == nil || s.Turn.ID != in.TurnID {
		return Interrupt{}, nil, reject("interrupt %q is not pending", id)
	}
	if in.Deadline != nil && !now.Before(*in.Deadline) {
		return Interrupt{}, nil, reject("interrupt %q is past its deadline", id)
	}
	r := s.Turn.ToolCall(in.ToolCallID)
	if r == nil || r.Status.Final() {
		return Interrupt{}, nil, reject("interrupt %q is not pending", id)
	}
	return in, r, nil
}

// CheckResolve is resolve_interrupt's validator.
func (s *State) CheckResolve(req ResolveRequest, now time.Time) error {
	in, _, err := s.pendingInterrupt(req.InterruptID, now)
	if err != nil {
		return err
	}
	if in.Kind == InterruptQuestion && req.Approved {
		return reject("interrupt %q is a question: answer it with answer_question, or decline it", req.InterruptID)
	}
	return nil
}

// Resolve is resolve_interrupt: approve or reject a tool call, or decline a
// question. It removes the interrupt and applies the answer in one commit.
func (s *State) Resolve(req ResolveRequest, now time.Time) ([]Event, error) {
	if err := s.CheckResolve(req, now); err != nil {
		return nil, err
	}
	in, r, _ := s.pendingInterrupt(req.InterruptID, now)
	s.removeInterrupt(in.ID)
	rejection := ""
	var events []Event
	switch {
	case in.Kind == InterruptQuestion && r.BuiltIn == "":
		returnToTool(r, in, agent.QuestionDeclined, "")
	case in.Kind == InterruptQuestion:
		events = s.finish(r, ToolCallRejected, DeclinedAnswerText, "")
	case req.Approved:
		r.Status = ToolCallApproved
	default:
		r.RejectionMessage = req.RejectionMessage
		rejection = req.RejectionMessage
		events = s.finish(r, ToolCallRejected, "", "")
	}
	return append([]Event{resolvedEvent(in, req.Approved, false, rejection, "")}, events...), nil
}

// resolvedEvent is interrupt_resolved with every field of the event table;
// cancellation_reason is set only when steering or cancellation removed the
// interrupt.
func resolvedEvent(in Interrupt, approved, answered bool, rejection, cancellationReason string) Event {
	orNull := func(s string) any {
		if s == "" {
			return nil
		}
		return s
	}
	return NewEvent(EventInterruptResolved, in.TurnID, map[string]any{
		"interrupt_id": in.ID, "approved": approved, "kind": in.Kind, "answered": answered,
		"rejection_message": orNull(rejection), "cancellation_reason": orNull(cancellationReason),
	})
}

// AnswerRequest is answer_question's input.
type AnswerRequest struct {
	InterruptID string `json:"interruptId"`
	Answer      string `json:"answer"`
}

// CheckAnswer is answer_question's validator.
func (s *State) CheckAnswer(req AnswerRequest, now time.Time) error {
	in, _, err := s.pendingInterrupt(req.InterruptID, now)
	if err != nil {
		return err
	}
	if in.Kind != InterruptQuestion {
		return reject("interrupt %q is not a question", req.InterruptID)
	}
	if err := in.Question.CheckAnswer(req.Answer); err != nil {
		return reject("%v", err)
	}
	return nil
}

// Answer is answer_question: the answer becomes the ask_user call's result.
func (s *State) Answer(req AnswerRequest, now time.Time) ([]Event, error) {
	if err := s.CheckAnswer(req, now); err != nil {
		return nil, err
	}
	in, r, _ := s.pendingInterrupt(req.InterruptID, now)
	s.removeInterrupt(in.ID)
	events := []Event{resolvedEvent(in, true, true, "", "")}
	if r.BuiltIn == "" {
		returnToTool(r, in, agent.QuestionAnswered, req.Answer)
		return events, nil
	}
	output := jsonText(struct {
		Status string `json:"status"`
		Answer string `json:"answer"`
	}{"answered", req.Answer})
	return append(events, s.finish(r, ToolCallSucceeded, output, "")...), nil
}

// ExpireInterrupt is the deadline Timer of an approval or question firing:
// a call still waiting is rejected. A Timer that fires before the deadline,
// or after the answer, changes nothing.
func (s *State) ExpireInterrupt(id string, now time.Time) []Event {
	in, ok := s.Interrupt(id)
	if !ok || in.Deadline == nil || now.Before(*in.Deadline) || s.Turn == nil {
		return nil
	}
	r := s.Turn.ToolCall(in.ToolCallID)
	if r == nil || r.Status.Final() {
		return nil
	}
	s.removeInterrupt(id)
	rejection := ""
	if in.Kind == InterruptApproval {
		rejection = ApprovalDeadlineText
	}
	events := []Event{resolvedEvent(in, false, false, rejection, "")}
	if in.Kind == InterruptQuestion && r.BuiltIn == "" {
		returnToTool(r, in, agent.QuestionDeadlinePassed, "")
		return events
	}
	if in.Kind == InterruptQuestion {
		return append(events, s.finish(r, ToolCallRejected, QuestionDeadlineText, "")...)
	}
	r.RejectionMessage = ApprovalDeadlineText
	return append(events, s.finish(r, ToolCallRejected, "", "")...)
}

// CompleteTimer is a durable wait's Timer firing.
func (s *State) CompleteTimer(id string) []Event {
	r := s.activeRecord(id)
	if r == nil || r.Status != ToolCallWaitingForTimer {
		return nil
	}
	var waited int64
	if r.WaitUntil != nil {
		args, err := ParseDurableWait(r.Arguments, s.Turn.Options.MaxDurableWait)
		if err == nil {
			waited = int64(args.Duration / time.Second)
		}
	}
	output := jsonText(struct {
		Status        string `json:"status"`
		WaitedSeconds int64  `json:"waited_seconds"`
		Reason        string `json:"reason"`
	}{"completed", waited, r.WaitReason})
	return s.finish(r, ToolCallSucceeded, output, "")
}

func (s *State) activeRecord(id string) *ToolCallRecord {
	if s.Turn == nil {
		return nil
	}
	return s.Turn.ToolCall(id)
}

// RecordToolOutcome is a tool Step's commit. A record that is already final
// keeps its outcome.
func (s *State) RecordToolOutcome(id string, out ToolOutcome) []Event {
	r := s.activeRecord(id)
	if r == nil || r.Status.Final() {
		return nil
	}
	switch out.Kind {
	case ToolResultSucceeded:
		r.Images = out.Images
		return s.finish(r, ToolCallSucceeded, out.Output, "")
	case ToolResultFailed:
		return s.finish(r, ToolCallFailed, "", out.Error)
	case ToolResultTaskStarted:
		return s.recordTaskStarted(r, out)
	case ToolResultTaskPending:
		recordTaskPending(r, out)
		return nil
	default:
		return s.finish(r, ToolCallOutcomeUnknown, "", out.Error)
	}
}

// RequestToolInput is a tool Step whose tool asked a question before it took
// any effect: the call waits in AwaitQuestionAnswer under the interrupt ID
// "<toolCallID>-input-<n>". When another call of the turn already uses that
// ID, the asking call fails instead.
func (s *State) RequestToolInput(id string, q Question, continuation string, now time.Time) []Event {
	r := s.activeRecord(id)
	if r == nil || r.Status.Final() {
		return nil
	}
	if strings.TrimSpace(q.Text) == "" || (len(q.Choices) == 0 && !q.AllowsFreeText) {
		return s.finish(r, ToolCallFailed, "", "the tool asked a question that cannot be answered: it is blank, or has no choices and allows no free text")
	}
	r.InputQuestions++
	questionID := fmt.Sprintf("%s-input-%d", r.ID, r.InputQuestions)
	if _, taken := s.Interrupt(questionID); taken || s.Turn.ToolCall(questionID) != nil {
		return s.finish(r, ToolCallFailed, "", fmt.Sprintf("the tool's question ID %s is already used by another call of this turn", questionID))
	}
	r.Status, r.Question, r.InputContinuation = ToolCallAwaitingAnswer, &q, continuation
	return []Event{s.raise(Interrupt{ID: questionID, Kind: InterruptQuestion, Question: &q}, r, now)}
}

// returnToTool hands a tool's question back to its tool Step with how it
// was resolved; the tool decides what a decline means.
func returnToTool(r *ToolCallRecord, in Interrupt, resolution agent.QuestionResolution, answer string) {
	text := ""
	if in.Question != nil {
		text = in.Question.Text
	}
	qa := agent.QuestionAnswer{QuestionID: in.ID, Question: text, Resolution: resolution, Answer: answer}
	if r.TaskID != "" {
		// A task's question goes back to the task, on the next poll.
		r.TaskAnswer = &qa
		r.Status, r.Question = ToolCallWaitingForTask, nil
		return
	}
	r.InputAnswers = append(r.InputAnswers, qa)
	r.Status, r.Question = ToolCallApproved, nil
}

// RecordToolStepExhausted is the failure route of a tool Step whose attempts
// ran out (RecordToolFailure for reads and idempotent writes,
// RecordToolOutcomeUnknown otherwise). A call whose Step never reached a
// worker did not run, whatever its effect; otherwise a read failed and a
// write may have taken effect.
func (s *State) RecordToolStepExhausted(id string, started bool, detail string) []Event {
	r := s.activeRecord(id)
	if r == nil || r.Status.Final() {
		return nil
	}
	switch {
	case !started && r.InputQuestions == 0:
		// A call whose tool asked a question ran before, so only a call
		// that never reached a worker at all is safe to call again.
		return s.finish(r, ToolCallFailed, "", ToolCallNotRunPrefix+": "+detail)
	case r.Effect == agent.EffectRead:
		return s.finish(r, ToolCallFailed, "", detail)
	default:
		return s.finish(r, ToolCallOutcomeUnknown, "", detail)
	}
}

// FailureRoute names the Step that records a tool call whose attempts ran
// out.
func FailureRoute(effect agent.Effect) StepName {
	if effect.Retried() {
		return StepRecordToolFailure
	}
	return StepRecordToolOutcomeUnknown
}

// ToolStep names the Step that runs an approved call.
func ToolStep(effect agent.Effect) StepName {
	if effect.Retried() {
		return StepCallTool
	}
	return StepCallSingleAttemptTool
}

// WaitStep names the Step a record waits in, or "" when it does not wait
// for a person or timer.
func WaitStep(r ToolCallRecord) StepName {
	switch r.Status {
	case ToolCallAwaitingApproval:
		return StepAwaitToolApproval
	case ToolCallAwaitingAnswer:
		return StepAwaitQuestionAnswer
	case ToolCallWaitingForTimer:
		return StepAwaitTimer
	case ToolCallWaitingForTask:
		return StepPollToolTask
	}
	return ""
}

// ToolCallsFinal reports whether every record of the turn is final:
// ResumeTurn's condition.
func (s *State) ToolCallsFinal() bool {
	if s.Turn == nil {
		return true
	}
	for _, r := range s.Turn.ToolCalls {
		if !r.Status.Final() {
			return false
		}
	}
	return true
}

// ResumeTurn stores the results of the turn's final records that are not
// stored yet, in model order, and moves to the next model call.
func (s *State) ResumeTurn() {
	if s.Turn == nil {
		return
	}
	s.storeResults()
	s.Status = StatusRunningModel
}

func (s *State) storeResults() {
	for _, r := range s.Turn.ToolCalls {
		if r.Status.Final() && !r.ResultStored {
			r.ResultStored = true
			s.store(Message{Role: RoleTool, ToolCallID: r.ID, ToolName: r.Name, Text: DescribeOutcome(*r), Images: r.resultImages()})
		}
	}
}

// FailTurn is RecordTurnFailure: it stores the results of the calls that
// ran and one note listing them, records the error, and ends the turn.
func (s *State) FailTurn(errText string) []Event {
	if s.Turn == nil {
		return nil
	}
	s.storeResults()
	if note := TurnFailureNote(s.Turn.ToolCalls); note != "" {
		s.store(Message{Role: RoleUser, Text: note})
	}
	return s.endTurn(errText)
}

// endTurn clears the turn's records and run state; an error fails it.
func (s *State) endTurn(errText string) []Event {
	turn := s.Turn
	count := s.turnMessageCount(turn.ID)
	s.clearTurn(turn)
	if errText != "" {
		s.LastTurnError = errText
		return []Event{NewEvent(EventTurnFailed, turn.ID, map[string]any{"error": errText})}
	}
	s.LastTurnError = ""
	return []Event{NewEvent(EventTurnCompleted, turn.ID, map[string]any{"message_count": count})}
}

// clearTurn ends the turn: its interrupts and records go, and the session
// waits for a user message.
func (s *State) clearTurn(turn *Turn) {
	s.Interrupts = slices.DeleteFunc(s.Interrupts, func(in Interrupt) bool { return in.TurnID == turn.ID })
	s.Turn = nil
	s.Status = StatusWaitingForUserMessage
	s.Mode = ModeChat
}

func (s *State) turnMessageCount(turnID string) int {
	count := countTurn(s.Window, turnID)
	for _, c := range s.Chunks {
		count += countTurn(c.Messages, turnID)
	}
	return count
}

func countTurn(messages []Message, turnID string) int {
	n := 0
	for _, m := range messages {
		if m.TurnID == turnID {
			n++
		}
	}
	return n
}

// messagesAfterSummary are the stored messages the summary does not cover:
// the model input after it.
func (s *State) messagesAfterSummary() []Message {
	all := s.Messages()
	if s.Summary == nil {
		return all
	}
	for i, m := range all {
		if m.Sequence > s.Summary.LastSequence {
			return all[i:]
		}
	}
	return nil
}
