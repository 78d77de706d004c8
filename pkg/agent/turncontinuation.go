package agent

import "fmt"

// TurnContinuation is an application's decision, at the end of one loop
// iteration (a model call and the tool calls it requested), whether the
// turn ends or continues.
type TurnContinuation struct {
	kind    continuationKind
	message string
}

type continuationKind int

const (
	continuationDefault continuationKind = iota
	continuationEnd
	continuationContinue
)

// Turn continuations. DefaultTurnContinuation leaves the turn to the loop:
// the model sees tool results, and an answer without tools completes the turn.
// EndTurn completes the turn now, even after tool calls, without another
// model call.
var (
	DefaultTurnContinuation = TurnContinuation{}
	EndTurn                 = TurnContinuation{kind: continuationEnd}
)

// ContinueTurn calls the model again in the same turn with message as user
// text: after tool calls it follows their results, after an answer it
// follows the answer. The message is part of the turn's transcript. At
// most 8 continuations may follow answers without tools in a row (a tool
// call resets the count); the next ends the turn with the model's answer
// and sets the turn's error.
func ContinueTurn(message string) TurnContinuation {
	return TurnContinuation{kind: continuationContinue, message: message}
}

// Ends reports whether the decision ends the turn.
func (c TurnContinuation) Ends() bool { return c.kind == continuationEnd }

// Continues reports whether the decision continues the turn, and with what
// message.
func (c TurnContinuation) Continues() (string, bool) {
	return c.message, c.kind == continuationContinue
}

func (c TurnContinuation) String() string {
	switch c.kind {
	case continuationEnd:
		return "end"
	case continuationContinue:
		return fmt.Sprintf("continue(%q)", c.message)
	}
	return "default"
}

// TurnContinuationContext is what a continuation decision sees of one
// iteration.
type TurnContinuationContext struct {
	SessionID string
	TurnID    string
	Settings  SessionSettings
	// ModelOutput is the iteration's model answer.
	ModelOutput Message
	// ToolResults are the results of the tool calls it requested, in model
	// order; empty when the model answered without tools.
	ToolResults []ToolResult
}
