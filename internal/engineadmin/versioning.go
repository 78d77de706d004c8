package engineadmin

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"go.temporal.io/api/serviceerror"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"

	"github.com/stepwise-run/stepwise/internal/contract"
)

// OperatorIdentity is the identity the operator's changes carry on the
// engine, so a Worker Deployment's history says who moved it.
const OperatorIdentity = "stepwise-operator"

// minVersioningServer is the first Temporal server that tells a pinned
// workflow its Worker Deployment's current version changed, which is what
// lets a session move between turns; an older server keeps every session on
// the version that started it.
var minVersioningServer = [2]int{1, 31}

// Versioning is whether an engine can run a versioned rollout.
type Versioning struct {
	// Supported is true when the server is recent enough and the
	// namespace has Worker Deployments enabled.
	Supported bool
	// Reason says, for status, why not.
	Reason string
}

// Versioning asks the engine whether a versioned rollout can run there: the
// server's version, and whether the namespace answers for Worker
// Deployments. An error means the engine could not be asked.
func (c *Client) Versioning(ctx context.Context, conn Connection) (Versioning, error) {
	var out Versioning
	err := c.call(ctx, conn, func(ctx context.Context, sdk client.Client) error {
		info, err := sdk.WorkflowService().GetSystemInfo(ctx, &workflowservice.GetSystemInfoRequest{})
		if err != nil {
			return fmt.Errorf("asking the %s for its version: %w", conn, err)
		}
		if ok, why := serverSupportsVersioning(info.GetServerVersion()); !ok {
			out.Reason = why
			return nil
		}
		_, err = sdk.WorkflowService().ListWorkerDeployments(ctx, &workflowservice.ListWorkerDeploymentsRequest{
			Namespace: conn.Namespace, PageSize: 1,
		})
		var unimplemented *serviceerror.Unimplemented
		var denied *serviceerror.PermissionDenied
		var precondition *serviceerror.FailedPrecondition
		switch {
		case err == nil:
			out.Supported = true
		case errors.As(err, &unimplemented), errors.As(err, &denied), errors.As(err, &precondition):
			out.Reason = fmt.Sprintf("namespace %s does not offer Worker Deployments: %v", conn.Namespace, err)
		default:
			return fmt.Errorf("listing the Worker Deployments of the %s: %w", conn, err)
		}
		return nil
	})
	return out, err
}

// serverSupportsVersioning reads a server version such as "1.32.0".
func serverSupportsVersioning(version string) (bool, string) {
	parts := strings.SplitN(strings.TrimPrefix(version, "v"), ".", 3)
	if len(parts) < 2 {
		return false, fmt.Sprintf("the Temporal server reports no version it can be judged by (%q)", version)
	}
	major, errMajor := strconv.Atoi(parts[0])
	minor, errMinor := strconv.Atoi(parts[1])
	if errMajor != nil || errMinor != nil {
		return false, fmt.Sprintf("the Temporal server reports no version it can be judged by (%q)", version)
	}
	if major < minVersioningServer[0] || (major == minVersioningServer[0] && minor < minVersioningServer[1]) {
		return false, fmt.Sprintf("Temporal server %s never tells a session that its Worker Deployment's current version changed; that needs %d.%d or later",
			version, minVersioningServer[0], minVersioningServer[1])
	}
	return true, ""
}

// Drainage is what the engine says of an old version's sessions.
type Drainage string

// Drainage states, as the engine reports them.
const (
	// DrainageUnknown: the engine has not said yet; it reports a version
	// only after it stopped being current, and then after a grace period.
	DrainageUnknown Drainage = ""
	// DrainageDraining: sessions pinned to the version still run.
	DrainageDraining Drainage = "Draining"
	// DrainageDrained: no session runs pinned to the version any more.
	DrainageDrained Drainage = "Drained"
)

// DeploymentVersion is one version of a Worker Deployment on the engine.
type DeploymentVersion struct {
	BuildID  string
	Drainage Drainage
}

