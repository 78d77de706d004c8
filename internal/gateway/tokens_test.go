package gateway_test

import (
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/stepwise-run/stepwise/internal/grants"
)

func tokenSecret(ns, name string, data map[string]string) corev1.Secret {
	s := corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Data: map[string][]byte{}}
	for k, v := range data {
		s.Data[k] = []byte(v)
	}
	return s
}

func TestGrantsFromSecrets(t *testing.T) {
	const tok = "0123456789abcdef0123456789abcdef"
	for _, tc := range []struct {
		name    string
		secrets []corev1.Secret
		want    map[string]grants.Grant
		problem string
	}{
		{
			name:    "verbs and Agents",
			secrets: []corev1.Secret{tokenSecret("team-a", "app", map[string]string{"token": tok + "\n", "verbs": "get, approve", "agents": "support,billing"})},
			want: map[string]grants.Grant{tok: {Source: "Secret team-a/app", Namespace: "team-a",
				Agents: []string{"support", "billing"}, Verbs: []grants.Verb{grants.VerbGet, grants.VerbApprove}}},
		},
		{
			name:    "every Agent of the namespace",
			secrets: []corev1.Secret{tokenSecret("team-a", "app", map[string]string{"token": tok, "verbs": "get"})},
			want:    map[string]grants.Grant{tok: {Source: "Secret team-a/app", Namespace: "team-a", Verbs: []grants.Verb{grants.VerbGet}}},
		},
		{name: "no token", secrets: []corev1.Secret{tokenSecret("team-a", "app", map[string]string{"verbs": "get"})},
			problem: "Secret team-a/app: data.token is missing"},
		{name: "a short token", secrets: []corev1.Secret{tokenSecret("team-a", "app", map[string]string{"token": "short", "verbs": "get"})},
			problem: "data.token has 5 bytes; a token needs at least 32"},
		{name: "a token with a space", secrets: []corev1.Secret{tokenSecret("team-a", "app", map[string]string{"token": tok + " x", "verbs": "get"})},
			problem: "data.token holds a space or control character"},
		{name: "no verb", secrets: []corev1.Secret{tokenSecret("team-a", "app", map[string]string{"token": tok, "verbs": " , "})},
			problem: "data.verbs names no verb"},
		{name: "an unknown verb", secrets: []corev1.Secret{tokenSecret("team-a", "app", map[string]string{"token": tok, "verbs": "get,delete"})},
			problem: `data.verbs: "delete" is not a verb`},
		{name: "a wildcard verb", secrets: []corev1.Secret{tokenSecret("team-a", "app", map[string]string{"token": tok, "verbs": "*"})},
			problem: `data.verbs: "*" is not a verb`},
		{name: "a bad Agent name", secrets: []corev1.Secret{tokenSecret("team-a", "app", map[string]string{"token": tok, "verbs": "get", "agents": "Support/x"})},
			problem: `data.agents: "Support/x" is not an Agent name`},
		{name: "an empty Agent list", secrets: []corev1.Secret{tokenSecret("team-a", "app", map[string]string{"token": tok, "verbs": "get", "agents": ""})},
			problem: "data.agents is present and names no Agent"},
		{
			name: "one token in two Secrets",
			secrets: []corev1.Secret{
				tokenSecret("team-a", "app", map[string]string{"token": tok, "verbs": "get"}),
				tokenSecret("team-b", "copy", map[string]string{"token": tok, "verbs": "approve"}),
			},
			problem: "Secret team-a/app and Secret team-b/copy hold the same token; neither is used",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, problems := grants.FromSecrets(tc.secrets)
			if tc.want == nil {
				tc.want = map[string]grants.Grant{}
			}
			if len(got) != len(tc.want) {
				t.Fatalf("grants = %+v, want %+v", got, tc.want)
			}
			for token, want := range tc.want {
				g := got[token]
				if g.Source != want.Source || g.Namespace != want.Namespace || !slices.Equal(g.Agents, want.Agents) || !slices.Equal(g.Verbs, want.Verbs) {
					t.Errorf("grant = %+v, want %+v", g, want)
				}
			}
			if tc.problem == "" && len(problems) > 0 {
				t.Errorf("problems = %q", problems)
			}
			if tc.problem != "" && !slices.ContainsFunc(problems, func(p string) bool { return strings.Contains(p, tc.problem) }) {
				t.Errorf("problems = %q, want one with %q", problems, tc.problem)
			}
			for _, p := range problems {
				if strings.Contains(p, tok) {
					t.Errorf("a problem shows the token: %q", p)
				}
			}
		})
	}
}
