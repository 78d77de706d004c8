package enginetest

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	agentsv1 "github.com/stepwise-run/stepwise/api/v1alpha1"
	"github.com/stepwise-run/stepwise/internal/render"
	"github.com/stepwise-run/stepwise/internal/tools/mcp/mcptest"
	"github.com/stepwise-run/stepwise/internal/version"
	"github.com/stepwise-run/stepwise/pkg/client"
	"github.com/stepwise-run/stepwise/pkg/workerconfig"
)

const providerKey = "sk-provider-key-never-logged-7781"

// fakeProvider speaks one provider's streaming wire format: a user message
// gets a durable_wait call, a tool result gets an answer. Every answer
// carries an opaque reasoning item, so replay can be checked byte for byte.
type fakeProvider struct {
	t        *testing.T
	provider agentsv1.ModelProvider
	// tool is the tool a user message gets a call of, with no arguments;
	// empty calls durable_wait for a second.
	tool     string
	mu       sync.Mutex
	requests []string
	keys     []string
}

func (f *fakeProvider) serve(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	f.mu.Lock()
	f.requests = append(f.requests, string(body))
	f.keys = append(f.keys, r.Header.Get("Authorization")+r.Header.Get("X-Api-Key"))
	n := len(f.requests)
	f.mu.Unlock()
	w.Header().Set("Content-Type", "text/event-stream")
	send := func(events ...string) {
		for _, e := range events {
			var typed struct {
				Type string `json:"type"`
			}
			_ = json.Unmarshal([]byte(e), &typed)
			if typed.Type != "" {
				fmt.Fprintf(w, "event: %s\n", typed.Type)
			}
			fmt.Fprintf(w, "data: %s\n\n", e)
		}
	}
	answered := f.lastIsToolResult(body)
	tool, wait := "durable_wait", `{\"duration_seconds\":1,\"reason\":\"test\"}`
	if f.tool != "" {
		tool, wait = f.tool, `{}`
	}
	switch f.provider {
	case agentsv1.ModelProviderOpenAI:
		reasoning := fmt.Sprintf(`{"id":"rs_%d","type":"reasoning","summary":[],"encrypted_content":"opaque-%d"}`, n, n)
		item := fmt.Sprintf(`{"id":"fc_%d","type":"function_call","call_id":"call_%d","name":"%s","arguments":"%s"}`, n, n, tool, wait)
		if answered {
			item = fmt.Sprintf(`{"id":"msg_%d","type":"message","role":"assistant","content":[{"type":"output_text","text":"waited %d"}]}`, n, n)
		}
		send(`{"type":"response.output_item.done","output_index":0,"item":`+reasoning+`}`,
			`{"type":"response.output_item.done","output_index":1,"item":`+item+`}`,
			`{"type":"response.completed","response":{"id":"resp","status":"completed","model":"gpt","output":[],"usage":{"input_tokens":10,"output_tokens":2,"total_tokens":12}}}`)
	case agentsv1.ModelProviderOpenAICompatible:
		delta := fmt.Sprintf(`{"role":"assistant","tool_calls":[{"index":0,"id":"call_%d","type":"function","function":{"name":"%s","arguments":"%s"}}]}`, n, tool, wait)
		finish := "tool_calls"
		if answered {
			delta, finish = fmt.Sprintf(`{"role":"assistant","content":"waited %d"}`, n), "stop"
		}
		send(`{"id":"c","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":`+delta+`,"finish_reason":"`+finish+`"}]}`, "[DONE]")
	case agentsv1.ModelProviderAnthropic:
		block := fmt.Sprintf(`{"type":"tool_use","id":"toolu_%d","name":"%s","input":{}}`, n, tool)
		deltaEvent := fmt.Sprintf(`{"type":"content_block_delta","index":1,"delta":{"type":"input_json_delta","partial_json":"%s"}}`, wait)
		reason := "tool_use"
		if answered {
			block = `{"type":"text","text":""}`
			deltaEvent = fmt.Sprintf(`{"type":"content_block_delta","index":1,"delta":{"type":"text_delta","text":"waited %d"}}`, n)
			reason = "end_turn"
		}
		send(`{"type":"message_start","message":{"id":"msg","type":"message","role":"assistant","model":"claude","content":[],"usage":{"input_tokens":10,"output_tokens":1}}}`,
			`{"type":"content_block_start","index":0,"content_block":{"type":"thinking","thinking":"","signature":""}}`,
			`{"type":"content_block_delta","index":0,"delta":{"type":"thinking_delta","thinking":"hmm"}}`,
			fmt.Sprintf(`{"type":"content_block_delta","index":0,"delta":{"type":"signature_delta","signature":"sig-%d"}}`, n),
			`{"type":"content_block_stop","index":0}`,
			`{"type":"content_block_start","index":1,"content_block":`+block+`}`, deltaEvent,
			`{"type":"content_block_stop","index":1}`,
			`{"type":"message_delta","delta":{"stop_reason":"`+reason+`"},"usage":{"output_tokens":3}}`,
			`{"type":"message_stop"}`)
	}
}

