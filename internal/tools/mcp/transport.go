package mcp

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"go.opentelemetry.io/otel/propagation"

	"github.com/stepwise-run/stepwise/internal/tracing"
)

// stdioEnvironment are the worker's variables a stdio server inherits; the
// rest, such as model keys, stay with the worker unless the ToolSource
// passes them.
var stdioEnvironment = []string{"HOME", "LOGNAME", "PATH", "SHELL", "TERM", "USER", "LANG", "TMPDIR"}

// stdioStopWait is how long a stdio server may take to exit after its
// input closes.
const stdioStopWait = 500 * time.Millisecond

// StdioConnect starts the command as a new process for every connection.
// The command comes only from the worker's configuration, never from
// session input, because it runs with the worker's privileges. env resolves
// the configured variables ("NAME=value") at each start, so a rotated
// Secret reaches the next process.
func StdioConnect(command string, args []string, env func() ([]string, error)) func() (mcp.Transport, error) {
	return func() (mcp.Transport, error) {
		cmd := exec.Command(command, args...)
		// Never nil: a nil Env would hand the process the whole
		// environment.
		cmd.Env = []string{}
		for _, name := range stdioEnvironment {
			if v, ok := os.LookupEnv(name); ok {
				cmd.Env = append(cmd.Env, name+"="+v)
			}
		}
		if env != nil {
			extra, err := env()
			if err != nil {
				return nil, err
			}
			cmd.Env = append(cmd.Env, extra...)
		}
		cmd.Stderr = os.Stderr
		// The process ends with its request, whose answer is in: a server
		// that does not exit when its input closes is stopped soon after.
		return &mcp.CommandTransport{Command: cmd, TerminateDuration: stdioStopWait}, nil
	}
}

// HTTPConnect reaches a Streamable HTTP endpoint with headers resolved at
// each connection. A broken stream is never resumed: the effect class
// alone decides whether a call is sent again.
func HTTPConnect(url string, headers func() (http.Header, error)) func() (mcp.Transport, error) {
	return func() (mcp.Transport, error) {
		var h http.Header
		if headers != nil {
			var err error
			if h, err = headers(); err != nil {
				return nil, fmt.Errorf("resolving the headers of %s: %w", url, err)
			}
		}
		client := &http.Client{Transport: headerTransport{headers: h, next: http.DefaultTransport}}
		return &mcp.StreamableClientTransport{
			Endpoint: url, HTTPClient: client, MaxRetries: -1, DisableStandaloneSSE: true,
		}, nil
	}
}

// headerTransport adds the configured headers to every request, and the
// task ID header to task requests.
type headerTransport struct {
	headers http.Header
	next    http.RoundTripper
}

func (t headerTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	req = req.Clone(req.Context())
	for name, values := range t.headers {
		req.Header[name] = values
	}
	// The request's context holds the tool Step's span while a call runs.
	tracing.Inject(req.Context(), propagation.HeaderCarrier(req.Header))
	req, err := taskHeaders(req)
	if err != nil {
		return nil, err
	}
	resp, err := t.next.RoundTrip(req)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode >= http.StatusInternalServerError {
		return serverFailure(resp)
	}
	return withTaskHandles(resp), nil
}

// serverFailure turns an HTTP error status from the server or a gateway
// into a transport error, so a call is read as interrupted whatever JSON-RPC
// error the body holds: the server may have run it. A JSON-RPC body with
// the Dex outcome key is the server's own answer about the call: it goes
// on as an answer, since the SDK drops the bodies of these statuses.
func serverFailure(resp *http.Response) (*http.Response, error) {
	body, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	_ = resp.Body.Close()
	if err == nil && bytes.Contains(body, []byte(OutcomeMetaKey)) {
		var msg struct {
			ID    json.RawMessage `json:"id"`
			Error *jsonrpc.Error  `json:"error"`
		}
		if json.Unmarshal(body, &msg) == nil && msg.Error != nil && len(msg.ID) > 0 && string(msg.ID) != "null" &&
			outcome(errorMeta(msg.Error)) != "" {
			resp.StatusCode, resp.Status = http.StatusOK, "200 OK"
			resp.Header.Set("Content-Type", "application/json")
			resp.Header.Del("Content-Length")
			resp.ContentLength = int64(len(body))
			resp.Body = io.NopCloser(bytes.NewReader(body))
			return resp, nil
		}
	}
	return nil, fmt.Errorf("the MCP server answered HTTP %d", resp.StatusCode)
}
