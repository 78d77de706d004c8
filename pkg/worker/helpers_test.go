package worker

import (
	"context"
	"io"
	"log/slog"
	"net"
	"net/http"
	"testing"

	"github.com/stepwise-run/stepwise/internal/version"
	"github.com/stepwise-run/stepwise/pkg/agent"
	"github.com/stepwise-run/stepwise/pkg/workerconfig"
)

func demoConfig() workerconfig.Config {
	return workerconfig.Config{
		APIVersion: workerconfig.APIVersion, Kind: workerconfig.Kind,
		Agent:    workerconfig.AgentRef{Namespace: "team", Name: "support"},
		FlowType: "SupportAgent", EngineVersion: version.EngineVersion, TaskSlots: 10,
		Engine: workerconfig.Engine{Address: "127.0.0.1:7233", Namespace: "default", TaskQueue: "stepwise/SupportAgent"},
		Definition: workerconfig.Definition{
			Name: "support", Model: workerconfig.Model{Provider: agent.ScriptedProvider, Name: "demo"},
			DefaultToolEffect: "unclassified",
		},
	}
}

type noteArgs struct {
	Note string `json:"note"`
}

func noteTool(t *testing.T, name string, effect agent.Effect) agent.Tool {
	t.Helper()
	tool, err := agent.NewTool(name, "Takes a note.", effect,
		func(_ context.Context, _ agent.ToolContext, a noteArgs) (string, error) { return a.Note, nil })
	if err != nil {
		t.Fatal(err)
	}
	return tool
}

// discardOutput drops a model call's streamed deltas.
type discardOutput struct{}

func (discardOutput) TextDelta(string)      {}
func (discardOutput) ReasoningDelta(string) {}

// reply makes one model call with a single user message and returns the
// answer's text.
func reply(t *testing.T, m agent.ModelClient, text string) string {
	t.Helper()
	resp, err := m.CallModel(context.Background(), agent.ModelRequest{
		Input: []agent.Message{{Sequence: 1, Role: agent.RoleUser, Text: text}},
	}, discardOutput{})
	if err != nil {
		t.Fatalf("CallModel() = %v", err)
	}
	return resp.Text()
}

func discardLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

func freeAddress(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// get fetches a URL and returns its status and body.
func get(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("GET %s: reading the body: %v", url, err)
	}
	return resp.StatusCode, string(body)
}