// lastIsToolResult reads whether the request ends with a tool result.
func (f *fakeProvider) lastIsToolResult(body []byte) bool {
	var req struct {
		Input    []map[string]any `json:"input"`
		Messages []map[string]any `json:"messages"`
	}
	_ = json.Unmarshal(body, &req)
	switch f.provider {
	case agentsv1.ModelProviderOpenAI:
		return len(req.Input) > 0 && req.Input[len(req.Input)-1]["type"] == "function_call_output"
	case agentsv1.ModelProviderOpenAICompatible:
		// The images of tool results follow the tool messages in user
		// messages, so any tool message after the last answer counts.
		for i := len(req.Messages) - 1; i >= 0 && req.Messages[i]["role"] != "assistant"; i-- {
			if req.Messages[i]["role"] == "tool" {
				return true
			}
		}
		return false
	default:
		if len(req.Messages) == 0 {
			return false
		}
		last, _ := json.Marshal(req.Messages[len(req.Messages)-1])
		return strings.Contains(string(last), `"tool_result"`)
	}
}

// renderedConfig renders the worker configuration the operator would give
// an Agent on this provider.
func renderedConfig(t *testing.T, s *Stack, provider agentsv1.ModelProvider, baseURL string, mutate ...func(*agentsv1.Agent)) {
	t.Helper()
	agent := &agentsv1.Agent{
		ObjectMeta: metav1.ObjectMeta{Name: "assistant", Namespace: "team", UID: "uid-1"},
		Spec: agentsv1.AgentSpec{
			FlowType: s.FlowType, Instructions: "You wait when asked.",
			Model: agentsv1.ModelSpec{Provider: provider, Name: "model-x", BaseURL: baseURL,
				APIKeySecretRef: &agentsv1.SecretKeyReference{Name: "model-key", Key: "api-key"}},
			BuiltInTools: []agentsv1.BuiltInTool{"durable_wait"},
		},
	}
	for _, m := range mutate {
		m(agent)
	}
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "model-key", Namespace: "team"}, Data: map[string][]byte{"api-key": []byte(providerKey)}}
	resolved, blocker := render.Resolve(agent, render.Observed{Secrets: map[string]*corev1.Secret{"model-key": secret},
		ClusterEngine: ReadyClusterEngine("dev", s.Server.FrontendHostPort())},
		render.Defaults{DefaultEngine: "dev", WorkerImage: "stock", WorkerEngineVersion: version.EngineVersion})
	if blocker != nil {
		t.Fatalf("the Agent is blocked: %s: %s", blocker.Reason, blocker.Message)
	}
	objects, err := render.Worker(resolved)
	if err != nil {
		t.Fatal(err)
	}
	s.Config = objects.Config
	s.Config.Engine.StepHeartbeatTimeout = metav1.Duration{Duration: 2 * time.Second}
	s.Binary = StockWorkerBinary(t)
	s.Env = []string{render.SecretEnvName("model-key", "api-key") + "=" + providerKey}
}

