package grants

import "testing"

func TestAGrantNeverReachesPastItsNamespace(t *testing.T) {
	some := Grant{Namespace: "team-a", Agents: []string{"support"}, Verbs: []Verb{VerbGet, VerbSend}}
	every := Grant{Namespace: "team-a", Verbs: []Verb{VerbGet}}
	tests := []struct {
		name             string
		grant            Grant
		namespace, agent string
		verb             Verb
		want             bool
	}{
		{"a named Agent and a granted verb", some, "team-a", "support", VerbSend, true},
		{"a verb not granted", some, "team-a", "support", VerbApprove, false},
		{"an Agent not named", some, "team-a", "billing", VerbGet, false},
		{"the same Agent name in another namespace", some, "team-b", "support", VerbGet, false},
		{"no Agents named reaches every Agent of the namespace", every, "team-a", "billing", VerbGet, true},
		{"no Agents named stays in the namespace", every, "team-b", "billing", VerbGet, false},
	}
	for _, tt := range tests {
		if got := tt.grant.Allows(tt.namespace, tt.agent, tt.verb); got != tt.want {
			t.Errorf("%s: Allows(%s, %s, %s) = %v, want %v", tt.name, tt.namespace, tt.agent, tt.verb, got, tt.want)
		}
	}
}
