package agent_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/stepwise-run/stepwise/pkg/agent"
)

func TestEffectClasses(t *testing.T) {
	cases := []struct {
		effect            agent.Effect
		valid             bool
		retried           bool
		approvalByDefault bool
	}{
		{agent.EffectRead, true, true, false},
		{agent.EffectIdempotentWrite, true, true, false},
		{agent.EffectNonIdempotentWrite, true, false, true},
		{agent.EffectUnclassified, true, false, true},
		{agent.Effect(""), false, false, true},
		{agent.Effect("write"), false, false, true},
		{agent.Effect("READ"), false, false, true},
	}
	for _, c := range cases {
		t.Run(string(c.effect), func(t *testing.T) {
			if got := c.effect.Valid(); got != c.valid {
				t.Errorf("Valid() = %v, want %v", got, c.valid)
			}
			if got := c.effect.Retried(); got != c.retried {
				t.Errorf("Retried() = %v, want %v", got, c.retried)
			}
			if got := c.effect.ApprovalByDefault(); got != c.approvalByDefault {
				t.Errorf("ApprovalByDefault() = %v, want %v", got, c.approvalByDefault)
			}
		})
	}
}

func TestEffectsListsEveryClassOnce(t *testing.T) {
	want := []agent.Effect{agent.EffectRead, agent.EffectIdempotentWrite, agent.EffectNonIdempotentWrite, agent.EffectUnclassified}
	if !slices.Equal(agent.Effects, want) {
		t.Fatalf("Effects = %v, want %v", agent.Effects, want)
	}
}

func TestPolicyApprovalRequired(t *testing.T) {
	yes, no := true, false
	cases := []struct {
		name   string
		policy agent.Policy
		want   bool
	}{
		{"read follows its default", agent.Policy{Effect: agent.EffectRead}, false},
		{"idempotent write follows its default", agent.Policy{Effect: agent.EffectIdempotentWrite}, false},
		{"non-idempotent write follows its default", agent.Policy{Effect: agent.EffectNonIdempotentWrite}, true},
		{"unclassified follows its default", agent.Policy{Effect: agent.EffectUnclassified}, true},
		{"override requires approval of a read", agent.Policy{Effect: agent.EffectRead, RequiresApproval: &yes}, true},
		{"override waives approval of a write", agent.Policy{Effect: agent.EffectNonIdempotentWrite, RequiresApproval: &no}, false},
		{"override waives approval of unclassified", agent.Policy{Effect: agent.EffectUnclassified, RequiresApproval: &no}, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := c.policy.ApprovalRequired(); got != c.want {
				t.Errorf("ApprovalRequired() = %v, want %v", got, c.want)
			}
		})
	}
}

func TestParseEffect(t *testing.T) {
	for _, e := range agent.Effects {
		got, err := agent.ParseEffect(string(e))
		if err != nil || got != e {
			t.Errorf("ParseEffect(%q) = %q, %v; want %q, nil", e, got, err, e)
		}
	}
	for _, bad := range []string{"", "bogus", "Read", " read"} {
		got, err := agent.ParseEffect(bad)
		if err == nil {
			t.Errorf("ParseEffect(%q) = %q, want an error", bad, got)
			continue
		}
		if !strings.Contains(err.Error(), fmt.Sprintf("%q", bad)) {
			t.Errorf("ParseEffect(%q) error %q does not name the value", bad, err)
		}
		if got != "" {
			t.Errorf("ParseEffect(%q) returned %q with its error", bad, got)
		}
	}
}

type lookupArgs struct {
	OrderID string `json:"order_id" jsonschema:"The order to look up."`
	Verbose bool   `json:"verbose,omitempty"`
	Limit   int    `json:"limit,omitempty"`
}

type lookupResult struct {
	OrderID string `json:"order_id"`
	Note    string `json:"note"`
}

func lookupTool(t *testing.T) agent.Tool {
	t.Helper()
	tool, err := agent.NewTool("lookup_order", "Look up an order.", agent.EffectRead,
		func(_ context.Context, _ agent.ToolContext, args lookupArgs) (lookupResult, error) {
			return lookupResult{OrderID: args.OrderID, Note: fmt.Sprintf("verbose=%v limit=%d <&>", args.Verbose, args.Limit)}, nil
		})
	if err != nil {
		t.Fatalf("NewTool: %v", err)
	}
	return tool
}

