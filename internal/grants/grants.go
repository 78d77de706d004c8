// Package grants is what an application token of the gateway allows, and
// how the grant travels: the operator reads the tokens from labeled
// Secrets and publishes their grants, each token by its SHA-256 alone, in
// a ConfigMap the gateways read, so a gateway reads no Secret and holds no
// token, and the operator links none of the gateway.
package grants

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/validation"
)

// Verb is what a route does to an Agent's sessions, as RBAC names it on the
// agents/sessions subresource.
type Verb string

// The verbs on agents/sessions.
const (
	// VerbGet reads snapshots, messages and events.
	VerbGet Verb = "get"
	// VerbCreate starts sessions.
	VerbCreate Verb = "create"
	// VerbSend sends, steers and deletes queued messages.
	VerbSend Verb = "send"
	// VerbApprove approves and rejects tool calls, and executes plans.
	VerbApprove Verb = "approve"
	// VerbAnswer answers questions.
	VerbAnswer Verb = "answer"
	// VerbCancel cancels turns.
	VerbCancel Verb = "cancel"
	// VerbUpdate changes session settings.
	VerbUpdate Verb = "update"
)

// Grant is what one application token allows: some verbs on the sessions
// of some Agents of one namespace. A token's grant never reaches past the
// namespace it was written in.
type Grant struct {
	// Source names where the token came from, such as its Secret, for
	// messages; never the token.
	Source    string
	Namespace string
	// Agents are the Agent names; empty allows every Agent of the
	// namespace.
	Agents []string
	Verbs  []Verb
}

// Allows says whether the grant allows verb on the sessions of an Agent.
func (g Grant) Allows(namespace, agent string, verb Verb) bool {
	return g.Namespace == namespace && (len(g.Agents) == 0 || slices.Contains(g.Agents, agent)) && slices.Contains(g.Verbs, verb)
}

// Application tokens live in Secrets found by a label. Each grants verbs on
// the sessions of the Agents of the Secret's own namespace, so whoever may
// write Secrets in a namespace may hand out access to its sessions, and to
// no other namespace's.
const (
	// LabelApplicationToken marks a Secret, with the value "true", as an
	// application token of the gateway.
	LabelApplicationToken = "agents.stepwise.run/gateway-token"
	// ApplicationTokenKey holds the bearer token, at least
	// MinApplicationTokenBytes long.
	ApplicationTokenKey = "token"
	// ApplicationVerbsKey holds the verbs the token allows, separated by
	// commas: get, create, send, approve, answer, cancel, update.
	ApplicationVerbsKey = "verbs"
	// ApplicationAgentsKey holds the Agents the token reaches, separated by
	// commas; without it the token reaches every Agent of the namespace.
	ApplicationAgentsKey = "agents"
	// MinApplicationTokenBytes keeps tokens out of guessing range.
	MinApplicationTokenBytes = 32
)

// Verbs lists every verb a route asks for.
var Verbs = []Verb{VerbGet, VerbCreate, VerbSend, VerbApprove, VerbAnswer, VerbCancel, VerbUpdate}

// Selector selects the Secrets that hold application
// tokens.
func Selector() labels.Selector {
	return labels.SelectorFromSet(labels.Set{LabelApplicationToken: "true"})
}

// FromSecrets reads the application tokens of labeled Secrets. A
// Secret that does not hold a usable token is left out, and a token two
// Secrets hold is left out of both, since neither grant can be told to be
// the one meant; each such Secret has a problem naming it and the field.
func FromSecrets(secrets []corev1.Secret) (map[string]Grant, []string) {
	var problems []string
	grants := map[string]Grant{}
	holders := map[[sha256.Size]byte][]string{}
	for i := range secrets {
		s := &secrets[i]
		source := "Secret " + s.Namespace + "/" + s.Name
		grant, token, err := grantOf(s)
		if err != nil {
			problems = append(problems, source+": "+err.Error())
			continue
		}
		digest := sha256.Sum256([]byte(token))
		holders[digest] = append(holders[digest], source)
		grant.Source = source
		grants[token] = grant
	}
	for token := range grants {
		if held := holders[sha256.Sum256([]byte(token))]; len(held) > 1 {
			slices.Sort(held)
			problems = append(problems, strings.Join(held, " and ")+" hold the same token; neither is used")
			delete(grants, token)
		}
	}
	slices.Sort(problems)
	return grants, slices.Compact(problems)
}

