package loop

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stepwise-run/stepwise/internal/session"
	"github.com/stepwise-run/stepwise/internal/tools/mcp"
	"github.com/stepwise-run/stepwise/internal/tools/mcp/mcptest"
	"github.com/stepwise-run/stepwise/pkg/agent"
)

// fakeSource is a tool source whose listing and calls the test sets.
type fakeSource struct {
	name  string
	tools []agent.SourceTool
	err   error
	delay time.Duration

	mu    sync.Mutex
	calls []agent.SourceCall
	seen  agent.SourcePolicies
}

func (f *fakeSource) SourceName() string { return f.name }

func (f *fakeSource) ListTools(ctx context.Context, policies agent.SourcePolicies) ([]agent.SourceTool, error) {
	f.mu.Lock()
	f.seen = policies
	f.mu.Unlock()
	if f.delay > 0 {
		select {
		case <-time.After(f.delay):
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	return f.tools, f.err
}

func (f *fakeSource) CallTool(_ context.Context, call agent.ToolContext, tool agent.SourceCall) (agent.ToolOutput, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, tool)
	return agent.ToolOutput{Output: f.name + " ran " + tool.Name + " with " + tool.Arguments + " key " + call.IdempotencyKey}, nil
}

func listedTool(name string, effect agent.Effect, ordered bool) agent.SourceTool {
	return agent.SourceTool{
		ToolDefinition: agent.ToolDefinition{Name: name, Description: "listed " + name, Parameters: []byte(`{"type":"object"}`)},
		Policy:         agent.Policy{Effect: effect}, Reference: "ref-" + name, Ordered: ordered,
	}
}

func TestListedToolsAreOfferedBetweenFunctionAndBuiltInTools(t *testing.T) {
	files := &fakeSource{name: "files", tools: []agent.SourceTool{listedTool("files__read", agent.EffectRead, false)}}
	down := &fakeSource{name: "down", err: errors.New("connection refused")}
	slow := &fakeSource{name: "slow", delay: time.Minute, tools: []agent.SourceTool{listedTool("slow__x", agent.EffectRead, false)}}
	var requests []agent.ModelRequest
	model := agent.NewScriptedModel(func(req agent.ModelRequest) (agent.ScriptedReply, error) {
		requests = append(requests, req)
		return agent.ScriptedReply{Text: "done"}, nil
	})
	r := newRunner(t, agent.Definition{
		Model: model, Tools: []agent.Tool{lookupTool(t, nil)}, BuiltInTools: []agent.BuiltInTool{agent.BuiltInAskUser},
		ToolSources:              []agent.ToolSource{down, files, slow},
		ToolSourceListingTimeout: 50 * time.Millisecond,
		ToolPolicies:             map[string]agent.Policy{"files__read": {Effect: agent.EffectIdempotentWrite}},
		DefaultToolEffect:        agent.EffectIdempotentWrite,
	})
	if _, err := r.RunModelStep(context.Background(), userTurn("hi")); err != nil {
		t.Fatalf("a down and a slow source failed the model call: %v", err)
	}
	if got := toolNames(requests[0].Tools); !slices.Equal(got, []string{"lookup", "files__read", "ask_user"}) {
		t.Errorf("offered %v, want the function tool, the listed tool, then the built-in", got)
	}
	if files.seen.DefaultToolEffect != agent.EffectIdempotentWrite || files.seen.ToolPolicies["files__read"].Effect != agent.EffectIdempotentWrite {
		t.Errorf("the source saw policies %+v", files.seen)
	}

	// A planning turn lists nothing.
	plan := userTurn("plan")
	plan.Mode = session.ModePlanning
	r = newRunner(t, agent.Definition{Model: model, ToolSources: []agent.ToolSource{files},
		BuiltInTools: []agent.BuiltInTool{agent.BuiltInWriteTodos}, PlanModeEnabled: true})
	if _, err := r.RunModelStep(context.Background(), plan); err != nil {
		t.Fatal(err)
	}
	if got := toolNames(requests[len(requests)-1].Tools); !slices.Equal(got, []string{"write_todos"}) {
		t.Errorf("a planning turn offered %v", got)
	}
}

func TestAListedNameThatRepeatsAnotherToolFailsTheAttempt(t *testing.T) {
	cases := []struct {
		name    string
		sources []agent.ToolSource
		want    string
	}{
		{"a function tool", []agent.ToolSource{&fakeSource{name: "a", tools: []agent.SourceTool{listedTool("lookup", agent.EffectRead, false)}}},
			"tool lookup of a tool source uses the name of a function tool"},
		{"a built-in", []agent.ToolSource{&fakeSource{name: "a", tools: []agent.SourceTool{listedTool("ask_user", agent.EffectRead, false)}}},
			"tool ask_user uses the name of an enabled built-in tool"},
		{"another source's tool", []agent.ToolSource{
			&fakeSource{name: "a", tools: []agent.SourceTool{listedTool("x__y", agent.EffectRead, false)}},
			&fakeSource{name: "b", tools: []agent.SourceTool{listedTool("x__y", agent.EffectRead, false)}},
		}, "two tool sources list a tool named x__y"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			called := false
			model := agent.NewScriptedModel(func(agent.ModelRequest) (agent.ScriptedReply, error) {
				called = true
				return agent.ScriptedReply{Text: "x"}, nil
			})
			r := newRunner(t, agent.Definition{Model: model, Tools: []agent.Tool{lookupTool(t, nil)},
				BuiltInTools: []agent.BuiltInTool{agent.BuiltInAskUser}, ToolSources: c.sources})
			_, err := r.RunModelStep(context.Background(), userTurn("hi"))
			if err == nil || err.Error() != c.want {
				t.Errorf("err = %v, want %q", err, c.want)
			}
			if called {
				t.Error("the model was called")
			}
		})
	}
}