func TestNewToolDerivesTheSchemaFromTheArgumentStruct(t *testing.T) {
	tool := lookupTool(t)
	var schema struct {
		Type                 string         `json:"type"`
		Required             []string       `json:"required"`
		AdditionalProperties *bool          `json:"additionalProperties"`
		Properties           map[string]any `json:"properties"`
	}
	if err := json.Unmarshal(tool.Parameters, &schema); err != nil {
		t.Fatalf("Parameters are not JSON: %v\n%s", err, tool.Parameters)
	}
	if schema.Type != "object" {
		t.Errorf("type = %q, want object", schema.Type)
	}
	if !slices.Equal(schema.Required, []string{"order_id"}) {
		t.Errorf("required = %v, want only the field without omitempty", schema.Required)
	}
	if schema.AdditionalProperties == nil || *schema.AdditionalProperties {
		t.Errorf("additionalProperties = %v, want false", schema.AdditionalProperties)
	}
	for _, name := range []string{"order_id", "verbose", "limit"} {
		if _, ok := schema.Properties[name]; !ok {
			t.Errorf("property %s missing from %s", name, tool.Parameters)
		}
	}
	orderID, _ := schema.Properties["order_id"].(map[string]any)
	if orderID["description"] != "The order to look up." {
		t.Errorf("order_id description = %v, want the jsonschema tag", orderID["description"])
	}
	if orderID["type"] != "string" {
		t.Errorf("order_id type = %v, want string", orderID["type"])
	}
	limit, _ := schema.Properties["limit"].(map[string]any)
	if limit["type"] != "integer" {
		t.Errorf("limit type = %v, want integer", limit["type"])
	}
}

func TestNewToolKeepsNameDescriptionAndPolicy(t *testing.T) {
	noop := func(context.Context, agent.ToolContext, struct{}) (string, error) { return "", nil }
	plain, err := agent.NewTool("refund", "Refund an order.", agent.EffectNonIdempotentWrite, noop)
	if err != nil {
		t.Fatal(err)
	}
	if plain.Name != "refund" || plain.Description != "Refund an order." {
		t.Errorf("name/description = %q/%q", plain.Name, plain.Description)
	}
	if plain.Policy.Effect != agent.EffectNonIdempotentWrite || plain.Policy.RequiresApproval != nil {
		t.Errorf("policy = %+v, want the effect with the default approval", plain.Policy)
	}
	if !plain.Policy.ApprovalRequired() {
		t.Error("a non-idempotent write tool should need approval by default")
	}
	def := plain.Definition()
	if def.Name != "refund" || def.Description != "Refund an order." || string(def.Parameters) != string(plain.Parameters) {
		t.Errorf("Definition() = %+v", def)
	}

	waived, err := agent.NewTool("refund", "", agent.EffectNonIdempotentWrite, noop, agent.WithApproval(false))
	if err != nil {
		t.Fatal(err)
	}
	if waived.Policy.RequiresApproval == nil || *waived.Policy.RequiresApproval || waived.Policy.ApprovalRequired() {
		t.Errorf("WithApproval(false) policy = %+v", waived.Policy)
	}
}

func TestNewToolWithSchemaUsesTheGivenSchema(t *testing.T) {
	schema := json.RawMessage(`{"type":"object","properties":{"n":{"type":"integer","minimum":1}},"required":["n"]}`)
	tool, err := agent.NewTool("count", "Count.", agent.EffectRead,
		func(_ context.Context, _ agent.ToolContext, args map[string]any) (string, error) {
			return fmt.Sprint(args["n"]), nil
		}, agent.WithSchema(schema))
	if err != nil {
		t.Fatalf("NewTool: %v", err)
	}
	var got, want any
	_ = json.Unmarshal(tool.Parameters, &got)
	_ = json.Unmarshal(schema, &want)
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("Parameters = %s, want the given schema %s", tool.Parameters, schema)
	}
	if out, err := tool.Call(context.Background(), agent.ToolContext{}, `{"n":3}`); err != nil || out.Output != "3" {
		t.Errorf("Call(n=3) = %q, %v", out.Output, err)
	}
	_, err = tool.Call(context.Background(), agent.ToolContext{}, `{"n":0}`)
	if e, ok := agent.IsExecutionError(err); !ok || !strings.HasPrefix(e.Message, "invalid arguments for count: ") {
		t.Errorf("Call(n=0) error = %v, want a schema violation from the given schema", err)
	}
}

