package workerconfig

import (
	"fmt"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// SpendLimit is an Agent's budget. Costs are in millionths of the currency
// the prices are in, so every sum is exact.
type SpendLimit struct {
	// Window is how long each budget window of the Agent lasts.
	Window metav1.Duration `json:"window"`
	// AgentTokens and AgentMicroCost bound what all the Agent's sessions
	// spend in one window; zero is no bound.
	AgentTokens    int64 `json:"agentTokens,omitempty"`
	AgentMicroCost int64 `json:"agentMicroCost,omitempty"`
	// SessionTokens bounds what one session spends over its life; zero is
	// no bound.
	SessionTokens int64 `json:"sessionTokens,omitempty"`
	// Prices are per model name.
	Prices []ModelPrice `json:"prices,omitempty"`
}

// ModelPrice is what one model charges per million tokens.
type ModelPrice struct {
	Model                      string `json:"model"`
	InputMicroPerMillion       int64  `json:"inputMicroPerMillion"`
	CachedInputMicroPerMillion int64  `json:"cachedInputMicroPerMillion,omitempty"`
	OutputMicroPerMillion      int64  `json:"outputMicroPerMillion"`
}

// problems says what keeps a spend limit from being kept: a cost bound
// needs a price for every model the Agent may call.
func (l *SpendLimit) problems(d Definition) []string {
	if l == nil {
		return nil
	}
	var out []string
	if l.Window.Duration < time.Minute {
		out = append(out, fmt.Sprintf("spendLimit.window must be at least one minute, not %s", l.Window.Duration))
	}
	if l.AgentTokens < 0 || l.AgentMicroCost < 0 || l.SessionTokens < 0 {
		out = append(out, "spendLimit bounds must not be negative")
	}
	priced := map[string]bool{}
	for i, p := range l.Prices {
		if p.Model == "" || priced[p.Model] {
			out = append(out, fmt.Sprintf("spendLimit.prices[%d].model must name a model once", i))
		}
		if p.InputMicroPerMillion < 0 || p.CachedInputMicroPerMillion < 0 || p.OutputMicroPerMillion < 0 {
			out = append(out, fmt.Sprintf("spendLimit.prices[%d] must not be negative", i))
		}
		priced[p.Model] = true
	}
	if l.AgentMicroCost > 0 {
		models := []Model{d.Model}
		for _, mc := range d.ModelChoices {
			models = append(models, mc.Model)
		}
		for _, m := range models {
			if !priced[m.Name] {
				out = append(out, fmt.Sprintf("spendLimit.prices has no price for model %q, which a cost bound needs", m.Name))
				priced[m.Name] = true
			}
		}
	}
	return out
}
