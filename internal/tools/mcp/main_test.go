package mcp

import (
	"os"
	"testing"

	"github.com/stepwise-run/stepwise/internal/tools/mcp/mcptest"
)

// TestMain lets this test binary serve the test servers over stdio, so
// the stdio tests run them as processes of their own.
func TestMain(m *testing.M) {
	mcptest.ServeIfAsked()
	os.Exit(m.Run())
}
