package agent_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/stepwise-run/stepwise/pkg/agent"
)

type recordedDeltas struct {
	text, reasoning []string
}

func (r *recordedDeltas) TextDelta(text string)      { r.text = append(r.text, text) }
func (r *recordedDeltas) ReasoningDelta(text string) { r.reasoning = append(r.reasoning, text) }

func userMessage(text string) agent.Message {
	return agent.Message{Role: agent.RoleUser, Text: text}
}

func assistantCalls(calls ...agent.ToolCall) agent.Message {
	return agent.Message{Role: agent.RoleAssistant, ToolCalls: calls}
}

func toolMessage(id, name, text string) agent.Message {
	return agent.Message{Role: agent.RoleTool, ToolCallID: id, ToolName: name, Text: text}
}

func TestScriptedModelAnswersFromTheScript(t *testing.T) {
	model := agent.NewScriptedModel(func(agent.ModelRequest) (agent.ScriptedReply, error) {
		return agent.ScriptedReply{
			Reasoning: "thinking",
			Text:      "Looking it up.",
			ToolCalls: []agent.ScriptedToolCall{
				{Name: "lookup", Arguments: map[string]any{"id": "o1"}},
				{ID: "given", Name: "raw", Arguments: `{"kept":"as sent" }`},
				{Name: "empty", Arguments: struct{}{}},
			},
		}, nil
	})
	req := agent.ModelRequest{Instructions: "Be brief.", Input: []agent.Message{userMessage("hello"), {Role: agent.RoleAssistant, Text: "hi"}, userMessage("find o1")}}
	var deltas recordedDeltas
	resp, err := model.CallModel(context.Background(), req, &deltas)
	if err != nil {
		t.Fatalf("CallModel: %v", err)
	}

	if !slices.Equal(deltas.text, []string{"Looking it up."}) || !slices.Equal(deltas.reasoning, []string{"thinking"}) {
		t.Errorf("deltas text=%v reasoning=%v", deltas.text, deltas.reasoning)
	}
	wantTypes := []agent.OutputItemType{agent.OutputReasoning, agent.OutputText, agent.OutputToolCall, agent.OutputToolCall, agent.OutputToolCall}
	var gotTypes []agent.OutputItemType
	for _, item := range resp.Output {
		gotTypes = append(gotTypes, item.Type)
		if item.Provider != agent.ScriptedProvider || item.API != agent.ScriptedProvider {
			t.Errorf("item provider/api = %q/%q", item.Provider, item.API)
		}
		if !json.Valid(item.Item) {
			t.Errorf("item JSON %q is not valid", item.Item)
		}
	}
	if !slices.Equal(gotTypes, wantTypes) {
		t.Errorf("output types = %v, want %v", gotTypes, wantTypes)
	}
	if resp.Text() != "Looking it up." {
		t.Errorf("Text() = %q", resp.Text())
	}
	wantCalls := []agent.ToolCall{
		{ID: "call_3_1", Name: "lookup", Arguments: `{"id":"o1"}`},
		{ID: "given", Name: "raw", Arguments: `{"kept":"as sent" }`},
		{ID: "call_3_3", Name: "empty", Arguments: `{}`},
	}
	if got := resp.ToolCalls(); !slices.Equal(got, wantCalls) {
		t.Errorf("ToolCalls() = %+v, want %+v", got, wantCalls)
	}

	wantUsage := agent.Usage{ModelCalls: 1, InputTokens: agent.EstimateTokens(req), OutputTokens: int64(len("Looking it up.")+len("thinking")+3) / 4}
	if resp.Usage != wantUsage {
		t.Errorf("Usage = %+v, want %+v", resp.Usage, wantUsage)
	}
	if resp.Usage.InputTokens == 0 {
		t.Error("input tokens not counted")
	}
	if resp.Metadata.Provider != agent.ScriptedProvider || len(resp.Metadata.FinishReasons) == 0 {
		t.Errorf("Metadata = %+v", resp.Metadata)
	}
}