func TestTwoTurnsWithToolCallsAgainstEachProvidersWireFormat(t *testing.T) {
	for _, tc := range []struct {
		provider agentsv1.ModelProvider
		path     string
		replayed func(n int) string
	}{
		{agentsv1.ModelProviderOpenAI, "/v1", func(n int) string {
			return fmt.Sprintf(`{"id":"rs_%d","type":"reasoning","summary":[],"encrypted_content":"opaque-%d"}`, n, n)
		}},
		{agentsv1.ModelProviderOpenAICompatible, "/v1", func(n int) string {
			if n%2 == 0 {
				return fmt.Sprintf(`{"content":"waited %d","role":"assistant"}`, n)
			}
			return fmt.Sprintf(`"id":"call_%d"`, n)
		}},
		{agentsv1.ModelProviderAnthropic, "", func(n int) string {
			return fmt.Sprintf(`{"signature":"sig-%d","thinking":"hmm","type":"thinking"}`, n)
		}},
	} {
		t.Run(string(tc.provider), func(t *testing.T) {
			fake := &fakeProvider{t: t, provider: tc.provider}
			srv := httptest.NewServer(http.HandlerFunc(fake.serve))
			defer srv.Close()
			s := NewStack(t, "Provider"+strings.ReplaceAll(string(tc.provider), "-", ""))
			renderedConfig(t, s, tc.provider, srv.URL+tc.path)
			w := s.StartWorker()
			sessions := client.New(s.Client, s.Agent())
			ctx := context.Background()
			if ok, err := sessions.Start(ctx, "s1", "wait please"); !ok || err != nil {
				t.Fatalf("Start = %v, %v", ok, err)
			}
			if answer := lastAnswer(t, sessions, "s1", 1); answer != "waited 2" {
				t.Fatalf("turn 1 answer = %q", answer)
			}
			if ok, err := sessions.Send(ctx, "s1", "again"); !ok || err != nil {
				t.Fatalf("Send = %v, %v", ok, err)
			}
			if answer := lastAnswer(t, sessions, "s1", 2); answer != "waited 4" {
				t.Fatalf("turn 2 answer = %q", answer)
			}
			fake.mu.Lock()
			requests, keys := append([]string(nil), fake.requests...), append([]string(nil), fake.keys...)
			fake.mu.Unlock()
			if len(requests) != 4 {
				t.Fatalf("the provider got %d requests, want one per model call: 4", len(requests))
			}
			for i := 1; i <= 3; i++ {
				for earlier := 1; earlier <= i; earlier++ {
					if !strings.Contains(requests[i], tc.replayed(earlier)) {
						t.Errorf("request %d does not replay answer %d's item %s", i+1, earlier, tc.replayed(earlier))
					}
				}
			}
			for i, k := range keys {
				if !strings.Contains(k, providerKey) {
					t.Errorf("request %d carried no key", i+1)
				}
			}
			// The key appears nowhere the session shows or the worker writes.
			snap, err := sessions.Snapshot(ctx, "s1")
			if err != nil {
				t.Fatal(err)
			}
			shown, _ := json.Marshal(snap)
			resp, err := http.Get("http://" + w.Debug + "/debug/events?session=s1")
			if err != nil {
				t.Fatal(err)
			}
			events, _ := io.ReadAll(resp.Body)
			_ = resp.Body.Close()
			w.Kill()
			logs, _ := filepath.Glob(filepath.Join(s.Dir, "worker-*.log"))
			for _, where := range append([]string{"snapshot", "events"}, logs...) {
				text := map[string]string{"snapshot": string(shown), "events": string(events)}[where]
				if text == "" {
					raw, _ := os.ReadFile(where)
					text = string(raw)
				}
				if strings.Contains(text, providerKey) {
					t.Errorf("the key appears in %s", where)
				}
			}
			if !strings.Contains(string(events), `"usage_recorded"`) {
				t.Errorf("the worker's events show no usage: %s", events)
			}
		})
	}
}

