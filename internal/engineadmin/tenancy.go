package engineadmin

import (
	"context"
	"errors"
	"fmt"

	"go.temporal.io/api/serviceerror"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"

	"github.com/stepwise-run/stepwise/internal/searchattr"
	"github.com/stepwise-run/stepwise/internal/tenancy"
)

// Identity is who an engine says it is.
type Identity struct {
	// NamespaceID is the engine's ID of the Temporal namespace: the same
	// whatever address reaches it, and across every cluster that
	// replicates the namespace.
	NamespaceID string
	// ClusterID is the ID of the cluster the address reaches; empty where
	// the engine does not tell it, as Temporal Cloud may not.
	ClusterID     string
	ServerVersion string
}

// Identity asks the engine who it is: the ID of the connection's Temporal
// namespace, which claims are keyed by, and the cluster's.
func (c *Client) Identity(ctx context.Context, conn Connection) (Identity, error) {
	var out Identity
	err := c.call(ctx, conn, func(ctx context.Context, sdk client.Client) error {
		ns, err := sdk.WorkflowService().DescribeNamespace(ctx, &workflowservice.DescribeNamespaceRequest{Namespace: conn.Namespace})
		if err != nil {
			return fmt.Errorf("describing namespace %s on the %s: %w", conn.Namespace, conn, err)
		}
		out.NamespaceID = ns.GetNamespaceInfo().GetId()
		if out.NamespaceID == "" {
			return fmt.Errorf("the %s reports no ID for namespace %s", conn, conn.Namespace)
		}
		// The cluster is reported where the caller may ask; the namespace
		// ID alone decides.
		if info, err := sdk.WorkflowService().GetClusterInfo(ctx, &workflowservice.GetClusterInfoRequest{}); err == nil {
			out.ClusterID, out.ServerVersion = info.GetClusterId(), info.GetServerVersion()
		}
		if out.ServerVersion == "" {
			if info, err := sdk.WorkflowService().GetSystemInfo(ctx, &workflowservice.GetSystemInfoRequest{}); err == nil {
				out.ServerVersion = info.GetServerVersion()
			}
		}
		return nil
	})
	return out, err
}

// EnsureSearchAttributes registers the search attributes sessions need in
// the connection's namespace where they are missing.
func (c *Client) EnsureSearchAttributes(ctx context.Context, conn Connection) error {
	return c.call(ctx, conn, func(ctx context.Context, sdk client.Client) error {
		if err := searchattr.Ensure(ctx, sdk, conn.Namespace); err != nil {
			return fmt.Errorf("on the %s: %w; an administrator registers them with: %s", conn, err, searchattr.Command(conn.Namespace))
		}
		return nil
	})
}

// SharedSessions lists, up to MaxSessionsPerPass, the running sessions of
// a Flow type on its shared task queue, which wait to move to their
// Agent's own names. The spend counter, which runs there too, is not one.
func (c *Client) SharedSessions(ctx context.Context, conn Connection, flowType string) ([]string, error) {
	shared := tenancy.Shared(flowType)
	query := fmt.Sprintf("TaskQueue = %s AND WorkflowType = %s AND ExecutionStatus = 'Running'",
		quoteVisibility(shared.TaskQueue()), quoteVisibility(flowType))
	return c.runningSessions(ctx, conn, query, "on task queue "+shared.TaskQueue())
}

// RetireSharedNames removes what the shared names left on the engine once
// no session runs under them: the shared spend counter, and the shared
// Worker Deployment once its versions are gone. What the engine does not
// let go yet is left for a later call.
func (c *Client) RetireSharedNames(ctx context.Context, conn Connection, flowType string) error {
	shared := tenancy.Shared(flowType)
	return c.call(ctx, conn, func(ctx context.Context, sdk client.Client) error {
		var notFound *serviceerror.NotFound
		err := sdk.TerminateWorkflow(ctx, shared.SpendCounterID(), "", "its Agent's sessions moved to the Agent's own names")
		if err != nil && !errors.As(err, &notFound) {
			return fmt.Errorf("ending the shared spend counter of %s on the %s: %w", flowType, conn, err)
		}
		_, err = sdk.WorkerDeploymentClient().Delete(ctx, client.WorkerDeploymentDeleteOptions{Name: shared.WorkerDeployment(), Identity: OperatorIdentity})
		var precondition *serviceerror.FailedPrecondition
		switch {
		case err == nil, errors.As(err, &notFound):
			return nil
		case errors.As(err, &precondition):
			return fmt.Errorf("the %s keeps Worker Deployment %s while it has versions: %w", conn, shared.WorkerDeployment(), err)
		}
		return fmt.Errorf("deleting Worker Deployment %s on the %s: %w", shared.WorkerDeployment(), conn, err)
	})
}
