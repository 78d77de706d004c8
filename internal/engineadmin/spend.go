package engineadmin

import (
	"context"
	"errors"
	"fmt"

	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/client"

	"github.com/stepwise-run/stepwise/internal/spend"
	"github.com/stepwise-run/stepwise/internal/tenancy"
)

// SpendCounter reads an Agent's spend counter under its names; an Agent
// whose sessions made no model call under a budget has none yet, and reads
// as an empty counter.
func (c *Client) SpendCounter(ctx context.Context, conn Connection, names tenancy.Names) (spend.Counter, error) {
	var counter spend.Counter
	flowType := names.FlowType
	err := c.call(ctx, conn, func(ctx context.Context, sdk client.Client) error {
		resp, err := sdk.QueryWorkflow(ctx, names.SpendCounterID(), "", spend.UsageQuery)
		var notFound *serviceerror.NotFound
		if errors.As(err, &notFound) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("reading the spend counter of Flow type %s on the %s: %w", flowType, conn, err)
		}
		return resp.Get(&counter)
	})
	return counter, err
}