// TestSessionSettingsChooseAmongTheStockWorkersModels runs the stock worker
// with an Agent whose sessions may choose an Anthropic model by settings,
// beside its default OpenAI model, each behind its own wire format.
func TestSessionSettingsChooseAmongTheStockWorkersModels(t *testing.T) {
	openai := &fakeProvider{t: t, provider: agentsv1.ModelProviderOpenAI}
	anthropic := &fakeProvider{t: t, provider: agentsv1.ModelProviderAnthropic}
	openaiServer := httptest.NewServer(http.HandlerFunc(openai.serve))
	defer openaiServer.Close()
	anthropicServer := httptest.NewServer(http.HandlerFunc(anthropic.serve))
	defer anthropicServer.Close()
	s := NewStack(t, "ProviderChoice")
	renderedConfig(t, s, agentsv1.ModelProviderOpenAI, openaiServer.URL+"/v1", func(a *agentsv1.Agent) {
		a.Spec.ModelChoices = []agentsv1.ModelChoice{{Choice: "claude", Model: agentsv1.ModelSpec{
			Provider: agentsv1.ModelProviderAnthropic, Name: "claude-x", BaseURL: anthropicServer.URL,
			APIKeySecretRef: &agentsv1.SecretKeyReference{Name: "model-key", Key: "api-key"},
		}}}
	})
	s.StartWorker()
	sessions := client.New(s.Client, s.Agent())
	ctx := context.Background()

	if ok, err := sessions.Start(ctx, "s1", "wait please", client.WithSettings(client.SessionSettings{"model": "claude"})); !ok || err != nil {
		t.Fatalf("Start = %v, %v", ok, err)
	}
	if answer := lastAnswer(t, sessions, "s1", 1); answer != "waited 2" {
		t.Fatalf("turn 1 answer = %q", answer)
	}
	if ok, err := sessions.UpdateSettings(ctx, "s1", client.SessionSettings{}); !ok || err != nil {
		t.Fatalf("UpdateSettings = %v, %v", ok, err)
	}
	if ok, err := sessions.Send(ctx, "s1", "again"); !ok || err != nil {
		t.Fatalf("Send = %v, %v", ok, err)
	}
	if answer := lastAnswer(t, sessions, "s1", 2); answer != "waited 2" {
		t.Fatalf("turn 2 answer = %q", answer)
	}
	anthropic.mu.Lock()
	openai.mu.Lock()
	defer anthropic.mu.Unlock()
	defer openai.mu.Unlock()
	if len(anthropic.requests) != 2 || len(openai.requests) != 2 {
		t.Fatalf("requests: anthropic %d, openai %d; want turn 1's two on the chosen model and turn 2's two on the default",
			len(anthropic.requests), len(openai.requests))
	}
	if !strings.Contains(anthropic.requests[0], `"model":"claude-x"`) {
		t.Errorf("the chosen model's request names another model: %s", anthropic.requests[0])
	}
	// The default model sees the chosen model's turn as text and tool
	// calls, without its thinking.
	first := openai.requests[0]
	if !strings.Contains(first, "waited 2") || strings.Contains(first, "sig-") || !strings.Contains(first, `"model":"model-x"`) {
		t.Errorf("turn 2's first request does not replay turn 1 provider-neutrally: %s", first)
	}
}

// careless is an OpenAI-compatible server as LM Studio, llama.cpp or a
// proxy behaves: it cuts the turn's first stream (so RunModel is retried),
// then calls the ledger's balance three times with an empty ID and call_0
// twice, and in the next turn calls it with call_0 again. It answers from
// what each request holds, not from how many came before, so an attempt
// the engine retries for its own reasons (a missed heartbeat on a loaded
// machine) gets the same answer again.
type careless struct {
	mu       sync.Mutex
	requests []string
	cut      bool
}

func (c *careless) serve(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	var req struct {
		Messages []struct {
			Role    string `json:"role"`
			Content any    `json:"content"`
		} `json:"messages"`
	}
	_ = json.Unmarshal(body, &req)
	c.mu.Lock()
	c.requests = append(c.requests, string(body))
	cutThis := !c.cut
	c.cut = true
	c.mu.Unlock()
	var lastRole, lastUser string
	for _, m := range req.Messages {
		lastRole = m.Role
		if m.Role == "user" {
			lastUser = fmt.Sprint(m.Content)
		}
	}
	w.Header().Set("Content-Type", "text/event-stream")
	chunk := func(delta, finish string) {
		f := "null"
		if finish != "" {
			f = `"` + finish + `"`
		}
		fmt.Fprintf(w, "data: {\"id\":\"c\",\"object\":\"chat.completion.chunk\",\"created\":1,\"model\":\"m\",\"choices\":[{\"index\":0,\"delta\":%s,\"finish_reason\":%s}]}\n\n", delta, f)
	}
	call := func(index int, id, note string) string {
		return fmt.Sprintf(`{"role":"assistant","tool_calls":[{"index":%d,"id":%q,"type":"function","function":{"name":"ledger__balance","arguments":"{\"note\":\"%s\"}"}}]}`, index, id, note)
	}
	switch {
	case lastRole == "tool" && strings.Contains(lastUser, "balances please"):
		chunk(`{"role":"assistant","content":"done after balances"}`, "stop")
	case lastRole == "tool":
		chunk(`{"role":"assistant","content":"done after again"}`, "stop")
	case strings.Contains(lastUser, "balances please") && cutThis:
		chunk(call(0, "", "cut"), "")
		return // no finish reason: a broken stream, retried
	case strings.Contains(lastUser, "balances please"):
		chunk(call(0, "", "first"), "")
		chunk(call(1, "call_0", "second"), "")
		chunk(call(2, "call_0", "third"), "")
		chunk(`{}`, "tool_calls")
	default:
		chunk(call(0, "call_0", "again"), "")
		chunk(`{}`, "tool_calls")
	}
	fmt.Fprint(w, "data: [DONE]\n\n")
}

