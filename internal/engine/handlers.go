package engine

import (
	"fmt"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/stepwise-run/stepwise/internal/contract"
	"github.com/stepwise-run/stepwise/internal/session"
	"github.com/stepwise-run/stepwise/internal/sessionrpc"
	"github.com/stepwise-run/stepwise/internal/tracing"
)

// register installs the RPC handlers before the workflow first blocks, so
// an update delivered with the start is handled.
func (r *run) register() error {
	s := r.s
	// The move signal only wakes the session: the move itself is decided
	// from what Temporal records, so receiving is all it takes.
	moves := workflow.GetSignalChannel(r.ctx, contract.SignalMoveToCurrentVersion)
	workflow.Go(r.ctx, func(ctx workflow.Context) {
		for moves.Receive(ctx, nil) {
			// An idle session on the shared task queue moves to its
			// Agent's own names when woken, as a pinned one moves version.
			if r.s.Turn == nil && r.moveWoken == nil {
				r.moveWoken = r.moveTarget()
			}
		}
	})
	if err := workflow.SetQueryHandler(r.ctx, sessionrpc.QuerySnapshot, func() (session.Snapshot, error) {
		return s.Snapshot(), nil
	}); err != nil {
		return err
	}
	if err := workflow.SetQueryHandler(r.ctx, sessionrpc.QueryListMessages, func(req session.ListMessagesRequest) (session.MessagesPage, error) {
		return s.ListMessages(req), nil
	}); err != nil {
		return err
	}
	if err := workflow.SetQueryHandler(r.ctx, queryTurnContext, func(turnID string) (session.TurnContext, error) {
		return s.TurnContext(turnID)
	}); err != nil {
		return err
	}
	if err := workflow.SetQueryHandler(r.ctx, queryToolCallControl, func(req ToolCallControlRequest) (string, error) {
		return s.ToolCallControl(req.TurnID, req.ToolCallID), nil
	}); err != nil {
		return err
	}
	handlers := []struct {
		name      string
		handler   any
		validator any
	}{
		{sessionrpc.UpdateStartSession,
			func(ctx workflow.Context, in session.StartInput) (bool, error) {
				if err := workflow.Await(ctx, func() bool { return s.Started }); err != nil {
					return false, err
				}
				return s.StartRequestID == in.RequestID, nil
			},
			func(ctx workflow.Context, in session.StartInput) error {
				if s.Started && s.StartRequestID != in.RequestID {
					return temporal.NewNonRetryableApplicationError("the session was started by another start_session call", sessionrpc.RejectedErrorType, nil)
				}
				if err := session.CheckStartSettings(in.Settings); err != nil {
					return temporal.NewNonRetryableApplicationError(err.Error(), sessionrpc.RejectedErrorType, nil)
				}
				return nil
			}},
		{sessionrpc.UpdateSendUserMessage,
			answerOnce(s, func(ctx workflow.Context, req session.SendRequest) (bool, error) {
				if _, err := s.Send(req); err != nil {
					return false, rejected(err)
				}
				return true, nil
			}),
			validateOnce(s, func(ctx workflow.Context, req session.SendRequest) error { return rejected(s.CheckSend(req)) })},
		{sessionrpc.UpdateExecutePlan,
			answerOnce(s, func(ctx workflow.Context, req session.ExecutePlanRequest) (bool, error) {
				if err := s.ExecutePlan(req); err != nil {
					return false, rejected(err)
				}
				return true, nil
			}),
			validateOnce(s, func(ctx workflow.Context, req session.ExecutePlanRequest) error {
				return rejected(s.CheckExecutePlan(req))
			})},
		{sessionrpc.UpdateResolveInterrupt,
			answerOnce(s, func(ctx workflow.Context, req session.ResolveRequest) (bool, error) {
				// A decline ends a question's wait, not an approval's.
				in, _ := s.Interrupt(req.InterruptID)
				step := session.StepAwaitToolApproval
				if in.Kind == session.InterruptQuestion {
					step = session.StepAwaitQuestionAnswer
				}
				events, err := s.Resolve(req, workflow.Now(ctx))
				if err != nil {
					return false, rejected(err)
				}
				stepID := waitStepID(step, in.TurnID, in.ToolCallID)
				r.emit(stepID, events)
				a := tracing.Activation{Trigger: tracing.TriggerInterruptResolution, InterruptID: in.ID}
				if in.Kind == session.InterruptApproval {
					a.Approved = &req.Approved
				}
				r.activate(a, step, stepID, in.ToolCallID)
				return true, nil
			}),
			validateOnce(s, func(ctx workflow.Context, req session.ResolveRequest) error {
				return rejected(s.CheckResolve(req, workflow.Now(ctx)))
			})},
		{sessionrpc.UpdateAnswerQuestion,
			answerOnce(s, func(ctx workflow.Context, req session.AnswerRequest) (bool, error) {
				in, _ := s.Interrupt(req.InterruptID)
				events, err := s.Answer(req, workflow.Now(ctx))
				if err != nil {
					return false, rejected(err)
				}
				stepID := waitStepID(session.StepAwaitQuestionAnswer, in.TurnID, in.ToolCallID)
				r.emit(stepID, events)
				r.activate(tracing.Activation{Trigger: tracing.TriggerInterruptResolution, InterruptID: in.ID},
					session.StepAwaitQuestionAnswer, stepID, in.ToolCallID)
				return true, nil
			}),
			validateOnce(s, func(ctx workflow.Context, req session.AnswerRequest) error {
				return rejected(s.CheckAnswer(req, workflow.Now(ctx)))
			})},
		{sessionrpc.UpdateSteerUserMessage,
			answerOnce(s, func(ctx workflow.Context, req session.SteerRequest) (bool, error) {
				turnID := r.activeTurnID()
				events, err := s.Steer(req, workflow.Now(ctx))
				if err != nil {
					return false, rejected(err)
				}
				r.emit(rpcStepID(sessionrpc.UpdateSteerUserMessage, turnID), events)
				return true, nil
			}),
			validateOnce(s, func(ctx workflow.Context, req session.SteerRequest) error { return rejected(s.CheckSteer(req)) })},
		{sessionrpc.UpdateDeleteQueuedMessage,
			answerOnce(s, func(ctx workflow.Context, req session.DeleteRequest) (bool, error) {
				if err := s.DeleteQueued(req); err != nil {
					return false, rejected(err)
				}
				return true, nil
			}),
			validateOnce(s, func(ctx workflow.Context, req session.DeleteRequest) error { return rejected(s.CheckDelete(req)) })},
		{sessionrpc.UpdateCancelTurn,
			answerOnce(s, func(ctx workflow.Context, req session.CancelRequest) (bool, error) {
				events, err := s.CancelTurn(req, workflow.Now(ctx))
				if err != nil {
					return false, rejected(err)
				}
				if r.cancelModel != nil {
					// The model call's answer is dropped.
					r.cancelModel()
				}
				r.emit(rpcStepID(sessionrpc.UpdateCancelTurn, req.TurnID), events)
				return true, nil
			}),
			validateOnce(s, func(ctx workflow.Context, req session.CancelRequest) error { return rejected(s.CheckCancel(req)) })},
		{sessionrpc.UpdateSessionSettings,
			answerOnce(s, func(ctx workflow.Context, req sessionrpc.SettingsRequest) (bool, error) {
				if err := s.UpdateSettings(req.Settings); err != nil {
					return false, rejected(err)
				}
				return true, nil
			}),
			validateOnce(s, func(ctx workflow.Context, req sessionrpc.SettingsRequest) error {
				return rejected(s.CheckSettingsUpdate(req.Settings))
			})},
	}
	for _, h := range handlers {
		opts := workflow.UpdateHandlerOptions{Validator: h.validator}
		if err := workflow.SetUpdateHandlerWithOptions(r.ctx, h.name, h.handler, opts); err != nil {
			return fmt.Errorf("registering %s: %w", h.name, err)
		}
	}
	return nil
}

// answerOnce makes an update handler answer a request the session already
// accepted with true again, changing nothing, and remember the requests it
// accepts. A request's ID is its update ID, which the client derives from
// the caller's request ID; the engine deduplicates update IDs within one
// run, and the session's own record carries them into the next.
func answerOnce[T any](s *session.State, handle func(workflow.Context, T) (bool, error)) func(workflow.Context, T) (bool, error) {
	return func(ctx workflow.Context, req T) (bool, error) {
		id := requestID(ctx)
		if s.Accepted(id) {
			return true, nil
		}
		ok, err := handle(ctx, req)
		if ok && err == nil {
			s.RecordAccepted(id)
		}
		return ok, err
	}
}

// validateOnce lets a request the session already accepted through to its
// handler, which answers it as it did the first time.
func validateOnce[T any](s *session.State, validate func(workflow.Context, T) error) func(workflow.Context, T) error {
	return func(ctx workflow.Context, req T) error {
		if s.Accepted(requestID(ctx)) {
			return nil
		}
		return validate(ctx, req)
	}
}

// requestID is the ID of the update being handled.
func requestID(ctx workflow.Context) string {
	if info := workflow.GetCurrentUpdateInfo(ctx); info != nil {
		return info.ID
	}
	return ""
}