func TestNewToolRefusesBadDefinitions(t *testing.T) {
	noop := func(context.Context, agent.ToolContext, struct{}) (string, error) { return "", nil }
	cases := []struct {
		name    string
		tool    string
		effect  agent.Effect
		opts    []agent.ToolOption
		wantErr string
	}{
		{"empty name", "", agent.EffectRead, nil, "must be 1 to 64"},
		{"name with a space", "look up", agent.EffectRead, nil, "must be 1 to 64"},
		{"name with a dot", "orders.lookup", agent.EffectRead, nil, "must be 1 to 64"},
		{"name with a slash", "orders/lookup", agent.EffectRead, nil, "must be 1 to 64"},
		{"name of 65 characters", strings.Repeat("a", 65), agent.EffectRead, nil, "must be 1 to 64"},
		{"empty effect", "ok_name", "", nil, `tool ok_name: unknown effect ""`},
		{"unknown effect", "ok_name", "write", nil, `tool ok_name: unknown effect "write"`},
		{"schema that is not JSON", "ok_name", agent.EffectRead, []agent.ToolOption{agent.WithSchema(json.RawMessage(`{`))}, "not a JSON Schema"},
		{"schema with a bad type", "ok_name", agent.EffectRead, []agent.ToolOption{agent.WithSchema(json.RawMessage(`{"type":5}`))}, "tool ok_name:"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := agent.NewTool(c.tool, "", c.effect, noop, c.opts...)
			if err == nil || !strings.Contains(err.Error(), c.wantErr) {
				t.Errorf("NewTool error = %v, want one containing %q", err, c.wantErr)
			}
		})
	}
	for _, good := range []string{"a", "lookup_order", "Lookup-Order-2", strings.Repeat("a", 64)} {
		if _, err := agent.NewTool(good, "", agent.EffectRead, noop); err != nil {
			t.Errorf("NewTool(%q) = %v, want the name accepted", good, err)
		}
	}
}

func TestMustToolPanicsOnABadDefinition(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Error("MustTool with a bad name did not panic")
		}
	}()
	agent.MustTool("bad name", "", agent.EffectRead, func(context.Context, agent.ToolContext, struct{}) (string, error) { return "", nil })
}

func TestToolCallChecksArguments(t *testing.T) {
	tool := lookupTool(t)
	cases := []struct {
		name       string
		arguments  string
		wantOutput string
		wantErr    string // exact message, or prefix when wantPrefix
		wantPrefix bool
	}{
		{name: "valid required argument only", arguments: `{"order_id":"o1"}`,
			wantOutput: `{"order_id":"o1","note":"verbose=false limit=0 <&>"}`},
		{name: "valid with optional arguments", arguments: `{"order_id":"o1","verbose":true,"limit":3}`,
			wantOutput: `{"order_id":"o1","note":"verbose=true limit=3 <&>"}`},
		{name: "null for an optional property is absent", arguments: `{"order_id":"o1","verbose":null,"limit":null}`,
			wantOutput: `{"order_id":"o1","note":"verbose=false limit=0 <&>"}`},
		{name: "not JSON", arguments: `{"order_id":`,
			wantErr: "invalid arguments for lookup_order: arguments are not valid JSON"},
		{name: "empty text", arguments: ``,
			wantErr: "invalid arguments for lookup_order: arguments are not valid JSON"},
		{name: "missing required property", arguments: `{"verbose":true}`,
			wantErr: "invalid arguments for lookup_order: ", wantPrefix: true},
		{name: "null for a required property is missing", arguments: `{"order_id":null}`,
			wantErr: "invalid arguments for lookup_order: ", wantPrefix: true},
		{name: "wrong type", arguments: `{"order_id":7}`,
			wantErr: "invalid arguments for lookup_order: ", wantPrefix: true},
		{name: "unknown property", arguments: `{"order_id":"o1","extra":1}`,
			wantErr: "invalid arguments for lookup_order: ", wantPrefix: true},
		{name: "not an object", arguments: `["o1"]`,
			wantErr: "invalid arguments for lookup_order: ", wantPrefix: true},
		{name: "fractional integer", arguments: `{"order_id":"o1","limit":1.5}`,
			wantErr: "invalid arguments for lookup_order: ", wantPrefix: true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			out, err := tool.Call(context.Background(), agent.ToolContext{}, c.arguments)
			if c.wantErr == "" {
				if err != nil || out.Output != c.wantOutput {
					t.Errorf("Call = %q, %v; want %q", out.Output, err, c.wantOutput)
				}
				return
			}
			e, ok := agent.IsExecutionError(err)
			if !ok {
				t.Fatalf("Call error = %v (%T), want a ToolExecutionError", err, err)
			}
			if c.wantPrefix {
				if !strings.HasPrefix(e.Message, c.wantErr) || len(e.Message) == len(c.wantErr) {
					t.Errorf("error = %q, want %q and a reason", e.Message, c.wantErr)
				}
			} else if e.Message != c.wantErr {
				t.Errorf("error = %q, want %q", e.Message, c.wantErr)
			}
			if out.Output != "" || out.Images != nil {
				t.Errorf("output %+v returned with an error", out)
			}
		})
	}
}