// Empty and repeated tool call IDs from an OpenAI-compatible server do not
// fail the turn: the client makes up IDs from the turn and the call's
// position, the same on the retried RunModel, and each tool result goes
// back to the provider paired with its own call.
func TestEmptyAndRepeatedToolCallIDsFromAnOpenAICompatibleServer(t *testing.T) {
	provider := &careless{}
	srv := httptest.NewServer(http.HandlerFunc(provider.serve))
	defer srv.Close()
	ledger := mcptest.NewLedger(t)
	s := NewStack(t, "ProviderCarelessIDs")
	renderedConfig(t, s, agentsv1.ModelProviderOpenAICompatible, srv.URL+"/v1")
	s.Config.ToolSources = []workerconfig.ToolSource{httpToolSource("ledger", ledger.URL)}
	s.StartWorker()
	sessions := client.New(s.Client, s.Agent())
	ctx := context.Background()
	if ok, err := sessions.Start(ctx, "s1", "balances please"); !ok || err != nil {
		t.Fatalf("Start = %v, %v", ok, err)
	}
	if answer := lastAnswer(t, sessions, "s1", 1); answer != "done after balances" {
		t.Fatalf("turn 1 answer = %q", answer)
	}
	if ok, err := sessions.Send(ctx, "s1", "again"); !ok || err != nil {
		t.Fatalf("Send = %v, %v", ok, err)
	}
	if answer := lastAnswer(t, sessions, "s1", 2); answer != "done after again" {
		t.Fatalf("turn 2 answer = %q", answer)
	}

	// The retried first call (request 2) got IDs from turn-1's first model
	// call; the repeat in turn 2 got one from turn-2's.
	wantIDs := map[string]string{ // by the call's note
		"first": "call_turn-1_1_0", "second": "call_0", "third": "call_turn-1_1_2", "again": "call_turn-2_1_0",
	}
	turnOf := map[string]string{"first": "turn-1", "second": "turn-1", "third": "turn-1", "again": "turn-2"}
	provider.mu.Lock()
	requests := append([]string(nil), provider.requests...)
	provider.mu.Unlock()
	if len(requests) < 5 {
		t.Fatalf("the provider got %d requests, want at least 5 (one retried)", len(requests))
	}
	var last struct {
		Messages []struct {
			Role       string `json:"role"`
			Content    any    `json:"content"`
			ToolCallID string `json:"tool_call_id"`
			ToolCalls  []struct {
				ID       string `json:"id"`
				Function struct {
					Arguments string `json:"arguments"`
				} `json:"function"`
			} `json:"tool_calls"`
		} `json:"messages"`
	}
	if err := json.Unmarshal([]byte(requests[len(requests)-1]), &last); err != nil {
		t.Fatal(err)
	}
	results := map[string]string{}
	seen := map[string]bool{}
	for _, m := range last.Messages {
		if m.Role == "tool" {
			results[m.ToolCallID], _ = m.Content.(string)
		}
		for _, c := range m.ToolCalls {
			var args noteArgs
			_ = json.Unmarshal([]byte(c.Function.Arguments), &args)
			if want := wantIDs[args.Note]; c.ID != want {
				t.Errorf("the call with note %q has ID %q, want %q", args.Note, c.ID, want)
			}
			seen[args.Note] = true
		}
	}
	if len(seen) != len(wantIDs) {
		t.Errorf("the last request replays the calls %v, want %v", seen, wantIDs)
	}
	for note, id := range wantIDs {
		// The ledger answers with the idempotency key, which names the
		// call: each result is its own call's.
		if want := "balance applied " + s.WorkflowID("s1") + "/" + turnOf[note] + "/" + id; results[id] != want {
			t.Errorf("the result paired with %s (note %s) = %q, want %q", id, note, results[id], want)
		}
	}
	if calls := ledger.CallsOf("balance"); len(calls) != 4 {
		t.Errorf("the ledger got %d calls, want 4: %+v", len(calls), calls)
	}
}
