package session

import (
	"encoding/json"
	"testing"

	"github.com/stepwise-run/stepwise/internal/version"
)

// mustGraph is the graph of a known engine version.
func mustGraph(t *testing.T, flowType, engineVersion string) FlowGraph {
	t.Helper()
	g, err := Graph(flowType, engineVersion)
	if err != nil {
		t.Fatal(err)
	}
	return g
}

func TestGraphIsConsistent(t *testing.T) {
	for _, v := range version.EngineVersions {
		t.Run(v, func(t *testing.T) { checkGraph(t, mustGraph(t, "SupportAgent", v)) })
	}
}

func checkGraph(t *testing.T, g FlowGraph) {
	known := map[StepName]GraphStep{}
	for _, s := range g.Steps {
		if _, dup := known[s.Name]; dup {
			t.Errorf("step %s listed twice", s.Name)
		}
		known[s.Name] = s
	}
	outgoing := map[StepName][]Transition{}
	reached := map[StepName]bool{g.Start: true}
	for _, tr := range g.Transitions {
		if _, ok := known[tr.From]; !ok {
			t.Errorf("transition from unknown step %s", tr.From)
		}
		if _, ok := known[tr.To]; !ok {
			t.Errorf("transition to unknown step %s", tr.To)
		}
		if tr.On == "" {
			t.Errorf("transition %s -> %s does not say when", tr.From, tr.To)
		}
		outgoing[tr.From] = append(outgoing[tr.From], tr)
	}
	// Every Step is reachable from the start.
	for changed := true; changed; {
		changed = false
		for _, tr := range g.Transitions {
			if reached[tr.From] && !reached[tr.To] {
				reached[tr.To], changed = true, true
			}
		}
	}
	for name := range known {
		if !reached[name] {
			t.Errorf("step %s cannot be reached from %s", name, g.Start)
		}
	}
	for name, s := range known {
		// A call Step's failure routes are exactly its failure transitions.
		var failureTargets []StepName
		for _, tr := range outgoing[name] {
			if tr.Kind == TransitionFailure {
				failureTargets = append(failureTargets, tr.To)
			}
		}
		if len(failureTargets) != len(s.FailureRoutes) {
			t.Errorf("step %s: failure routes %v, failure transitions %v", name, s.FailureRoutes, failureTargets)
		}
		for i := range failureTargets {
			if i < len(s.FailureRoutes) && failureTargets[i] != s.FailureRoutes[i] {
				t.Errorf("step %s: failure route %d is %s, transition goes to %s", name, i, s.FailureRoutes[i], failureTargets[i])
			}
		}
		if s.Kind == StepKindCall && (s.MaxAttempts == 0 || len(s.FailureRoutes) == 0) {
			t.Errorf("call step %s needs attempts and a failure route", name)
		}
		// Only a Step that cancel_turn stops moves on a cancel transition.
		for _, tr := range outgoing[name] {
			if tr.Kind == TransitionCancel && !s.Cancellable {
				t.Errorf("step %s is not cancellable but has a cancel transition to %s", name, tr.To)
			}
		}
		// Every per-tool-call Step can settle its call: it publishes a result.
		if s.PerToolCall {
			publishes := false
			for _, tr := range outgoing[name] {
				publishes = publishes || (tr.Kind == TransitionResult && tr.To == StepResumeTurn)
			}
			if !publishes {
				t.Errorf("tool step %s never publishes a result to ResumeTurn", name)
			}
		}
	}
}

func TestGraphShowsEachStepsTimeoutsAndAttempts(t *testing.T) {
	tests := []struct {
		step                              StepName
		attempts                          int
		attemptTimeout, heartbeat, within string
	}{
		{StepRunModel, 3, "15m0s", "2m0s", "30m0s"},
		{StepCompactContext, 3, "15m0s", "2m0s", "30m0s"},
		{StepCallTool, 3, "1h0m0s", "2m0s", ""},
		{StepCallSingleAttemptTool, 1, "1h0m0s", "2m0s", ""},
		{StepPollToolTask, 3, "1h0m0s", "2m0s", ""},
		{StepCancelToolTask, 3, "30s", "", "2m0s"},
	}
	steps := map[StepName]GraphStep{}
	for _, s := range mustGraph(t, "F", version.EngineVersion).Steps {
		steps[s.Name] = s
	}
	for _, tt := range tests {
		s := steps[tt.step]
		if s.MaxAttempts != tt.attempts || s.AttemptTimeout != tt.attemptTimeout || s.HeartbeatTimeout != tt.heartbeat || s.AttemptsWithin != tt.within {
			t.Errorf("%s = %d attempts, timeout %q, heartbeat %q, within %q; want %d %q %q %q", tt.step,
				s.MaxAttempts, s.AttemptTimeout, s.HeartbeatTimeout, s.AttemptsWithin, tt.attempts, tt.attemptTimeout, tt.heartbeat, tt.within)
		}
	}
	for _, name := range []StepName{StepAwaitToolApproval, StepAwaitQuestionAnswer} {
		if !steps[name].WaitsForPerson {
			t.Errorf("%s should be marked as waiting for a person", name)
		}
	}
}

