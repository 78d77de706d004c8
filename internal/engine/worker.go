package engine

import (
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"

	"github.com/stepwise-run/stepwise/internal/session"
	"github.com/stepwise-run/stepwise/internal/spend"
	"github.com/stepwise-run/stepwise/internal/tracing"
	"github.com/stepwise-run/stepwise/pkg/agent"
)

// WorkerOptions configure a session worker.
type WorkerOptions struct {
	// FlowType is the workflow type the worker registers.
	FlowType string
	// TaskQueue is the Agent's task queue.
	TaskQueue string
	// TaskSlots is how many Steps run at once.
	TaskSlots int
	// Runner makes model calls and runs tools.
	Runner session.Runner
	// Events receives session events; nil drops them.
	Events EventSink
	// Timings are the Step limits; zero uses DefaultTimings.
	Timings Timings
	// PlanMode lets messages ask for a planning turn.
	PlanMode bool
	// ImageStoreURI is the location of the agent's media store; empty
	// refuses messages with images.
	ImageStoreURI string
	// ContinueAsNewThreshold is when a session continues as new; zero uses
	// DefaultContinueAsNewThreshold.
	ContinueAsNewThreshold ContinueAsNewThreshold
	// Version, when set, joins the worker to a Temporal Worker Deployment:
	// each session is pinned to the version that starts it and moves to
	// the deployment's current version between turns.
	Version *WorkerVersion
	// Spend, when set, admits each model call and is told what it used.
	// Every worker registers the spend counter, so a Budget always finds a
	// worker for it.
	Spend agent.SpendLimit
	// Tracer, when set, traces the sessions: a trace per activation, with
	// a span per model call and tool Step attempt.
	Tracer *tracing.Tracer
	// MoveTo, when set, moves the sessions this worker runs on the shared
	// task queue to the Agent's own names between turns.
	MoveTo *OwnNames
	// Options are passed to the SDK worker, for tuning beyond the above.
	Options worker.Options
}

// WorkerVersion is a worker's place in a Temporal Worker Deployment.
type WorkerVersion struct {
	// DeploymentName names the Worker Deployment; it may not contain ".".
	DeploymentName string
	// BuildID names the version within it.
	BuildID string
}

// NewWorker returns a worker that runs the sessions of one Flow type.
// Stopping it stops polling and lets running Steps finish within
// Options.WorkerStopTimeout.
//
// It takes eager activities: every Step is an activity on the session's
// own task queue, so where the server dispatches eagerly
// (system.enableActivityEagerExecution) the worker that completes a
// workflow task starts the Steps it schedules at once, within its free
// task slots, instead of each waiting in the task queue. Options that
// disable them (DisableEagerActivities, or TaskQueueActivitiesPerSecond,
// which implies it) give that up.
func NewWorker(c client.Client, o WorkerOptions) worker.Worker {
	if o.Timings == (Timings{}) {
		o.Timings = DefaultTimings()
	}
	opts := o.Options
	opts.MaxConcurrentActivityExecutionSize = max(o.TaskSlots, 1)
	opts.MaxConcurrentWorkflowTaskExecutionSize = max(o.TaskSlots, 2)
	register := workflow.RegisterOptions{Name: o.FlowType}
	if o.Version != nil {
		// Pinned: no session replays a turn on a worker version other than
		// the one that ran it; it changes version only by continuing as new.
		opts.DeploymentOptions = worker.DeploymentOptions{
			UseVersioning:             true,
			Version:                   worker.WorkerDeploymentVersion{DeploymentName: o.Version.DeploymentName, BuildID: o.Version.BuildID},
			DefaultVersioningBehavior: workflow.VersioningBehaviorPinned,
		}
		register.VersioningBehavior = workflow.VersioningBehaviorPinned
	}
	w := worker.New(c, o.TaskQueue, opts)
	flow := &Flow{Events: o.Events, Timings: o.Timings, PlanMode: o.PlanMode, ImageStoreURI: o.ImageStoreURI, ContinueAsNewThreshold: o.ContinueAsNewThreshold, MoveTo: o.MoveTo}
	if o.Tracer != nil {
		flow.Tracer = o.Tracer
	}
	w.RegisterWorkflowWithOptions(flow.Run, register)
	// The counter follows the deployment's current version, so it never
	// holds an old version from draining.
	counter := workflow.RegisterOptions{Name: spend.CounterWorkflow}
	if o.Version != nil {
		counter.VersioningBehavior = workflow.VersioningBehaviorAutoUpgrade
	}
	w.RegisterWorkflowWithOptions(SpendCounter, counter)
	acts := &Activities{Runner: o.Runner, State: QueryLoader{Client: c}, Events: o.Events, Spend: o.Spend, Tracer: o.Tracer, Checkpoints: c}
	acts.Register(w)
	return w
}

// ActivityRegistry is where call Steps are registered: a worker, or a
// test environment.
type ActivityRegistry interface {
	RegisterActivityWithOptions(a any, options activity.RegisterOptions)
}

// Register registers each call Step under its Step name, so the history
// names the Step that ran.
func (a *Activities) Register(r ActivityRegistry) {
	for step, fn := range map[session.StepName]any{
		session.StepRunModel:              a.RunModel,
		session.StepCompactContext:        a.CompactContext,
		session.StepCallTool:              a.CallTool,
		session.StepCallSingleAttemptTool: a.CallSingleAttemptTool,
		session.StepPollToolTask:          a.PollToolTask,
		session.StepCancelToolTask:        a.CancelToolTask,
	} {
		r.RegisterActivityWithOptions(fn, activity.RegisterOptions{Name: string(step)})
	}
}