func TestScriptedModelToolCallIDsAreDeterministic(t *testing.T) {
	script := func(agent.ModelRequest) (agent.ScriptedReply, error) {
		return agent.ScriptedReply{ToolCalls: []agent.ScriptedToolCall{{Name: "a", Arguments: "{}"}, {Name: "b", Arguments: "{}"}}}, nil
	}
	short := agent.ModelRequest{Input: []agent.Message{userMessage("x")}}
	longer := agent.ModelRequest{Input: []agent.Message{userMessage("x"), assistantCalls(agent.ToolCall{ID: "call_1_1", Name: "a"}), toolMessage("call_1_1", "a", "r")}}
	ids := func(req agent.ModelRequest) []string {
		resp, err := agent.NewScriptedModel(script).CallModel(context.Background(), req, &recordedDeltas{})
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, c := range resp.ToolCalls() {
			out = append(out, c.ID)
		}
		return out
	}
	first, again := ids(short), ids(short)
	if !slices.Equal(first, again) {
		t.Errorf("the same request gave IDs %v and %v", first, again)
	}
	if !slices.Equal(first, []string{"call_1_1", "call_1_2"}) {
		t.Errorf("IDs = %v", first)
	}
	if later := ids(longer); !slices.Equal(later, []string{"call_3_1", "call_3_2"}) {
		t.Errorf("IDs of a later model call in the turn = %v, want ones that differ from the first call's", later)
	}
}

func TestScriptedModelWritesNoDeltasForEmptyParts(t *testing.T) {
	model := agent.NewScriptedModel(func(agent.ModelRequest) (agent.ScriptedReply, error) {
		return agent.ScriptedReply{ToolCalls: []agent.ScriptedToolCall{{Name: "a", Arguments: "{}"}}}, nil
	})
	var deltas recordedDeltas
	resp, err := model.CallModel(context.Background(), agent.ModelRequest{}, &deltas)
	if err != nil {
		t.Fatal(err)
	}
	if len(deltas.text) != 0 || len(deltas.reasoning) != 0 {
		t.Errorf("deltas written for an empty text and reasoning: %+v", deltas)
	}
	if len(resp.Output) != 1 || resp.Usage.OutputTokens != 0 {
		t.Errorf("output = %+v usage = %+v", resp.Output, resp.Usage)
	}
}

func TestScriptedModelErrors(t *testing.T) {
	boom := errors.New("script failed")
	failing := agent.NewScriptedModel(func(agent.ModelRequest) (agent.ScriptedReply, error) { return agent.ScriptedReply{}, boom })
	if _, err := failing.CallModel(context.Background(), agent.ModelRequest{}, &recordedDeltas{}); !errors.Is(err, boom) {
		t.Errorf("script error = %v, want %v", err, boom)
	}

	unencodable := agent.NewScriptedModel(func(agent.ModelRequest) (agent.ScriptedReply, error) {
		return agent.ScriptedReply{ToolCalls: []agent.ScriptedToolCall{{Name: "bad", Arguments: make(chan int)}}}, nil
	})
	if _, err := unencodable.CallModel(context.Background(), agent.ModelRequest{}, &recordedDeltas{}); err == nil {
		t.Error("arguments that cannot be encoded were accepted")
	}

	called := false
	cancelled := agent.NewScriptedModel(func(agent.ModelRequest) (agent.ScriptedReply, error) {
		called = true
		return agent.ScriptedReply{Text: "x"}, nil
	})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := cancelled.CallModel(ctx, agent.ModelRequest{}, &recordedDeltas{}); !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled call error = %v", err)
	}
	if called || len(cancelled.Requests()) != 0 {
		t.Error("a cancelled call ran the script or was recorded")
	}
}

func TestScriptedModelKeepsTheLatest100Requests(t *testing.T) {
	model := agent.NewScriptedModel(func(agent.ModelRequest) (agent.ScriptedReply, error) { return agent.ScriptedReply{Text: "ok"}, nil })
	for i := 1; i <= 105; i++ {
		req := agent.ModelRequest{Instructions: fmt.Sprintf("request %d", i)}
		if _, err := model.CallModel(context.Background(), req, &recordedDeltas{}); err != nil {
			t.Fatal(err)
		}
		if got := len(model.Requests()); got != min(i, 100) {
			t.Fatalf("after %d calls Requests() has %d", i, got)
		}
	}
	reqs := model.Requests()
	if reqs[0].Instructions != "request 6" || reqs[99].Instructions != "request 105" {
		t.Errorf("kept %q .. %q, want request 6 .. request 105", reqs[0].Instructions, reqs[99].Instructions)
	}
	reqs[0].Instructions = "changed"
	if model.Requests()[0].Instructions != "request 6" {
		t.Error("Requests() returned the model's own slice")
	}
}

