package worker

import (
	"errors"
	"fmt"
	"net/http"

	"github.com/stepwise-run/stepwise/internal/media"
	"github.com/stepwise-run/stepwise/internal/tools/mcp"
	"github.com/stepwise-run/stepwise/pkg/agent"
	"github.com/stepwise-run/stepwise/pkg/workerconfig"
)

// toolSource builds one ToolSource's MCP source: a single server named
// after the source, so its tools are "<sourceName>__<tool>". Secret values
// are read from the environment at each connection, never stored here.
func toolSource(ts workerconfig.ToolSource, store media.Store) (agent.ToolSource, error) {
	server := mcp.Server{
		Name: ts.SourceName, TrustAnnotations: ts.TrustToolAnnotations,
		ListingTTL: ts.ListingTTL.Duration, ConnectionTimeout: ts.ConnectionTimeout.Duration,
		RequestTimeout: ts.RequestTimeout.Duration, TaskWaitTimeout: ts.TaskWaitTimeout.Duration,
	}
	switch {
	case ts.Stdio != nil:
		env := ts.Stdio.Env
		server.Connect = mcp.StdioConnect(ts.Stdio.Command, ts.Stdio.Args, func() ([]string, error) {
			out := make([]string, 0, len(env))
			for _, v := range env {
				value, err := v.ResolveChecked(workerconfig.EnvValueProblem)
				if err != nil {
					return nil, fmt.Errorf("stdio.env[%s]: %w", v.Name, err)
				}
				out = append(out, v.Name+"="+value)
			}
			return out, nil
		})
	case ts.StreamableHTTP != nil:
		// Any connection can poll a Streamable HTTP server's task, so the
		// session polls it on timers, holding no connection.
		server.TaskPolling = mcp.PollInSession
		headers := ts.StreamableHTTP.Headers
		server.Connect = mcp.HTTPConnect(ts.StreamableHTTP.URL, func() (http.Header, error) {
			h := http.Header{}
			for _, v := range headers {
				value, err := v.ResolveChecked(workerconfig.HeaderValueProblem)
				if err != nil {
					return nil, fmt.Errorf("streamableHTTP.headers[%s]: %w", v.Name, err)
				}
				h.Set(v.Name, value)
			}
			return h, nil
		})
	default:
		return nil, errors.New("needs exactly one of stdio or streamableHTTP")
	}
	return mcp.NewSource(mcp.SourceOptions{
		Name: ts.SourceName, Servers: []mcp.Server{server}, ResourceAndPromptTools: ts.ResourceAndPromptTools,
		MediaStore: store,
	})
}