func grantOf(s *corev1.Secret) (Grant, string, error) {
	token := strings.TrimSpace(string(s.Data[ApplicationTokenKey]))
	switch {
	case token == "":
		return Grant{}, "", fmt.Errorf("data.%s is missing", ApplicationTokenKey)
	case len(token) < MinApplicationTokenBytes:
		return Grant{}, "", fmt.Errorf("data.%s has %d bytes; a token needs at least %d", ApplicationTokenKey, len(token), MinApplicationTokenBytes)
	case strings.ContainsFunc(token, func(r rune) bool { return r <= ' ' || r == 0x7f }):
		return Grant{}, "", fmt.Errorf("data.%s holds a space or control character, which no Authorization header carries", ApplicationTokenKey)
	}
	grant := Grant{Namespace: s.Namespace}
	for _, v := range splitField(string(s.Data[ApplicationVerbsKey])) {
		if !slices.Contains(Verbs, Verb(v)) {
			return Grant{}, "", fmt.Errorf("data.%s: %q is not a verb; the verbs are %s", ApplicationVerbsKey, v, joinVerbs(Verbs))
		}
		grant.Verbs = append(grant.Verbs, Verb(v))
	}
	if len(grant.Verbs) == 0 {
		return Grant{}, "", fmt.Errorf("data.%s names no verb; the verbs are %s", ApplicationVerbsKey, joinVerbs(Verbs))
	}
	for _, a := range splitField(string(s.Data[ApplicationAgentsKey])) {
		if len(validation.IsDNS1123Subdomain(a)) > 0 {
			return Grant{}, "", fmt.Errorf("data.%s: %q is not an Agent name", ApplicationAgentsKey, a)
		}
		grant.Agents = append(grant.Agents, a)
	}
	if _, named := s.Data[ApplicationAgentsKey]; named && len(grant.Agents) == 0 {
		// An empty list would otherwise reach every Agent.
		return Grant{}, "", fmt.Errorf("data.%s is present and names no Agent; leave it out to reach every Agent of the namespace", ApplicationAgentsKey)
	}
	return grant, token, nil
}

func splitField(s string) []string {
	var out []string
	for _, v := range strings.Split(s, ",") {
		if v = strings.TrimSpace(v); v != "" {
			out = append(out, v)
		}
	}
	return out
}

func joinVerbs(verbs []Verb) string {
	names := make([]string, len(verbs))
	for i, v := range verbs {
		names[i] = string(v)
	}
	return strings.Join(names, ", ")
}

// The operator reads the labeled Secrets and publishes their grants for the
// gateways in a ConfigMap of its own namespace, each token by its SHA-256
// alone, so a gateway reads no Secret and holds no token.
const (
	// PublishedKey holds the grants document, Published as JSON.
	PublishedKey = "grants.json"
)

// PublishedGrant is one application token as the operator publishes it.
type PublishedGrant struct {
	// SHA256 is the hex SHA-256 of the token.
	SHA256    string   `json:"sha256"`
	Source    string   `json:"source"`
	Namespace string   `json:"namespace"`
	Agents    []string `json:"agents,omitempty"`
	Verbs     []Verb   `json:"verbs"`
}

// Published is the grants document.
type Published struct {
	Grants []PublishedGrant `json:"grants"`
	// Problems name the Secrets that hold no usable token, and why.
	Problems []string `json:"problems,omitempty"`
}

// Publish is the document of the labeled Secrets' grants, in the order of
// their sources, so an unchanged set publishes the same bytes.
func Publish(secrets []corev1.Secret) Published {
	grants, problems := FromSecrets(secrets)
	out := Published{Grants: []PublishedGrant{}, Problems: problems}
	for token, g := range grants {
		sum := sha256.Sum256([]byte(token))
		out.Grants = append(out.Grants, PublishedGrant{SHA256: hex.EncodeToString(sum[:]), Source: g.Source, Namespace: g.Namespace,
			Agents: g.Agents, Verbs: g.Verbs})
	}
	slices.SortFunc(out.Grants, func(a, b PublishedGrant) int { return strings.Compare(a.Source, b.Source) })
	return out
}