func TestNewRefusesSourcesWithoutUniqueNames(t *testing.T) {
	for _, sources := range [][]agent.ToolSource{
		{&fakeSource{name: ""}},
		{&fakeSource{name: "mcp"}, &fakeSource{name: "mcp"}},
	} {
		_, err := New(agent.Definition{Name: "a", Model: agent.NewScriptedModel(agent.DemoScript), ToolSources: sources})
		if err == nil || !strings.Contains(err.Error(), "source name") && !strings.Contains(err.Error(), "two tool sources are named mcp") {
			t.Errorf("sources %v: err = %v", sources, err)
		}
	}
}

func TestACallOfAListedToolStoresItsSourceAndRunsThere(t *testing.T) {
	files := &fakeSource{name: "files", tools: []agent.SourceTool{
		listedTool("files__read", agent.EffectRead, false), listedTool("files__write", agent.EffectNonIdempotentWrite, true),
	}}
	model := agent.NewScriptedModel(replying(agent.ScriptedReply{ToolCalls: []agent.ScriptedToolCall{
		{ID: "c1", Name: "files__write", Arguments: `{"path":"a"}`},
		{ID: "c2", Name: "files__gone", Arguments: `{}`},
	}}))
	r := newRunner(t, agent.Definition{Model: model, ToolSources: []agent.ToolSource{files}})
	out, err := r.RunModelStep(context.Background(), userTurn("write"))
	if err != nil {
		t.Fatal(err)
	}
	if len(out.ToolCalls) != 2 {
		t.Fatalf("calls = %+v", out.ToolCalls)
	}
	write, gone := out.ToolCalls[0], out.ToolCalls[1]
	if write.SourceReference != `{"stepwise_tool_source":"files","reference":"ref-files__write"}` || !write.Ordered ||
		write.Policy.Effect != agent.EffectNonIdempotentWrite {
		t.Errorf("the listed call = %+v", write)
	}
	if gone.SourceReference != "" || gone.Policy.Effect != agent.EffectUnclassified || gone.Policy.ApprovalRequired() {
		t.Errorf("a name no listing offered = %+v, want unclassified without approval and no source", gone)
	}

	// The tool Step reaches the source by the stored reference, on a
	// runner whose sources are in another order.
	other := &fakeSource{name: "other"}
	later := newRunner(t, agent.Definition{Model: model, ToolSources: []agent.ToolSource{other, files}})
	exec := execution("files__write", `{"path":"a"}`, agent.EffectNonIdempotentWrite)
	exec.Call.SourceReference = write.SourceReference
	got, err := later.ExecuteToolCall(context.Background(), exec)
	if err != nil || got.Kind != session.ToolResultSucceeded || got.Output != `files ran files__write with {"path":"a"} key s1/turn-2/c9` {
		t.Errorf("outcome = %+v, %v", got, err)
	}
	if len(files.calls) != 1 || files.calls[0].Reference != "ref-files__write" || len(other.calls) != 0 {
		t.Errorf("files got %+v, other %+v", files.calls, other.calls)
	}

	// A worker without the source fails the Step, so the effect class
	// decides the outcome.
	bare := newRunner(t, agent.Definition{Model: model})
	if _, err := bare.ExecuteToolCall(context.Background(), exec); err == nil || !strings.Contains(err.Error(), `tool source "files", which this worker does not have`) {
		t.Errorf("a missing source: %v", err)
	}
	// A name no listing offered fails as an unknown tool.
	if got, err := r.ExecuteToolCall(context.Background(), execution("files__gone", `{}`, agent.EffectUnclassified)); err != nil ||
		got.Kind != session.ToolResultFailed || got.Error != "unknown tool files__gone" {
		t.Errorf("unknown tool = %+v, %v", got, err)
	}
}