func TestGraphDocument(t *testing.T) {
	doc, digest, err := mustGraph(t, "SupportAgent", "0.1.0").Document()
	if err != nil {
		t.Fatal(err)
	}
	again, digestAgain, _ := mustGraph(t, "SupportAgent", "0.1.0").Document()
	if string(doc) != string(again) || digest != digestAgain {
		t.Error("the same graph encoded differently")
	}
	_, otherFlow, _ := mustGraph(t, "TriageAgent", "0.1.0").Document()
	_, otherEngine, _ := mustGraph(t, "SupportAgent", "0.2.0").Document()
	if otherFlow == digest || otherEngine == digest {
		t.Error("the digest does not follow the Flow type and engine version")
	}
	var parsed FlowGraph
	if err := json.Unmarshal(doc, &parsed); err != nil {
		t.Fatal(err)
	}
	if parsed.Schema != FlowGraphSchema || parsed.Start != StepStartAgentSession || len(parsed.Actions) == 0 {
		t.Errorf("document = schema %q start %q, %d actions", parsed.Schema, parsed.Start, len(parsed.Actions))
	}
}

func TestStepLookup(t *testing.T) {
	s, ok := Step(StepCallSingleAttemptTool)
	if !ok || s.Retry.MaxAttempts != 1 || s.FailureRoutes[0] != StepRecordToolOutcomeUnknown {
		t.Errorf("Step(CallSingleAttemptTool) = %+v, %v", s, ok)
	}
	if _, ok := Step("NoSuchStep"); ok {
		t.Error("Step found an unknown name")
	}
	if len(Steps()) != 16 {
		t.Errorf("Steps() = %d steps, want 16", len(Steps()))
	}
}

// TestGraphOfEachEngineVersion: the graph an operator publishes is the one
// of the engine version the workers run, with only the Steps, transitions
// and actions that version has.
func TestGraphOfEachEngineVersion(t *testing.T) {
	has := func(g FlowGraph, step StepName) bool {
		for _, s := range g.Steps {
			if s.Name == step {
				return true
			}
		}
		return false
	}
	hasAction := func(g FlowGraph, name string) bool {
		for _, a := range g.Actions {
			if a.Name == name {
				return true
			}
		}
		return false
	}
	first := mustGraph(t, "F", "0.1.0")
	for _, step := range []StepName{StepCompactContext, StepPollToolTask, StepApplyTurnControl, StepCancelToolTask} {
		if has(first, step) {
			t.Errorf("the 0.1.0 graph has %s, which 0.2.0 brought", step)
		}
	}
	for _, action := range []string{"steer_user_message", "cancel_turn", "update_session_settings", "execute_plan"} {
		if hasAction(first, action) {
			t.Errorf("the 0.1.0 graph offers %s, which 0.2.0 brought", action)
		}
	}
	current := mustGraph(t, "F", version.EngineVersion)
	if len(current.Steps) != len(Steps()) || len(current.Transitions) != len(transitions) || len(current.Actions) != len(actions) {
		t.Errorf("the current graph has %d steps, %d transitions, %d actions; want all (%d, %d, %d)",
			len(current.Steps), len(current.Transitions), len(current.Actions), len(Steps()), len(transitions), len(actions))
	}
	if current.EngineVersion != version.EngineVersion || first.EngineVersion != "0.1.0" {
		t.Errorf("graphs name engine versions %q and %q", current.EngineVersion, first.EngineVersion)
	}
	for _, unknown := range []string{"9.9.9", "", "v0.1.0", "0.1"} {
		if _, err := Graph("F", unknown); err == nil {
			t.Errorf("Graph(%q) has a graph; want an error naming the versions this build knows", unknown)
		}
	}
}