func TestToolCallDoesNotRunTheFunctionOnInvalidArguments(t *testing.T) {
	ran := false
	tool, err := agent.NewTool("probe", "", agent.EffectRead,
		func(context.Context, agent.ToolContext, struct {
			X string `json:"x"`
		}) (string, error) {
			ran = true
			return "ran", nil
		})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tool.Call(context.Background(), agent.ToolContext{}, `{}`); err == nil {
		t.Fatal("missing required x accepted")
	}
	if ran {
		t.Error("the function ran with arguments that break the schema")
	}
}

func TestCheckArgumentsDropsNullProperties(t *testing.T) {
	tool := lookupTool(t)
	cleaned, err := tool.CheckArguments(`{"order_id":"o1","verbose":null}`)
	if err != nil {
		t.Fatal(err)
	}
	if string(cleaned) != `{"order_id":"o1"}` {
		t.Errorf("cleaned = %s, want the null property removed", cleaned)
	}
}

func TestToolResultEncoding(t *testing.T) {
	ctx := context.Background()
	str, _ := agent.NewTool("s", "", agent.EffectRead,
		func(context.Context, agent.ToolContext, struct{}) (string, error) { return `plain "text" <b>`, nil })
	num, _ := agent.NewTool("n", "", agent.EffectRead,
		func(context.Context, agent.ToolContext, struct{}) (int, error) { return 42, nil })
	list, _ := agent.NewTool("l", "", agent.EffectRead,
		func(context.Context, agent.ToolContext, struct{}) ([]string, error) {
			return []string{"a<b", "c&d"}, nil
		})
	mp, _ := agent.NewTool("m", "", agent.EffectRead,
		func(context.Context, agent.ToolContext, struct{}) (map[string]int, error) {
			return map[string]int{"b": 2, "a": 1}, nil
		})
	nilAny, _ := agent.NewTool("z", "", agent.EffectRead,
		func(context.Context, agent.ToolContext, struct{}) (any, error) { return nil, nil })
	cases := []struct {
		tool agent.Tool
		want string
	}{
		{str, `plain "text" <b>`},
		{num, `42`},
		{list, `["a<b","c&d"]`},
		{mp, `{"a":1,"b":2}`},
		{nilAny, `null`},
	}
	for _, c := range cases {
		t.Run(c.tool.Name, func(t *testing.T) {
			got, err := c.tool.Call(ctx, agent.ToolContext{}, `{}`)
			if err != nil || got.Output != c.want {
				t.Errorf("Call = %q, %v; want %q", got.Output, err, c.want)
			}
		})
	}
}

