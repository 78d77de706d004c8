package gateway

import (
	"context"
	"crypto/sha256"
	"fmt"
	"log/slog"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Application tokens live in Secrets the gateway finds by a label. Each
// grants verbs on the sessions of the Agents of the Secret's own namespace,
// so whoever may write Secrets in a namespace may hand out access to its
// sessions, and to no other namespace's.
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

// ApplicationTokenSelector selects the Secrets that hold application
// tokens.
func ApplicationTokenSelector() labels.Selector {
	return labels.SelectorFromSet(labels.Set{LabelApplicationToken: "true"})
}

// GrantsFromSecrets reads the application tokens of labeled Secrets. A
// Secret that does not hold a usable token is left out, and a token two
// Secrets hold is left out of both, since neither grant can be told to be
// the one meant; each such Secret has a problem naming it and the field.
func GrantsFromSecrets(secrets []corev1.Secret) (map[string]Grant, []string) {
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
		if !agentPattern.MatchString(a) {
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

// WatchApplicationTokens keeps auth's grants to the labeled Secrets in
// informers, which must hold Secrets by ApplicationTokenSelector only:
// every change reads them all again, and problems are logged by Secret and
// field, never with a token.
func WatchApplicationTokens(ctx context.Context, informers cache.Cache, auth *TokenAuthorizer, logger *slog.Logger) error {
	informer, err := informers.GetInformer(ctx, &corev1.Secret{})
	if err != nil {
		return fmt.Errorf("watching application token Secrets: %w", err)
	}
	reload := func() {
		var list corev1.SecretList
		if err := informers.List(ctx, &list, client.MatchingLabelsSelector{Selector: ApplicationTokenSelector()}); err != nil {
			logger.Error("listing application token Secrets", "error", err)
			return
		}
		grants, problems := GrantsFromSecrets(list.Items)
		for _, p := range problems {
			logger.Warn("an application token is not used", "problem", p)
		}
		auth.SetGrants(grants)
	}
	_, err = informer.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { reload() },
		UpdateFunc: func(any, any) { reload() },
		DeleteFunc: func(any) { reload() },
	})
	if err != nil {
		return fmt.Errorf("watching application token Secrets: %w", err)
	}
	return nil
}