// WorkerDeployment is a Worker Deployment as the engine knows it.
type WorkerDeployment struct {
	// Exists is false until a versioned worker of the deployment polled.
	Exists bool
	// CurrentBuildID is the version new sessions start on; empty while
	// unversioned workers take them.
	CurrentBuildID string
	// Versions are the versions the engine keeps a record of.
	Versions []DeploymentVersion
}

// Version returns the engine's record of a version.
func (d WorkerDeployment) Version(buildID string) (DeploymentVersion, bool) {
	for _, v := range d.Versions {
		if v.BuildID == buildID {
			return v, true
		}
	}
	return DeploymentVersion{}, false
}

// WorkerDeployment reads a Worker Deployment; one the engine does not know
// is returned with Exists false.
func (c *Client) WorkerDeployment(ctx context.Context, conn Connection, name string) (WorkerDeployment, error) {
	var out WorkerDeployment
	err := c.call(ctx, conn, func(ctx context.Context, sdk client.Client) error {
		resp, err := sdk.WorkerDeploymentClient().GetHandle(name).Describe(ctx, client.WorkerDeploymentDescribeOptions{})
		var notFound *serviceerror.NotFound
		if errors.As(err, &notFound) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("describing Worker Deployment %s on the %s: %w", name, conn, err)
		}
		out.Exists = true
		if v := resp.Info.RoutingConfig.CurrentVersion; v != nil {
			out.CurrentBuildID = v.BuildID
		}
		for _, s := range resp.Info.VersionSummaries {
			v := DeploymentVersion{BuildID: s.Version.BuildID}
			switch s.DrainageStatus {
			case client.WorkerDeploymentVersionDrainageStatusDraining:
				v.Drainage = DrainageDraining
			case client.WorkerDeploymentVersionDrainageStatusDrained:
				v.Drainage = DrainageDrained
			}
			out.Versions = append(out.Versions, v)
		}
		return nil
	})
	return out, err
}

// SetCurrentVersion makes a version the one new sessions start on and
// running sessions move to; an empty build ID gives them to unversioned
// workers. The engine refuses a version none of whose workers has polled
// yet.
func (c *Client) SetCurrentVersion(ctx context.Context, conn Connection, name, buildID string) error {
	return c.call(ctx, conn, func(ctx context.Context, sdk client.Client) error {
		_, err := sdk.WorkerDeploymentClient().GetHandle(name).SetCurrentVersion(ctx, client.WorkerDeploymentSetCurrentVersionOptions{
			BuildID: buildID, Identity: OperatorIdentity,
		})
		if err != nil {
			return fmt.Errorf("making %s the current version of Worker Deployment %s on the %s: %w", describeBuildID(buildID), name, conn, err)
		}
		return nil
	})
}

// DeleteVersion deletes the engine's record of a drained version. The
// engine refuses while sessions are pinned to it, and while it remembers
// one of its workers polling (matching.PollerHistoryTTL after the last
// one stopped); the caller tries again later.
func (c *Client) DeleteVersion(ctx context.Context, conn Connection, name, buildID string) error {
	return c.call(ctx, conn, func(ctx context.Context, sdk client.Client) error {
		_, err := sdk.WorkerDeploymentClient().GetHandle(name).DeleteVersion(ctx, client.WorkerDeploymentDeleteVersionOptions{
			BuildID: buildID, Identity: OperatorIdentity,
		})
		var notFound *serviceerror.NotFound
		if err != nil && !errors.As(err, &notFound) {
			return fmt.Errorf("deleting version %s of Worker Deployment %s on the %s: %w", buildID, name, conn, err)
		}
		return nil
	})
}

// MaxSessionsPerPass bounds how many pinned sessions one call lists, so a
// pass of the operator stays short however many sessions a version holds;
// the next pass takes the rest.
const MaxSessionsPerPass = 500

