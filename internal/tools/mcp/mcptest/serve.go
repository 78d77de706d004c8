package mcptest

import (
	"context"
	"fmt"
	"os"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// ServeEnv names the server a test binary serves over stdio instead of
// running its tests, so a test can run the servers of this package as
// processes of their own: "ledger" or "tasks".
const ServeEnv = "STEPWISE_MCPTEST_SERVE"

// ServeIfAsked serves the server ServeEnv names over stdin and stdout and
// exits; without it, it returns at once. Call it first in TestMain. The
// stdio ledger also has the tool "exit", which ends the process in the
// middle of its call, as a crashed server would.
func ServeIfAsked() {
	name := os.Getenv(ServeEnv)
	if name == "" {
		return
	}
	var server *mcp.Server
	var transport mcp.Transport = &mcp.StdioTransport{}
	switch name {
	case "ledger":
		server = newLedger().Server()
		server.AddTool(&mcp.Tool{Name: "exit", Description: "Ends the server mid-call.", InputSchema: objectSchema,
			Annotations: &mcp.ToolAnnotations{ReadOnlyHint: true}},
			func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
				os.Exit(3)
				return nil, nil
			})
	case "tasks":
		ts := &TaskServer{tasks: map[string]*task{}, pollMs: 100}
		server = ts.Server()
		transport = handleTransport{transport}
	default:
		fmt.Fprintf(os.Stderr, "%s=%s: no such server\n", ServeEnv, name)
		os.Exit(2)
	}
	if err := server.Run(context.Background(), transport); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	os.Exit(0)
}
