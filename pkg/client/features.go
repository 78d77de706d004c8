package client

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	taskqueuepb "go.temporal.io/api/taskqueue/v1"

	"github.com/stepwise-run/stepwise/internal/rollout"
)

// Session features that requests need. A feature is in effect on a task
// queue while every worker that polls it runs an engine version that
// serves the feature; until then a request that needs it is refused before
// it is sent, since a worker of an older version could take the session.
const (
	// FeatureSessionSettings: UpdateSettings, and Start WithSettings.
	FeatureSessionSettings = string(rollout.FeatureSessionSettings)
	// FeatureSteering: Steer, SteerQueued, DeleteQueued and CancelTurn.
	FeatureSteering = string(rollout.FeatureSteering)
	// FeaturePlans: ExecutePlan, and Send InPlanMode.
	FeaturePlans = string(rollout.FeaturePlans)
	// FeatureImages: Send WithImages.
	FeatureImages = string(rollout.FeatureImages)
)

// ErrFeatureNotInEffect matches a *FeatureError with errors.Is.
var ErrFeatureNotInEffect = errors.New("the session feature is not in effect")

// FeatureError refuses a request whose session feature is not in effect: a
// worker of an engine version that lacks it polls the Agent's task queue,
// during a rollout or while an older version still runs. Nothing was sent.
// Try again once every worker runs Since or later; the Agent's
// status.sessionFeatures lists what is in effect.
type FeatureError struct {
	// Request is the request's name, such as steer_user_message.
	Request string
	// Feature is the session feature it needs.
	Feature string
	// EngineVersion is the engine version of a worker that lacks it, and
	// Worker that worker's identity.
	EngineVersion, Worker string
	// Since is the engine version that brought the feature.
	Since     string
	TaskQueue string
}

func (e *FeatureError) Error() string {
	return fmt.Sprintf("%s needs session feature %s, which is not in effect on task queue %s: worker %s runs engine %s, "+
		"which lacks it; it is allowed once every worker runs engine %s or later", e.Request, e.Feature, e.TaskQueue, e.Worker, e.EngineVersion, e.Since)
}

// Is makes errors.Is(err, ErrFeatureNotInEffect) true.
func (e *FeatureError) Is(target error) bool { return target == ErrFeatureNotInEffect }

// requireFeature refuses a request when a worker that polled the task queue
// recently, of either task type, names an engine version that does not
// serve the feature. Workers whose identity names no engine version, such
// as those of releases before identities carried it, are not counted. When
// the pollers cannot be read the request goes on: it is the request that
// then tells what is wrong.
func (s *Sessions) requireFeature(ctx context.Context, request string, feature rollout.Feature) error {
	now := time.Now()
	for _, taskQueue := range s.taskQueues() {
		for _, kind := range []enumspb.TaskQueueType{enumspb.TASK_QUEUE_TYPE_WORKFLOW, enumspb.TASK_QUEUE_TYPE_ACTIVITY} {
			resp, err := s.c.DescribeTaskQueue(ctx, taskQueue, kind)
			if err != nil {
				return nil
			}
			pollers := resp.GetPollers()
			slices.SortFunc(pollers, func(a, b *taskqueuepb.PollerInfo) int { return strings.Compare(a.GetIdentity(), b.GetIdentity()) })
			for _, p := range pollers {
				if now.Sub(p.GetLastAccessTime().AsTime()) >= s.recentPoll {
					continue
				}
				v, ok := rollout.EngineVersionOfIdentity(p.GetIdentity())
				if ok && !rollout.Serves(v, feature) {
					return &FeatureError{Request: request, Feature: string(feature), EngineVersion: v, Worker: p.GetIdentity(),
						Since: rollout.Since(feature), TaskQueue: taskQueue}
				}
			}
		}
	}
	return nil
}
