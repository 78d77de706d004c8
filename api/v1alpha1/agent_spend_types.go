package v1alpha1

import (
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// SpendLimitSpec is an Agent's budget.
//
// +kubebuilder:validation:XValidation:rule="has(self.agent) || has(self.session)",message="a spendLimit needs an agent or a session budget"
// +kubebuilder:validation:XValidation:rule="!has(self.agent) || !has(self.agent.cost) || (has(self.prices) && size(self.prices) > 0)",message="a cost budget needs prices",fieldPath=".prices"
type SpendLimitSpec struct {
	// Window is how long each window of the agent budget lasts. Windows
	// start at whole multiples of it since 1970-01-01T00:00:00Z, so a 24h
	// window starts at midnight UTC and every worker agrees on it.
	// +optional
	// +kubebuilder:default="24h"
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:Pattern=`^([0-9]+(\.[0-9]+)?(ns|us|ms|s|m|h))+$`
	// +kubebuilder:validation:XValidation:rule="duration(self) >= duration('1m') && duration(self) <= duration('8784h')",message="window must be between 1m and 8784h"
	Window *metav1.Duration `json:"window,omitempty"`

	// Agent bounds what all the Agent's sessions spend in one window.
	// +optional
	Agent *AgentBudget `json:"agent,omitempty"`

	// Session bounds what one session spends over its life.
	// +optional
	Session *SessionBudget `json:"session,omitempty"`

	// Prices are what each model charges per million tokens, for a cost
	// budget: every model the Agent may call needs one. A call is charged
	// by the model that answered, or by spec.model's price when the answer
	// names none.
	// +optional
	// +listType=map
	// +listMapKey=model
	// +kubebuilder:validation:MaxItems=64
	Prices []ModelPrice `json:"prices,omitempty"`
}

// DefaultSpendWindow is the window of an agent budget that names none.
const DefaultSpendWindow = 24 * time.Hour

// WindowLength is the length of the agent budget's windows.
func (l *SpendLimitSpec) WindowLength() time.Duration {
	if l.Window == nil {
		return DefaultSpendWindow
	}
	return l.Window.Duration
}

// HasAgentBudget reports whether the limit has a budget shared by all the
// Agent's sessions.
func (l *SpendLimitSpec) HasAgentBudget() bool {
	return l != nil && l.Agent != nil
}

// AgentBudget bounds what all of an Agent's sessions spend in one window.
// Model calls that run at once are each admitted while the window's spend,
// plus what the calls already running may spend, is under the budget, so
// the budget holds within about one call's usage.
//
// +kubebuilder:validation:XValidation:rule="has(self.tokens) || has(self.cost)",message="an agent budget needs tokens or cost"
type AgentBudget struct {
	// Tokens bounds the input and output tokens, as the providers count
	// them.
	// +optional
	// +kubebuilder:validation:Minimum=1
	Tokens *int64 `json:"tokens,omitempty"`

	// Cost bounds the cost, in the currency of prices, as a decimal such as
	// "25" or "2.50", with up to six decimal places.
	// +optional
	// +kubebuilder:validation:MaxLength=19
	// +kubebuilder:validation:Pattern=`^[0-9]{1,12}(\.[0-9]{1,6})?$`
	// +kubebuilder:validation:XValidation:rule="self.matches('[1-9]')",message="cost must be more than 0"
	Cost *string `json:"cost,omitempty"`
}

// SessionBudget bounds what one session spends over its life.
type SessionBudget struct {
	// Tokens bounds the input and output tokens of the session's model
	// calls.
	// +required
	// +kubebuilder:validation:Minimum=1
	Tokens int64 `json:"tokens"`
}

// ModelPrice is what one model charges per million tokens, each price a
// decimal such as "3" or "0.15", with up to six decimal places.
type ModelPrice struct {
	// Model is the model name, as spec.model and the provider's answers
	// name it.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=256
	Model string `json:"model"`

	// InputPerMillion is the price of a million input tokens.
	// +required
	// +kubebuilder:validation:MaxLength=12
	// +kubebuilder:validation:Pattern=`^[0-9]{1,5}(\.[0-9]{1,6})?$`
	InputPerMillion string `json:"inputPerMillion"`

	// CachedInputPerMillion is the price of a million input tokens read
	// from the provider's cache; unset, they cost as other input.
	// +optional
	// +kubebuilder:validation:MaxLength=12
	// +kubebuilder:validation:Pattern=`^[0-9]{1,5}(\.[0-9]{1,6})?$`
	CachedInputPerMillion *string `json:"cachedInputPerMillion,omitempty"`

	// OutputPerMillion is the price of a million output tokens.
	// +required
	// +kubebuilder:validation:MaxLength=12
	// +kubebuilder:validation:Pattern=`^[0-9]{1,5}(\.[0-9]{1,6})?$`
	OutputPerMillion string `json:"outputPerMillion"`
}
