package enginetest

import (
	"context"
	"fmt"
	"math"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	agentsv1 "github.com/stepwise-run/stepwise/api/v1alpha1"
	"github.com/stepwise-run/stepwise/pkg/client"
)

// misreportingProvider speaks the OpenAI Responses wire format and reports
// the usage it is given, call by call, under a model name of its choosing.
type misreportingProvider struct {
	model string
	mu    sync.Mutex
	usage [][2]int64
	calls int
}

func (p *misreportingProvider) serve(w http.ResponseWriter, _ *http.Request) {
	p.mu.Lock()
	used := p.usage[min(p.calls, len(p.usage)-1)]
	p.calls++
	n := p.calls
	p.mu.Unlock()
	w.Header().Set("Content-Type", "text/event-stream")
	item := fmt.Sprintf(`{"id":"msg_%d","type":"message","role":"assistant","content":[{"type":"output_text","text":"answer %d"}]}`, n, n)
	for _, e := range []string{
		`{"type":"response.output_item.done","output_index":0,"item":` + item + `}`,
		fmt.Sprintf(`{"type":"response.completed","response":{"id":"resp","status":"completed","model":%q,"output":[],"usage":{"input_tokens":%d,"output_tokens":%d,"total_tokens":0}}}`,
			p.model, used[0], used[1]),
	} {
		fmt.Fprintf(w, "event: %s\ndata: %s\n\n", strings.Split(strings.TrimPrefix(e, `{"type":"`), `"`)[0], e)
	}
}

// TestAProviderMisreportingUsageNeitherLowersNorWrapsTheSpend runs the
// stock worker against a provider that reports negative usage, then usage
// so large that a sum wraps, under the name of a free model: the session
// and the Agent's counter never go down or negative, the call is priced as
// the model the Agent asked for, and the next turn is refused.
func TestAProviderMisreportingUsageNeitherLowersNorWrapsTheSpend(t *testing.T) {
	provider := &misreportingProvider{model: "free-model", usage: [][2]int64{{-5_000_000, 3}, {math.MaxInt64, math.MaxInt64}}}
	srv := httptest.NewServer(http.HandlerFunc(provider.serve))
	defer srv.Close()
	s := NewStack(t, "MisreportedUsage")
	tokens, cost, window := int64(1_000_000), "1000", metav1.Duration{Duration: 24 * time.Hour}
	renderedConfig(t, s, agentsv1.ModelProviderOpenAI, srv.URL+"/v1", func(a *agentsv1.Agent) {
		a.Spec.SpendLimit = &agentsv1.SpendLimitSpec{
			Window: &window,
			Agent:  &agentsv1.AgentBudget{Tokens: &tokens, Cost: &cost},
			Prices: []agentsv1.ModelPrice{
				{Model: "model-x", InputPerMillion: "1000", OutputPerMillion: "2000"},
				{Model: "free-model", InputPerMillion: "0", OutputPerMillion: "0"},
			},
		}
	})
	s.StartWorker()
	sessions := client.New(s.Client, s.Agent())
	ctx := context.Background()

	if ok, err := sessions.Start(ctx, "s1", "hello"); !ok || err != nil {
		t.Fatalf("Start = %v, %v", ok, err)
	}
	snap := endedTurn(t, sessions, "s1", 1)
	if snap.State.LastTurnError != "" || snap.Usage.InputTokens != 0 || snap.Usage.OutputTokens != 3 {
		t.Fatalf("after negative input tokens the session holds %+v (%q), want 0 input and 3 output", snap.Usage, snap.State.LastTurnError)
	}
	// Three output tokens at 2000 per million, the price of the model the
	// Agent asked for, are 0.006: 6000 millionths, not the free model's 0.
	if c := counterOf(t, s); c.Spent.Tokens != 3 || c.Spent.MicroCost != 6000 {
		t.Errorf("after the first call the counter holds %+v, want 3 tokens costing 6000 millionths", c.Spent)
	}

	if ok, err := sessions.Send(ctx, "s1", "again"); !ok || err != nil {
		t.Fatalf("Send = %v, %v", ok, err)
	}
	snap = endedTurn(t, sessions, "s1", 2)
	if snap.Usage.InputTokens != math.MaxInt64 || snap.Usage.OutputTokens != math.MaxInt64 {
		t.Errorf("after the largest usage the session holds %+v, want every count at the largest int64", snap.Usage)
	}
	if c := counterOf(t, s); c.Spent.Tokens != math.MaxInt64 || c.Spent.MicroCost <= 0 {
		t.Errorf("after the largest usage the counter holds %+v, want the largest int64 tokens and a positive cost", c.Spent)
	}

	if ok, err := sessions.Send(ctx, "s1", "and again"); !ok || err != nil {
		t.Fatalf("Send = %v, %v", ok, err)
	}
	snap = endedTurn(t, sessions, "s1", 3)
	if !strings.HasPrefix(snap.State.LastTurnError, "spend limit reached") || provider.calls != 2 {
		t.Errorf("the third turn ended with %q after %d provider calls, want a spend limit and 2 calls", snap.State.LastTurnError, provider.calls)
	}
}
