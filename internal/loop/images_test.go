package loop

import (
	"bytes"
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stepwise-run/stepwise/internal/media"
	"github.com/stepwise-run/stepwise/internal/media/localstore"
	"github.com/stepwise-run/stepwise/internal/media/mediatest"
	"github.com/stepwise-run/stepwise/internal/session"
	"github.com/stepwise-run/stepwise/pkg/agent"
)

func testStore(t *testing.T) *localstore.Store {
	t.Helper()
	store, err := localstore.New(filepath.Join(t.TempDir(), "media"))
	if err != nil {
		t.Fatal(err)
	}
	return store
}

// screenshotTool uploads a PNG through the tool's media store and returns
// it with its text.
func screenshotTool(t *testing.T, png []byte) agent.Tool {
	t.Helper()
	tool, err := agent.NewTool("screenshot", "Take a screenshot.", agent.EffectRead,
		func(ctx context.Context, call agent.ToolContext, _ struct{}) (agent.ToolOutput, error) {
			if call.MediaStore == nil {
				return agent.ToolOutput{Output: "Took a screenshot.", Images: []agent.ImageReference{{Type: "image"}}}, nil
			}
			ref, err := call.MediaStore.PutImage(ctx, png)
			if err != nil {
				return agent.ToolOutput{}, err
			}
			return agent.ToolOutput{Output: "Took a screenshot.", Images: []agent.ImageReference{ref}}, nil
		})
	if err != nil {
		t.Fatal(err)
	}
	return tool
}

func TestFunctionToolsReturnImagesThroughTheStore(t *testing.T) {
	png := mediatest.PNG(4, 4, 1)
	store := testStore(t)
	r, err := New(agent.Definition{Name: "shots", Model: agent.NewScriptedModel(agent.DemoScript), Tools: []agent.Tool{screenshotTool(t, png)}},
		WithMediaStore(store))
	if err != nil {
		t.Fatal(err)
	}
	out, err := r.ExecuteToolCall(context.Background(), execution("screenshot", "{}", agent.EffectRead))
	if err != nil || out.Kind != session.ToolResultSucceeded || len(out.Images) != 1 {
		t.Fatalf("ExecuteToolCall = %+v, %v", out, err)
	}
	if got, err := store.GetImage(context.Background(), media.Reference(out.Images[0])); err != nil || !bytes.Equal(got, png) {
		t.Errorf("the stored image: %v", err)
	}

	// Without a store the tool sees none, and images it returns anyway
	// fail the call once: no retry could show them.
	plain := newRunner(t, agent.Definition{Tools: []agent.Tool{screenshotTool(t, png)}})
	out, err = plain.ExecuteToolCall(context.Background(), execution("screenshot", "{}", agent.EffectRead))
	if err != nil || out.Kind != session.ToolResultFailed || out.Error != noImagesText {
		t.Errorf("without a store: %+v, %v", out, err)
	}

	// A reference of another store fails the attempt, which retries.
	other := testStore(t)
	foreign, err := other.PutImage(context.Background(), png)
	if err != nil {
		t.Fatal(err)
	}
	tool, err := agent.NewTool("foreign", "Return another store's image.", agent.EffectRead,
		func(context.Context, agent.ToolContext, struct{}) (agent.ToolOutput, error) {
			return agent.ToolOutput{Output: "x", Images: []agent.ImageReference{agent.ImageReference(foreign)}}, nil
		})
	if err != nil {
		t.Fatal(err)
	}
	r, err = New(agent.Definition{Name: "foreign", Model: agent.NewScriptedModel(agent.DemoScript), Tools: []agent.Tool{tool}}, WithMediaStore(store))
	if err != nil {
		t.Fatal(err)
	}
	if out, err := r.ExecuteToolCall(context.Background(), execution("foreign", "{}", agent.EffectRead)); !errors.Is(err, media.ErrStore) {
		t.Errorf("a reference of another store: %+v, %v", out, err)
	}
}

func TestModelCallsCarryTheBytesOfEveryImage(t *testing.T) {
	ctx := context.Background()
	store := testStore(t)
	png, gif := mediatest.PNG(3, 3, 2), mediatest.GIF(3, 3, 2)
	pngRef, err := store.PutImage(ctx, png)
	if err != nil {
		t.Fatal(err)
	}
	gifRef, err := store.PutImage(ctx, gif)
	if err != nil {
		t.Fatal(err)
	}
	var got []agent.ModelRequest
	model := agent.NewScriptedModel(func(req agent.ModelRequest) (agent.ScriptedReply, error) {
		got = append(got, req)
		return agent.ScriptedReply{Text: "a chart"}, nil
	})
	turn := userTurn("what is this?")
	turn.Messages[0].Images = []session.ImageReference{session.ImageReference(pngRef)}
	turn.Messages = append(turn.Messages,
		session.Message{Sequence: 2, TurnID: "turn-1", Role: session.RoleAssistant, ToolCalls: []session.ToolCall{{ID: "c1", Name: "shot", Arguments: "{}"}}},
		session.Message{Sequence: 3, TurnID: "turn-1", Role: session.RoleTool, ToolCallID: "c1", ToolName: "shot", Text: "[image 1]",
			Images: []session.ImageReference{session.ImageReference(gifRef), session.ImageReference(pngRef)}})

	r, err := New(agent.Definition{Name: "eyes", Model: model}, WithMediaStore(store))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.RunModelStep(ctx, turn); err != nil {
		t.Fatal(err)
	}
	req := got[0]
	if len(req.Images) != 2 || !bytes.Equal(req.Images[pngRef.SHA256], png) || !bytes.Equal(req.Images[gifRef.SHA256], gif) {
		t.Errorf("request images: %d", len(req.Images))
	}
	if len(req.Input[0].Images) != 1 || len(req.Input[2].Images) != 2 {
		t.Errorf("request messages carry %d and %d references", len(req.Input[0].Images), len(req.Input[2].Images))
	}

	// Without a store the model sees the text only.
	plain := newRunner(t, agent.Definition{Model: model})
	if _, err := plain.RunModelStep(ctx, turn); err != nil {
		t.Fatal(err)
	}
	if req := got[1]; req.Images != nil || req.Input[0].Images != nil || req.Input[2].Images != nil {
		t.Errorf("a runner without a store sent references")
	}

	// A summary call reads the text without the images.
	compacting, err := New(agent.Definition{Name: "eyes", Model: model, Compaction: &agent.CompactionPolicy{ContextWindowTokens: 100000}}, WithMediaStore(store))
	if err != nil {
		t.Fatal(err)
	}
	turn.CompactThrough = 3
	if _, err := compacting.SummarizeContext(ctx, turn); err != nil {
		t.Fatal(err)
	}
	for _, m := range got[2].Input {
		if m.Images != nil {
			t.Errorf("the summary call sent images with %q", m.Text)
		}
	}

	// An image gone from the store fails the attempt with the store's
	// error, naming the image; nothing is sent.
	missing, err := media.BuildReference(mediatest.JPEG(2, 2, 9), store.StoreURI())
	if err != nil {
		t.Fatal(err)
	}
	turn.Messages[0].Images = append(turn.Messages[0].Images, session.ImageReference(missing))
	_, err = r.RunModelStep(ctx, turn)
	if !errors.Is(err, media.ErrStore) || !strings.Contains(err.Error(), missing.URI) || !strings.Contains(err.Error(), "does not exist") {
		t.Errorf("a missing image: %v", err)
	}
	if len(got) != 3 {
		t.Errorf("%d model calls, want 3", len(got))
	}
}