func TestScriptedModelEstimatesInputTokens(t *testing.T) {
	model := agent.NewScriptedModel(agent.DemoScript)
	req := agent.ModelRequest{Instructions: "12345678"}
	if got := model.EstimateInputTokens(req); got != 2 {
		t.Errorf("EstimateInputTokens = %d, want 2", got)
	}
}

func TestEstimateTokens(t *testing.T) {
	cases := []struct {
		name string
		req  agent.ModelRequest
		want int64
	}{
		{"empty", agent.ModelRequest{}, 0},
		{"one byte rounds up", agent.ModelRequest{Instructions: "a"}, 1},
		{"four bytes", agent.ModelRequest{Instructions: "abcd"}, 1},
		{"five bytes", agent.ModelRequest{Instructions: "abcde"}, 2},
		{"everything the request sends counts", agent.ModelRequest{
			Instructions: "ins", // 3
			Input: []agent.Message{{Role: agent.RoleUser, Text: "hello"}, // 5
				assistantCalls(agent.ToolCall{ID: "ignored", Name: "ab", Arguments: "{}"}), // 4
			},
			Tools: []agent.ToolDefinition{{Name: "ab", Description: "cd", Parameters: json.RawMessage(`{}`)}}, // 6
		}, (3 + 5 + 4 + 6 + 3) / 4},
		{"multi-byte text counts bytes", agent.ModelRequest{Instructions: "日本"}, (6 + 3) / 4},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := agent.EstimateTokens(c.req); got != c.want {
				t.Errorf("EstimateTokens = %d, want %d", got, c.want)
			}
		})
	}
}

func TestUserTexts(t *testing.T) {
	req := agent.ModelRequest{Input: []agent.Message{
		userMessage("first"),
		{Role: agent.RoleAssistant, Text: "answer"},
		userMessage("second"),
		assistantCalls(agent.ToolCall{ID: "c1", Name: "a"}),
		toolMessage("c1", "a", "result"),
	}}
	if got := agent.UserTexts(req); !slices.Equal(got, []string{"first", "second"}) {
		t.Errorf("UserTexts = %v", got)
	}
	if got := agent.UserTexts(agent.ModelRequest{}); len(got) != 0 {
		t.Errorf("UserTexts of an empty request = %v", got)
	}
}

func TestToolResults(t *testing.T) {
	r := func(id, name, out string) agent.ToolResult {
		return agent.ToolResult{ToolCallID: id, ToolName: name, Output: out}
	}
	cases := []struct {
		name  string
		input []agent.Message
		want  []agent.ToolResult
	}{
		{"no messages", nil, nil},
		{"only a user message", []agent.Message{userMessage("hi")}, nil},
		{"results after the last user message", []agent.Message{
			userMessage("hi"),
			assistantCalls(agent.ToolCall{ID: "c1", Name: "a"}, agent.ToolCall{ID: "c2", Name: "b"}),
			toolMessage("c1", "a", "ra"), toolMessage("c2", "b", "rb"),
		}, []agent.ToolResult{r("c1", "a", "ra"), r("c2", "b", "rb")}},
		{"results of an earlier turn are answered", []agent.Message{
			userMessage("hi"),
			assistantCalls(agent.ToolCall{ID: "c1", Name: "a"}),
			toolMessage("c1", "a", "ra"),
			{Role: agent.RoleAssistant, Text: "done"},
			userMessage("again"),
		}, nil},
		{"an answer without tools ends the results", []agent.Message{
			userMessage("hi"),
			assistantCalls(agent.ToolCall{ID: "c1", Name: "a"}),
			toolMessage("c1", "a", "ra"),
			{Role: agent.RoleAssistant, Text: "done"},
		}, nil},
		{"results of every model call since the user message", []agent.Message{
			userMessage("hi"),
			assistantCalls(agent.ToolCall{ID: "c1", Name: "a"}),
			toolMessage("c1", "a", "ra"),
			assistantCalls(agent.ToolCall{ID: "c2", Name: "b"}),
			toolMessage("c2", "b", "rb"),
		}, []agent.ToolResult{r("c1", "a", "ra"), r("c2", "b", "rb")}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got := agent.ToolResults(agent.ModelRequest{Input: c.input})
			if !slices.Equal(got, c.want) {
				t.Errorf("ToolResults = %+v, want %+v", got, c.want)
			}
		})
	}
}

