package engine

import (
	"fmt"
	"slices"

	"go.temporal.io/sdk/workflow"

	"github.com/stepwise-run/stepwise/internal/session"
	"github.com/stepwise-run/stepwise/internal/tracing"
)

// nextStepID names one Step execution; all its attempts share the ID, which
// events carry so a UI keeps only the newest attempt's text.
func (r *run) nextStepID(step session.StepName, subject string) string {
	r.stepSeq++
	return fmt.Sprintf("%s/%s/%d", step, subject, r.stepSeq)
}

// rpcStepID names the events an RPC writes when it settles a turn's calls.
func rpcStepID(rpc, turnID string) string {
	return rpc + "/" + turnID
}

// waitStepID names the execution of a Step that runs in workflow code: the
// Step, the turn, and the tool call it waits for. The RPC that ends a wait
// and the wait's own timer write their events under the same ID.
func waitStepID(step session.StepName, turnID, toolCallID string) string {
	id := string(step) + "/" + turnID
	if toolCallID != "" {
		id += "/" + toolCallID
	}
	return id
}

// activateTurn begins the activation of a turn that just started: with
// its user message, or with an approved plan.
func (r *run) activateTurn(step session.StepName, stepID string) {
	key, text := r.s.TurnInput()
	a := tracing.Activation{Trigger: tracing.TriggerUserMessage, UserMessageKey: key, Input: text}
	if r.s.Turn.Mode == session.ModeExecuting {
		a = tracing.Activation{Trigger: tracing.TriggerPlanExecution, UserMessageKey: key}
	}
	r.activate(a, step, stepID, "")
}

// activate begins an activation in the Step that consumed its input: it
// numbers it, stores its root's trace context in the Step's commit, and
// emits the root unless the workflow is replaying it. toolCallID names the
// call whose interrupt it resolved.
func (r *run) activate(a tracing.Activation, step session.StepName, stepID, toolCallID string) {
	info := workflow.GetInfo(r.ctx)
	r.activations++
	a.Number = r.activations
	a.Step = tracing.StepAttempt{
		SessionID: r.s.SessionID, RunID: info.WorkflowExecution.RunID, StepType: string(step),
		StepExecutionID: stepID, Attempt: 1, TurnID: r.activeTurnID(),
	}
	a.Start = workflow.Now(r.ctx)
	traceparent := ""
	if r.flow.Tracer != nil {
		traceparent = r.flow.Tracer.RootContext(a)
	}
	a.Previous = r.s.TraceActivation(traceparent, toolCallID)
	if traceparent != "" && !workflow.IsReplaying(r.ctx) {
		r.flow.Tracer.EmitRoot(a)
	}
}

// emit writes events unless the workflow is replaying them.
func (r *run) emit(stepID string, events []session.Event) {
	if workflow.IsReplaying(r.ctx) {
		return
	}
	for _, e := range events {
		if e.StepExecutionID == "" {
			e.StepExecutionID = stepID
		}
		if e.Attempt == 0 {
			e.Attempt = 1
		}
		r.events.Write(r.s.SessionID, e)
	}
}

// turnTrack is the track of the turn's own Steps, beside one track per
// tool call.
const turnTrack = ""

// move records that a track of the session moved to a Step, for the Flow's
// trace. It writes nothing to the history.
func (r *run) move(track string, to session.StepName, kind session.TransitionKind) {
	from, ok := r.at[track]
	r.at[track] = to
	if ok && r.flow.Trace != nil {
		r.flow.Trace(from, to, kind)
	}
}

// enter and leave keep the active-Step search attribute current.
func (r *run) enter(step session.StepName) {
	r.active[stepIndex(step)]++
	r.activeChanged()
}

func (r *run) leave(step session.StepName) {
	if i := stepIndex(step); r.active[i] > 0 {
		r.active[i]--
	}
	r.activeChanged()
}

// activeChanged writes the search attribute at once in runs of the first
// revision; later runs leave it to keepSearchCurrent.
func (r *run) activeChanged() {
	r.activeChanges++
	r.searchStale = true
	if r.revision < revisionSearchOncePerTask {
		r.showActive()
	}
}

// keepSearchCurrent writes the active-Step search attribute at most once
// per workflow task. After a change it lets the workflow's coroutines run
// until a whole pass of them changes nothing more, so the value it writes
// is the one the task ends with, never a transient one between two Steps.
func (r *run) keepSearchCurrent(ctx workflow.Context) {
	for {
		if err := workflow.Await(ctx, func() bool { return r.searchStale }); err != nil {
			return
		}
		for {
			seen := r.activeChanges
			if err := awaitNextPass(ctx); err != nil {
				return
			}
			if r.activeChanges == seen {
				break
			}
		}
		r.showActive()
	}
}

// awaitNextPass returns once every other coroutine of the workflow has had
// its turn to run.
func awaitNextPass(ctx workflow.Context) error {
	resumed := false
	return workflow.Await(ctx, func() bool {
		done := resumed
		resumed = true
		return done
	})
}

// showActive writes the Steps the session is in, when they differ from
// what the search attribute holds.
func (r *run) showActive() {
	r.searchStale = false
	var steps []string
	for i, spec := range session.Steps() {
		if r.active[i] > 0 {
			steps = append(steps, string(spec.Name))
		}
	}
	slices.Sort(steps)
	if steps == nil {
		steps = []string{}
	}
	if !r.search || slices.Equal(steps, r.shown) {
		return
	}
	r.shown = steps
	// An upsert that fails is logged by the SDK; the search is a view, and a
	// session never stops for it.
	_ = workflow.UpsertTypedSearchAttributes(r.ctx, activeStepsKey.ValueSet(steps))
}

// stepIndex is a Step's position in the Flow graph.
func stepIndex(step session.StepName) int {
	for i, spec := range session.Steps() {
		if spec.Name == step {
			return i
		}
	}
	panic(fmt.Sprintf("unknown Step %s", step))
}
