package worker

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/stepwise-run/stepwise/pkg/agent"
	"github.com/stepwise-run/stepwise/pkg/workerconfig"
)

func TestModelDemoNeedsNoScripts(t *testing.T) {
	m, err := Model(workerconfig.Model{Provider: agent.ScriptedProvider, Name: "demo"}, nil)
	if err != nil {
		t.Fatalf("Model() = %v", err)
	}
	if got := reply(t, m, "hi"); got != "Demo reply: hi" {
		t.Errorf("the demo model answered %q, want %q", got, "Demo reply: hi")
	}
}

func TestModelUsesTheNamedScript(t *testing.T) {
	scripts := map[string]agent.Script{
		"support-demo": func(req agent.ModelRequest) (agent.ScriptedReply, error) {
			texts := agent.UserTexts(req)
			return agent.ScriptedReply{Text: "support: " + texts[len(texts)-1]}, nil
		},
		"other": func(agent.ModelRequest) (agent.ScriptedReply, error) {
			return agent.ScriptedReply{Text: "other"}, nil
		},
	}
	m, err := Model(workerconfig.Model{Provider: agent.ScriptedProvider, Name: "support-demo"}, scripts)
	if err != nil {
		t.Fatalf("Model() = %v", err)
	}
	if got := reply(t, m, "refund order 7"); got != "support: refund order 7" {
		t.Errorf("the model answered %q, want the support-demo script's reply", got)
	}
	demo, err := Model(workerconfig.Model{Provider: agent.ScriptedProvider, Name: "demo"}, scripts)
	if err != nil {
		t.Fatalf("Model(demo) with other scripts = %v", err)
	}
	if got := reply(t, demo, "hi"); got != "Demo reply: hi" {
		t.Errorf("the demo model answered %q beside other scripts, want the stock demo", got)
	}
}

func TestModelRefusesAnUnknownScriptListingTheAvailableOnes(t *testing.T) {
	scripts := map[string]agent.Script{"support-demo": agent.DemoScript, "billing-demo": agent.DemoScript}
	_, err := Model(workerconfig.Model{Provider: agent.ScriptedProvider, Name: "nope"}, scripts)
	if err == nil {
		t.Fatal("Model() = nil, want an error")
	}
	for _, want := range []string{"definition.model.name", `"nope"`, `"demo"`, `"support-demo"`, `"billing-demo"`} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("Model() = %q, want it to mention %s", err, want)
		}
	}
}

func TestModelRefusesAProviderThisWorkerDoesNotCarry(t *testing.T) {
	_, err := Model(workerconfig.Model{Provider: "mistral", Name: "large"}, map[string]agent.Script{"large": agent.DemoScript})
	if err == nil {
		t.Fatal("Model() = nil, want an error")
	}
	for _, want := range []string{"definition.model.provider", `"mistral"`} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("Model() = %q, want it to mention %s", err, want)
		}
	}
}

func TestAWorkersOwnModelClientWinsOverTheBuiltInOnes(t *testing.T) {
	own := agent.NewScriptedModel(func(agent.ModelRequest) (agent.ScriptedReply, error) {
		return agent.ScriptedReply{Text: "own"}, nil
	})
	cfg := workerconfig.Config{Definition: workerconfig.Definition{Model: workerconfig.Model{Provider: "openai", Name: "gpt-5-mini"}}}
	def, err := Definition(cfg, Options{Model: func(m workerconfig.Model) (agent.ModelClient, error) {
		if m.Provider == "openai" {
			return own, nil
		}
		return nil, nil
	}})
	if err != nil || def.Model != own {
		t.Fatalf("Definition = %v, %v; want the worker's own client for openai", def.Model, err)
	}
	cfg.Definition.Model = workerconfig.Model{Provider: "scripted", Name: "demo"}
	if def, err = Definition(cfg, Options{Model: func(workerconfig.Model) (agent.ModelClient, error) { return nil, nil }}); err != nil || def.Model == nil {
		t.Fatalf("Definition = %v, %v; want the built-in demo when the hook declines", def.Model, err)
	}
	_, err = Definition(cfg, Options{Model: func(workerconfig.Model) (agent.ModelClient, error) { return nil, errors.New("no key") }})
	if err == nil || !strings.Contains(err.Error(), "definition.model: no key") {
		t.Errorf("Definition with a failing hook = %v", err)
	}
}