func TestDemoScript(t *testing.T) {
	lookup := agent.ToolDefinition{Name: "lookup", Parameters: json.RawMessage(`{"type":"object"}`)}
	cases := []struct {
		name      string
		req       agent.ModelRequest
		wantText  string
		wantCalls []agent.ScriptedToolCall
	}{
		{name: "no user message",
			req:      agent.ModelRequest{},
			wantText: "Demo reply: (no message)"},
		{name: "echoes the last user message trimmed",
			req:      agent.ModelRequest{Input: []agent.Message{userMessage("first"), {Role: agent.RoleAssistant, Text: "x"}, userMessage("  second  ")}},
			wantText: "Demo reply: second"},
		{name: "calls an offered tool with its arguments",
			req:       agent.ModelRequest{Input: []agent.Message{userMessage(`call lookup {"id":"o1"}`)}, Tools: []agent.ToolDefinition{lookup}},
			wantCalls: []agent.ScriptedToolCall{{Name: "lookup", Arguments: `{"id":"o1"}`}}},
		{name: "calls an offered tool without arguments with an empty object",
			req:       agent.ModelRequest{Input: []agent.Message{userMessage("call lookup")}, Tools: []agent.ToolDefinition{lookup}},
			wantCalls: []agent.ScriptedToolCall{{Name: "lookup", Arguments: `{}`}}},
		{name: "echoes a call of a tool that is not offered",
			req:      agent.ModelRequest{Input: []agent.Message{userMessage(`call refund {"id":"o1"}`)}, Tools: []agent.ToolDefinition{lookup}},
			wantText: `Demo reply: call refund {"id":"o1"}`},
		{name: "echoes a call when no tools are offered",
			req:      agent.ModelRequest{Input: []agent.Message{userMessage("call lookup {}")}},
			wantText: "Demo reply: call lookup {}"},
		{name: "summarizes tool results",
			req: agent.ModelRequest{Input: []agent.Message{
				userMessage("call lookup {}"),
				assistantCalls(agent.ToolCall{ID: "c1", Name: "lookup"}, agent.ToolCall{ID: "c2", Name: "refund"}),
				toolMessage("c1", "lookup", "found"), toolMessage("c2", "refund", "refunded"),
			}, Tools: []agent.ToolDefinition{lookup}},
			wantText: "Done. lookup: found; refund: refunded"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			reply, err := agent.DemoScript(c.req)
			if err != nil {
				t.Fatal(err)
			}
			if reply.Text != c.wantText {
				t.Errorf("Text = %q, want %q", reply.Text, c.wantText)
			}
			if len(reply.ToolCalls) != len(c.wantCalls) {
				t.Fatalf("ToolCalls = %+v, want %+v", reply.ToolCalls, c.wantCalls)
			}
			for i := range c.wantCalls {
				if reply.ToolCalls[i] != c.wantCalls[i] {
					t.Errorf("ToolCalls[%d] = %+v, want %+v", i, reply.ToolCalls[i], c.wantCalls[i])
				}
			}
		})
	}
}

func TestDemoScriptRunsThroughTheScriptedModel(t *testing.T) {
	model := agent.NewScriptedModel(agent.DemoScript)
	req := agent.ModelRequest{Input: []agent.Message{userMessage(`call lookup {"id": "o1"}`)}, Tools: []agent.ToolDefinition{{Name: "lookup"}}}
	resp, err := model.CallModel(context.Background(), req, &recordedDeltas{})
	if err != nil {
		t.Fatal(err)
	}
	want := []agent.ToolCall{{ID: "call_1_1", Name: "lookup", Arguments: `{"id": "o1"}`}}
	if got := resp.ToolCalls(); !slices.Equal(got, want) {
		t.Errorf("ToolCalls = %+v, want %+v (string arguments sent as is)", got, want)
	}
}