// deafSource ignores its context when it lists.
type deafSource struct{ release chan struct{} }

func (d deafSource) SourceName() string { return "deaf" }

func (d deafSource) ListTools(context.Context, agent.SourcePolicies) ([]agent.SourceTool, error) {
	<-d.release
	return []agent.SourceTool{listedTool("deaf__x", agent.EffectRead, false)}, nil
}

func (d deafSource) CallTool(context.Context, agent.ToolContext, agent.SourceCall) (agent.ToolOutput, error) {
	return agent.ToolOutput{}, nil
}

func TestASourceThatIgnoresItsContextCannotHoldTheModelCall(t *testing.T) {
	deaf := deafSource{release: make(chan struct{})}
	defer close(deaf.release)
	files := &fakeSource{name: "files", tools: []agent.SourceTool{listedTool("files__read", agent.EffectRead, false)}}
	var offered []string
	model := agent.NewScriptedModel(func(req agent.ModelRequest) (agent.ScriptedReply, error) {
		offered = toolNames(req.Tools)
		return agent.ScriptedReply{Text: "done"}, nil
	})
	r := newRunner(t, agent.Definition{Model: model, ToolSources: []agent.ToolSource{deaf, files}, ToolSourceListingTimeout: 100 * time.Millisecond})
	// The deaf source answers only once the test ends: a model call that
	// waited for it would never return.
	if _, err := r.RunModelStep(context.Background(), userTurn("hi")); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(offered, []string{"files__read"}) {
		t.Errorf("offered %v, want the source that answered", offered)
	}
}

// A source of two MCP servers, one of which never answers its first
// listing: the other's tools still reach the model call.
func TestASlowMCPServerDoesNotHideItsSourcesOtherServer(t *testing.T) {
	block := make(chan struct{})
	slow := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { <-block }))
	defer slow.Close()
	defer close(block)
	ledger := mcptest.NewLedger(t)
	src, err := mcp.NewSource(mcp.SourceOptions{Name: "mixed", Servers: []mcp.Server{
		{Name: "slow", Connect: mcp.HTTPConnect(slow.URL, nil)},
		{Name: "fast", TrustAnnotations: true, Connect: mcp.HTTPConnect(ledger.URL, nil)},
	}})
	if err != nil {
		t.Fatal(err)
	}
	var offered []string
	model := agent.NewScriptedModel(func(req agent.ModelRequest) (agent.ScriptedReply, error) {
		offered = toolNames(req.Tools)
		return agent.ScriptedReply{Text: "done"}, nil
	})
	r := newRunner(t, agent.Definition{Model: model, ToolSources: []agent.ToolSource{src}, ToolSourceListingTimeout: time.Second})
	if _, err := r.RunModelStep(context.Background(), userTurn("hi")); err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(offered, "fast__balance") || slices.ContainsFunc(offered, func(n string) bool { return strings.HasPrefix(n, "slow__") }) {
		t.Errorf("offered %v, want the fast server's tools", offered)
	}
}