func TestToolErrorsPropagate(t *testing.T) {
	plain := errors.New("database down")
	cases := []struct {
		name           string
		err            error
		wantExecution  string
		wantUnknown    string
		wantSameAsGone bool
	}{
		{name: "Failed", err: agent.Failed("order %s not found", "o1"), wantExecution: "order o1 not found"},
		{name: "OutcomeUnknown", err: agent.OutcomeUnknown("timed out after %ds", 30), wantUnknown: "timed out after 30s"},
		{name: "wrapped Failed", err: fmt.Errorf("lookup: %w", agent.Failed("gone")), wantExecution: "gone"},
		{name: "wrapped OutcomeUnknown", err: fmt.Errorf("refund: %w", agent.OutcomeUnknown("maybe")), wantUnknown: "maybe"},
		{name: "other error", err: plain, wantSameAsGone: true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			tool, err := agent.NewTool("t", "", agent.EffectRead,
				func(context.Context, agent.ToolContext, struct{}) (string, error) { return "ignored", c.err })
			if err != nil {
				t.Fatal(err)
			}
			out, got := tool.Call(context.Background(), agent.ToolContext{}, `{}`)
			if out.Output != "" || out.Images != nil {
				t.Errorf("output %+v returned with an error", out)
			}
			if !errors.Is(got, c.err) {
				t.Errorf("Call error = %v, want %v", got, c.err)
			}
			e, isExec := agent.IsExecutionError(got)
			u, isUnknown := agent.IsOutcomeUnknown(got)
			switch {
			case c.wantExecution != "":
				if !isExec || e.Message != c.wantExecution || isUnknown {
					t.Errorf("IsExecutionError = %v %v, IsOutcomeUnknown = %v; want execution error %q", e, isExec, isUnknown, c.wantExecution)
				}
			case c.wantUnknown != "":
				if !isUnknown || u.Message != c.wantUnknown || isExec {
					t.Errorf("IsOutcomeUnknown = %v %v, IsExecutionError = %v; want outcome unknown %q", u, isUnknown, isExec, c.wantUnknown)
				}
			default:
				if isExec || isUnknown {
					t.Errorf("a plain error classified as execution=%v unknown=%v", isExec, isUnknown)
				}
			}
		})
	}
}

func TestFailedAndOutcomeUnknownMessages(t *testing.T) {
	if got := agent.Failed("a %d", 1).Error(); got != "a 1" {
		t.Errorf("Failed message = %q", got)
	}
	if got := agent.OutcomeUnknown("b %s", "x").Error(); got != "b x" {
		t.Errorf("OutcomeUnknown message = %q", got)
	}
	if _, ok := agent.IsExecutionError(nil); ok {
		t.Error("nil is an execution error")
	}
	if _, ok := agent.IsOutcomeUnknown(nil); ok {
		t.Error("nil is an outcome-unknown error")
	}
}

func TestToolReceivesItsContext(t *testing.T) {
	var seen agent.ToolContext
	tool, err := agent.NewTool("ctx", "", agent.EffectIdempotentWrite,
		func(_ context.Context, call agent.ToolContext, _ struct{}) (string, error) {
			seen = call
			return "ok", nil
		})
	if err != nil {
		t.Fatal(err)
	}
	in := agent.ToolContext{SessionID: "s", TurnID: "turn-1", ToolCallID: "c1", IdempotencyKey: "s/turn-1/c1", Attempt: 2, Effect: agent.EffectIdempotentWrite}
	if _, err := tool.Call(context.Background(), in, `{}`); err != nil {
		t.Fatal(err)
	}
	if seen.SessionID != "s" || seen.TurnID != "turn-1" || seen.ToolCallID != "c1" || seen.IdempotencyKey != "s/turn-1/c1" || seen.Attempt != 2 || seen.Effect != agent.EffectIdempotentWrite {
		t.Errorf("tool saw %+v", seen)
	}
}

func TestPrepareArgumentsConvertsAnOldShapeBeforeTheSchemaCheck(t *testing.T) {
	type current struct {
		OrderID string `json:"order_id"`
	}
	tool := agent.MustTool("lookup", "Look up.", agent.EffectRead,
		func(_ context.Context, _ agent.ToolContext, a current) (string, error) {
			return "order " + a.OrderID, nil
		},
		agent.WithPrepareArguments(func(raw json.RawMessage) (json.RawMessage, error) {
			var old map[string]any
			if err := json.Unmarshal(raw, &old); err != nil {
				return nil, err
			}
			if id, ok := old["id"]; ok {
				return json.Marshal(map[string]any{"order_id": id})
			}
			if _, ok := old["bad"]; ok {
				return nil, errors.New("bad is no longer taken")
			}
			return raw, nil
		}))
	out, err := tool.Call(context.Background(), agent.ToolContext{}, `{"id":"7"}`)
	if err != nil || out.Output != "order 7" {
		t.Errorf("Call with the old shape = %q, %v", out.Output, err)
	}
	if out, err := tool.Call(context.Background(), agent.ToolContext{}, `{"order_id":"8"}`); err != nil || out.Output != "order 8" {
		t.Errorf("Call with the current shape = %q, %v", out.Output, err)
	}
	_, err = tool.Call(context.Background(), agent.ToolContext{}, `{"bad":1}`)
	if e, ok := agent.IsExecutionError(err); !ok || e.Message != "invalid arguments for lookup: bad is no longer taken" {
		t.Errorf("a failing prepare = %v, want a failure the model sees", err)
	}
}
