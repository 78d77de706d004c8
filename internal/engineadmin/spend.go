package engineadmin

import (
	"context"
	"errors"
	"fmt"

	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/client"

	"github.com/stepwise-run/stepwise/internal/spend"
)

// SpendCounter reads a Flow type's spend counter; a Flow type whose
// sessions made no model call under a budget has none yet, and reads as
// an empty counter.
func (c *Client) SpendCounter(ctx context.Context, conn Connection, flowType string) (spend.Counter, error) {
	var counter spend.Counter
	err := c.call(ctx, conn, func(ctx context.Context, sdk client.Client) error {
		resp, err := sdk.QueryWorkflow(ctx, spend.CounterID(flowType), "", spend.UsageQuery)
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
