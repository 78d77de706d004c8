package mcp

import (
	"bytes"
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stepwise-run/stepwise/internal/media"
	"github.com/stepwise-run/stepwise/internal/media/localstore"
	"github.com/stepwise-run/stepwise/internal/media/mediatest"
	"github.com/stepwise-run/stepwise/internal/tools/mcp/mcptest"
	"github.com/stepwise-run/stepwise/pkg/agent"
)

func TestResultImagesAreUploadedWhenTheSourceHasAStore(t *testing.T) {
	ledger := mcptest.NewLedger(t)
	store, err := localstore.New(filepath.Join(t.TempDir(), "media"))
	if err != nil {
		t.Fatal(err)
	}
	src, err := NewSource(SourceOptions{Name: "ledger", Log: quiet(), MediaStore: store, Servers: []Server{{
		Name: "ledger", TrustAnnotations: true, ConnectionTimeout: 5 * time.Second, RequestTimeout: 10 * time.Second,
		Connect: HTTPConnect(ledger.URL, nil),
	}}})
	if err != nil {
		t.Fatal(err)
	}
	tools := listed(t, src, agent.SourcePolicies{})
	callWith := func(name, args string) (agent.ToolOutput, error) {
		return src.CallTool(context.Background(), agent.ToolContext{ToolCallID: "c1", IdempotencyKey: "s1/turn-1/c1"},
			agent.SourceCall{Name: name, Reference: tools[name].Reference, Arguments: args})
	}

	out, err := callWith("ledger__gallery", `{"amount":2}`)
	if err != nil || out.Output != "charts\n[image 1]\n[image 2]\nend" || len(out.Images) != 2 {
		t.Fatalf("gallery of 2 = %+v, %v", out, err)
	}
	for i, ref := range out.Images {
		got, err := store.GetImage(context.Background(), media.Reference(ref))
		if err != nil || !bytes.Equal(got, mediatest.PNG(2, 2, byte(i))) {
			t.Errorf("image %d in the store: %v", i+1, err)
		}
	}
	// The same call again uploads the same objects.
	again, err := callWith("ledger__gallery", `{"amount":2}`)
	if err != nil || again.Images[0] != out.Images[0] || again.Images[1] != out.Images[1] {
		t.Errorf("a repeated call: %+v, %v", again, err)
	}

	if _, err := callWith("ledger__gallery", `{"amount":21}`); !isFailure(err, "21 images, more than the 20") {
		t.Errorf("gallery of 21: %v", err)
	}
	// The statement's image bytes are not a PNG: the call fails, since the
	// server would send the same again.
	if _, err := callWith("ledger__statement", `{}`); !isFailure(err, "image 1 of the result (image/png)") {
		t.Errorf("statement with bytes that are no image: %v", err)
	}
}

func isFailure(err error, text string) bool {
	e, ok := agent.IsExecutionError(err)
	return ok && strings.Contains(e.Message, text) && !errors.Is(err, media.ErrStore)
}