func TestModelResponseReadsItsOutput(t *testing.T) {
	call := agent.ToolCall{ID: "c", Name: "n", Arguments: "{}"}
	resp := agent.ModelResponse{Output: []agent.OutputItem{
		{Type: agent.OutputReasoning, Text: "hidden"},
		{Type: agent.OutputText, Text: "a"},
		{Type: agent.OutputToolCall, ToolCall: &call},
		{Type: agent.OutputToolCall},
		{Type: agent.OutputText, Text: "b"},
	}}
	if resp.Text() != "ab" {
		t.Errorf("Text() = %q, want the text items only", resp.Text())
	}
	if got := resp.ToolCalls(); !slices.Equal(got, []agent.ToolCall{call}) {
		t.Errorf("ToolCalls() = %+v", got)
	}
}

func TestUsageAdd(t *testing.T) {
	a := agent.Usage{ModelCalls: 1, InputTokens: 2, OutputTokens: 3, CachedInputTokens: 4, ReasoningTokens: 5}
	b := agent.Usage{ModelCalls: 10, InputTokens: 20, OutputTokens: 30, CachedInputTokens: 40, ReasoningTokens: 50}
	want := agent.Usage{ModelCalls: 11, InputTokens: 22, OutputTokens: 33, CachedInputTokens: 44, ReasoningTokens: 55}
	if got := a.Add(b); got != want {
		t.Errorf("Add = %+v, want %+v", got, want)
	}
}

func TestTheDemoScriptNamesTheImagesItWasShown(t *testing.T) {
	png, gif := []byte("png bytes"), []byte("gif bytes")
	pngSum, gifSum := sha256.Sum256(png), sha256.Sum256(gif)
	ref := func(sum [32]byte) agent.ImageReference {
		h := hex.EncodeToString(sum[:])
		return agent.ImageReference{Type: "image", URI: "s3://m/sha256/" + h, MIMEType: "image/png", SHA256: h, SizeBytes: 9}
	}
	req := agent.ModelRequest{
		Input:  []agent.Message{{Role: agent.RoleUser, Text: "look", Images: []agent.ImageReference{ref(pngSum), ref(gifSum)}}},
		Images: map[string][]byte{ref(pngSum).SHA256: png},
	}
	reply, err := agent.DemoScript(req)
	want := "Demo reply: look (images: " + hex.EncodeToString(pngSum[:6]) + ", missing)"
	if err != nil || reply.Text != want {
		t.Errorf("reply = %q, %v; want %q", reply.Text, err, want)
	}
	req.Input[0].Images = nil
	if reply, _ := agent.DemoScript(req); reply.Text != "Demo reply: look" {
		t.Errorf("without images: %q", reply.Text)
	}
}

func TestScriptedModelStreamsTextInChunks(t *testing.T) {
	model := agent.NewScriptedModel(func(agent.ModelRequest) (agent.ScriptedReply, error) {
		return agent.ScriptedReply{Text: "one two three", TextChunks: []string{"one ", "two ", "three"}}, nil
	})
	var deltas recordedDeltas
	resp, err := model.CallModel(context.Background(), agent.ModelRequest{}, &deltas)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(deltas.text, []string{"one ", "two ", "three"}) || len(resp.Output) != 1 || resp.Output[0].Text != "one two three" {
		t.Errorf("deltas = %q, output = %+v, want three deltas and one text item", deltas.text, resp.Output)
	}
	mismatched := agent.NewScriptedModel(func(agent.ModelRequest) (agent.ScriptedReply, error) {
		return agent.ScriptedReply{Text: "one two", TextChunks: []string{"one"}}, nil
	})
	if _, err := mismatched.CallModel(context.Background(), agent.ModelRequest{}, &recordedDeltas{}); err == nil {
		t.Error("chunks that do not join to the text were accepted")
	}
	slow := agent.NewScriptedModel(func(agent.ModelRequest) (agent.ScriptedReply, error) {
		return agent.ScriptedReply{Text: "ab", TextChunks: []string{"a", "b"}, ChunkDelay: time.Hour}, nil
	})
	ctx, cancel := context.WithCancel(context.Background())
	var slowDeltas recordedDeltas
	done := make(chan error)
	go func() { _, err := slow.CallModel(ctx, agent.ModelRequest{}, &slowDeltas); done <- err }()
	time.Sleep(50 * time.Millisecond)
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) || !slices.Equal(slowDeltas.text, []string{"a"}) {
		t.Errorf("a call cancelled between chunks = %v with deltas %q", err, slowDeltas.text)
	}
}