// PinnedSessions lists running sessions pinned to a version, at most
// MaxSessionsPerPass. The engine's visibility store lags a second or so
// behind, so a session that just moved may still be listed.
func (c *Client) PinnedSessions(ctx context.Context, conn Connection, name, buildID string) ([]string, error) {
	query := fmt.Sprintf("TemporalWorkerDeploymentVersion = %s AND ExecutionStatus = 'Running'",
		quoteVisibility(name+":"+buildID))
	return c.runningSessions(ctx, conn, query, fmt.Sprintf("pinned to version %s of Worker Deployment %s", buildID, name))
}

// runningSessions lists the workflow IDs a visibility query finds, at most
// MaxSessionsPerPass; which says which sessions, for the error.
func (c *Client) runningSessions(ctx context.Context, conn Connection, query, which string) ([]string, error) {
	var ids []string
	err := c.call(ctx, conn, func(ctx context.Context, sdk client.Client) error {
		var token []byte
		for len(ids) < MaxSessionsPerPass {
			resp, err := sdk.ListWorkflow(ctx, &workflowservice.ListWorkflowExecutionsRequest{
				Namespace: conn.Namespace, Query: query, PageSize: 100, NextPageToken: token,
			})
			if err != nil {
				return fmt.Errorf("listing the sessions %s on the %s: %w", which, conn, err)
			}
			for _, e := range resp.GetExecutions() {
				ids = append(ids, e.GetExecution().GetWorkflowId())
			}
			if token = resp.GetNextPageToken(); len(token) == 0 {
				break
			}
		}
		return nil
	})
	return ids, err
}

// quoteVisibility quotes a value for a visibility query. Deployment names
// and build IDs are the operator's own, but a quote is escaped all the
// same.
func quoteVisibility(s string) string {
	return "'" + strings.ReplaceAll(strings.ReplaceAll(s, `\`, `\\`), "'", `\'`) + "'"
}

// MoveSessions sends each session the move signal: an idle session then
// continues as new on the current version, a busy one after its turn. A
// session that ended meanwhile is skipped. It returns how many were sent.
func (c *Client) MoveSessions(ctx context.Context, conn Connection, ids []string) (int, error) {
	sent := 0
	err := c.call(ctx, conn, func(ctx context.Context, sdk client.Client) error {
		for _, id := range ids {
			err := sdk.SignalWorkflow(ctx, id, "", contract.SignalMoveToCurrentVersion, nil)
			var notFound *serviceerror.NotFound
			switch {
			case errors.As(err, &notFound):
			case err != nil:
				return fmt.Errorf("signalling session %s to move to the current version on the %s: %w", id, conn, err)
			default:
				sent++
			}
		}
		return nil
	})
	return sent, err
}

// Unpin lets sessions pinned to a version whose workers are gone be taken
// by the current workers: a rollout that had to stop every old worker
// first leaves them no worker of their own. Each session's next workflow
// task goes to the current version, as an unversioned session's would.
func (c *Client) Unpin(ctx context.Context, conn Connection, ids []string) error {
	return c.call(ctx, conn, func(ctx context.Context, sdk client.Client) error {
		for _, id := range ids {
			_, err := sdk.UpdateWorkflowExecutionOptions(ctx, client.UpdateWorkflowExecutionOptionsRequest{
				WorkflowId: id,
				WorkflowExecutionOptionsChanges: client.WorkflowExecutionOptionsChanges{
					VersioningOverride: &client.VersioningOverrideChange{Value: &client.AutoUpgradeVersioningOverride{}},
				},
			})
			var notFound *serviceerror.NotFound
			if err != nil && !errors.As(err, &notFound) {
				return fmt.Errorf("letting session %s leave its stopped version on the %s: %w", id, conn, err)
			}
		}
		return nil
	})
}

func describeBuildID(buildID string) string {
	if buildID == "" {
		return "the unversioned workers"
	}
	return "version " + buildID
}

// call runs f with the connection's client under the call timeout.
func (c *Client) call(ctx context.Context, conn Connection, f func(context.Context, client.Client) error) error {
	ctx, cancel := context.WithTimeout(ctx, c.callTimeout)
	defer cancel()
	sdk, release, err := c.acquire(ctx, conn)
	if err != nil {
		return err
	}
	defer release()
	return f(ctx, sdk)
}
