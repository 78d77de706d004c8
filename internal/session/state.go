package session

import (
	"encoding/json"
	"fmt"
	"strings"
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
