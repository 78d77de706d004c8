package mcp

import (
	"strings"
	"testing"

	"github.com/stepwise-run/stepwise/pkg/agent"
)

func TestToolName(t *testing.T) {
	long := strings.Repeat("a", 70)
	cases := []struct {
		server, tool, want string
	}{
		{"files", "read_file", "files__read_file"},
		{"crm", "tickets.close", "crm__tickets_close"},
		{"my server", "ünïcode/tool", "my_server___n_code_tool"},
	}
	for _, c := range cases {
		if got := ToolName(c.server, c.tool); got != c.want {
			t.Errorf("ToolName(%q, %q) = %q, want %q", c.server, c.tool, got, c.want)
		}
	}
	a, b := ToolName("files", long+"x"), ToolName("files", long+"y")
	if len(a) != MaxToolNameLength || len(b) != MaxToolNameLength || a == b || !strings.HasPrefix(a, "files__aaaa") {
		t.Errorf("long names = %q and %q: want 64 characters each, apart", a, b)
	}
	if ToolName("files", long+"x") != a {
		t.Error("ToolName is not stable")
	}
}

func TestToolPolicy(t *testing.T) {
	yes := true
	read := agent.Policy{Effect: agent.EffectRead}
	write := agent.Policy{Effect: agent.EffectNonIdempotentWrite}
	approved := agent.Policy{Effect: agent.EffectRead, RequiresApproval: &yes}
	meta := func(kv ...string) map[string]any {
		m := map[string]any{}
		for i := 0; i < len(kv); i += 2 {
			m[kv[i]] = kv[i+1]
		}
		return m
	}
	cases := []struct {
		name         string
		a            Annotations
		untrusted    bool
		policy       *agent.Policy
		wantEffect   agent.Effect
		wantApproval bool
	}{
		{"no hints: the default", Annotations{}, false, nil, agent.EffectUnclassified, true},
		{"readOnlyHint", Annotations{ReadOnly: true}, false, nil, agent.EffectRead, false},
		{"idempotentHint wins", Annotations{ReadOnly: true, Idempotent: true}, false, nil, agent.EffectIdempotentWrite, false},
		{"untrusted hints keep the default", Annotations{ReadOnly: true}, true, nil, agent.EffectUnclassified, true},
		{"a policy wins over hints", Annotations{ReadOnly: true}, false, &write, agent.EffectNonIdempotentWrite, true},
		{"a declared read", Annotations{Meta: meta(EffectMetaKey, "read")}, false, nil, agent.EffectRead, false},
		{"a declared write asks only when recommended", Annotations{Meta: meta(EffectMetaKey, "non_idempotent_write")}, false, nil, agent.EffectNonIdempotentWrite, false},
		{"approval recommended", Annotations{Meta: meta(EffectMetaKey, "idempotent_write", ApprovalMetaKey, "recommended")}, false, nil, agent.EffectIdempotentWrite, true},
		{"an unknown approval value asks", Annotations{Meta: meta(EffectMetaKey, "read", ApprovalMetaKey, "maybe")}, false, nil, agent.EffectRead, true},
		{"a policy raises a declared read", Annotations{Meta: meta(EffectMetaKey, "read")}, false, &write, agent.EffectNonIdempotentWrite, true},
		{"a policy never lowers a declared write", Annotations{Meta: meta(EffectMetaKey, "non_idempotent_write")}, false, &read, agent.EffectNonIdempotentWrite, false},
		{"a policy's approval wins", Annotations{Meta: meta(EffectMetaKey, "read")}, false, &approved, agent.EffectRead, true},
		{"an unknown declared effect ignores the hints", Annotations{ReadOnly: true, Meta: meta(EffectMetaKey, "delete")}, false, nil, agent.EffectUnclassified, true},
		{"untrusted ignores declarations", Annotations{Meta: meta(EffectMetaKey, "read")}, true, nil, agent.EffectUnclassified, true},
		{"approval without effect is ignored", Annotations{ReadOnly: true, Meta: meta(ApprovalMetaKey, "recommended")}, false, nil, agent.EffectRead, false},
	}

	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p := ToolPolicy(c.a, !c.untrusted, agent.EffectUnclassified, c.policy)
			if p.Effect != c.wantEffect || p.ApprovalRequired() != c.wantApproval {
				t.Errorf("ToolPolicy = %s (approval %v), want %s (approval %v)", p.Effect, p.ApprovalRequired(), c.wantEffect, c.wantApproval)
			}
		})
	}
}
