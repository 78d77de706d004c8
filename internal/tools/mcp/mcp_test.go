package mcp

import (
	"fmt"
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
		{"readOnlyHint wins over idempotentHint", Annotations{ReadOnly: true, Idempotent: true}, false, nil, agent.EffectRead, false},
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

// TestHintsGiveTheEffectOnlyWhenNothingElseDecides covers every combination
// of readOnlyHint and idempotentHint: on a trusted server with no
// declaration and no policy they decide the effect (a read-only tool is a
// read whatever idempotentHint says); a declaration, a session policy, an
// unknown declared effect or an untrusted server leave them unread.
func TestHintsGiveTheEffectOnlyWhenNothingElseDecides(t *testing.T) {
	yes := true
	write := agent.Policy{Effect: agent.EffectNonIdempotentWrite, RequiresApproval: &yes}
	hinted := []struct {
		readOnly, idempotent bool
		want                 agent.Effect
	}{
		{false, false, agent.EffectUnclassified},
		{false, true, agent.EffectIdempotentWrite},
		{true, false, agent.EffectRead},
		{true, true, agent.EffectRead},
	}
	for _, h := range hinted {
		a := Annotations{ReadOnly: h.readOnly, Idempotent: h.idempotent}
		name := fmt.Sprintf("readOnly=%v,idempotent=%v", h.readOnly, h.idempotent)
		t.Run(name, func(t *testing.T) {
			check := func(what string, got agent.Policy, want agent.Effect, approval bool) {
				t.Helper()
				if got.Effect != want || got.ApprovalRequired() != approval {
					t.Errorf("%s: %s (approval %v), want %s (approval %v)", what, got.Effect, got.ApprovalRequired(), want, approval)
				}
			}
			check("trusted hints", ToolPolicy(a, true, agent.EffectUnclassified, nil), h.want, h.want.ApprovalByDefault())
			check("untrusted hints", ToolPolicy(a, false, agent.EffectUnclassified, nil), agent.EffectUnclassified, true)
			check("untrusted hints with a policy", ToolPolicy(a, false, agent.EffectUnclassified, &write), agent.EffectNonIdempotentWrite, true)
			check("a policy", ToolPolicy(a, true, agent.EffectUnclassified, &write), agent.EffectNonIdempotentWrite, true)

			declared := a
			declared.Meta = map[string]any{EffectMetaKey: "non_idempotent_write"}
			check("a declared write", ToolPolicy(declared, true, agent.EffectUnclassified, nil), agent.EffectNonIdempotentWrite, false)
			check("a declared write, untrusted", ToolPolicy(declared, false, agent.EffectRead, nil), agent.EffectRead, false)
			declared.Meta = map[string]any{EffectMetaKey: "read"}
			check("a declared read", ToolPolicy(declared, true, agent.EffectUnclassified, nil), agent.EffectRead, false)
			unknown := a
			unknown.Meta = map[string]any{EffectMetaKey: "delete"}
			check("an unknown declared effect", ToolPolicy(unknown, true, agent.EffectUnclassified, nil), agent.EffectUnclassified, true)
		})
	}
}