func TestAnOpenAICompatibleModelTalksToItsBaseURLWithTheKeyFromTheEnvironment(t *testing.T) {
	var auth string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		auth = r.Header.Get("Authorization")
		w.Header().Set("Content-Type", "text/event-stream")
		_, _ = w.Write([]byte("data: {\"id\":\"c\",\"object\":\"chat.completion.chunk\",\"created\":1,\"model\":\"m\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"hi\"},\"finish_reason\":\"stop\"}]}\n\ndata: [DONE]\n\n"))
	}))
	defer srv.Close()
	t.Setenv("STEPWISE_SECRET_TESTKEY", "sk-from-env")
	m := workerconfig.Model{Provider: "openai-compatible", Name: "qwen3", BaseURL: srv.URL + "/v1",
		APIKey: &workerconfig.SecretEnv{Env: "STEPWISE_SECRET_TESTKEY", Secret: "vllm", Key: "api-key"}}
	client, err := Model(m, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := client.CallModel(context.Background(), agent.ModelRequest{Input: []agent.Message{{Role: agent.RoleUser, Text: "hello"}}}, nil)
	if err != nil || resp.Text() != "hi" || auth != "Bearer sk-from-env" {
		t.Fatalf("CallModel = %q, %v; Authorization %q", resp.Text(), err, auth)
	}
	m.BaseURL = ""
	if _, err := Model(m, nil); err == nil || !strings.Contains(err.Error(), "definition.model.baseURL") {
		t.Errorf("Model without a base URL = %v", err)
	}
	m.BaseURL, m.APIKey.Env = srv.URL+"/v1", "STEPWISE_SECRET_MISSING"
	client, _ = Model(m, nil)
	_, err = client.CallModel(context.Background(), agent.ModelRequest{Input: []agent.Message{{Role: agent.RoleUser, Text: "hello"}}}, nil)
	if err == nil || !strings.Contains(err.Error(), "definition.model.apiKey") || !strings.Contains(err.Error(), "Secret vllm key api-key") {
		t.Errorf("CallModel without the key's variable = %v", err)
	}
}

func TestAnOpenAIModelUsesTheResponsesAPI(t *testing.T) {
	var path, auth string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		path, auth = r.URL.Path, r.Header.Get("Authorization")
		w.Header().Set("Content-Type", "text/event-stream")
		_, _ = w.Write([]byte(`data: {"type":"response.output_item.done","output_index":0,"sequence_number":1,"item":{"id":"m","type":"message","role":"assistant","content":[{"type":"output_text","text":"hi"}]}}` + "\n\n" +
			`data: {"type":"response.completed","sequence_number":2,"response":{"id":"r","status":"completed","model":"gpt","output":[],"usage":{"input_tokens":1,"output_tokens":1,"total_tokens":2}}}` + "\n\n"))
	}))
	defer srv.Close()
	t.Setenv("STEPWISE_SECRET_OPENAI", "sk-openai")
	client, err := Model(workerconfig.Model{Provider: "openai", Name: "gpt-5-mini", BaseURL: srv.URL + "/v1",
		APIKey: &workerconfig.SecretEnv{Env: "STEPWISE_SECRET_OPENAI", Secret: "openai", Key: "api-key"}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := client.CallModel(context.Background(), agent.ModelRequest{Input: []agent.Message{{Role: agent.RoleUser, Text: "hello"}}}, nil)
	if err != nil || resp.Text() != "hi" || path != "/v1/responses" || auth != "Bearer sk-openai" {
		t.Fatalf("CallModel = %q, %v; %s with %q", resp.Text(), err, path, auth)
	}
}

func TestAnAnthropicModelUsesTheMessagesAPI(t *testing.T) {
	var path, key string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		path, key = r.URL.Path, r.Header.Get("X-Api-Key")+r.Header.Get("Authorization")
		w.Header().Set("Content-Type", "text/event-stream")
		for _, e := range []string{
			`{"type":"message_start","message":{"id":"m","type":"message","role":"assistant","model":"claude","content":[],"usage":{"input_tokens":1,"output_tokens":1}}}`,
			`{"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}`,
			`{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"hi"}}`,
			`{"type":"content_block_stop","index":0}`,
			`{"type":"message_delta","delta":{"stop_reason":"end_turn"},"usage":{"output_tokens":1}}`,
			`{"type":"message_stop"}`,
		} {
			var typed struct {
				Type string `json:"type"`
			}
			_ = json.Unmarshal([]byte(e), &typed)
			_, _ = w.Write([]byte("event: " + typed.Type + "\ndata: " + e + "\n\n"))
		}
	}))
	defer srv.Close()
	t.Setenv("STEPWISE_SECRET_ANTHROPIC", "sk-ant-env")
	client, err := Model(workerconfig.Model{Provider: "anthropic", Name: "claude-sonnet-5", BaseURL: srv.URL,
		APIKey: &workerconfig.SecretEnv{Env: "STEPWISE_SECRET_ANTHROPIC", Secret: "anthropic", Key: "api-key"}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := client.CallModel(context.Background(), agent.ModelRequest{Input: []agent.Message{{Role: agent.RoleUser, Text: "hello"}}}, nil)
	if err != nil || resp.Text() != "hi" || path != "/v1/messages" || !strings.Contains(key, "sk-ant-env") {
		t.Fatalf("CallModel = %q, %v; %s with %q", resp.Text(), err, path, key)
	}
}
