package gateway

import (
	"context"
	"crypto/sha256"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
)

// bearerToken reads a request's bearer token.
func bearerToken(r *http.Request) string {
	const prefix = "Bearer "
	h := r.Header.Get("Authorization")
	if len(h) > len(prefix) && strings.EqualFold(h[:len(prefix)], prefix) {
		return strings.TrimSpace(h[len(prefix):])
	}
	return ""
}

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

func (g Grant) allows(ref AgentRef, verb Verb) bool {
	return g.Namespace == ref.Namespace && (len(g.Agents) == 0 || slices.Contains(g.Agents, ref.Name)) && slices.Contains(g.Verbs, verb)
}

// TokenAuthorizer authorizes application tokens by their grants. A token
// it does not know goes to Next; without Next it is refused.
type TokenAuthorizer struct {
	Next Authorizer

	mu     sync.RWMutex
	grants map[[sha256.Size]byte]Grant
}

// SetGrants replaces the known tokens, keyed by the token. Only the
// tokens' SHA-256 digests are kept.
func (a *TokenAuthorizer) SetGrants(grants map[string]Grant) {
	byDigest := make(map[[sha256.Size]byte]Grant, len(grants))
	for token, g := range grants {
		byDigest[sha256.Sum256([]byte(token))] = g
	}
	a.mu.Lock()
	a.grants = byDigest
	a.mu.Unlock()
}

// Authorize implements Authorizer.
func (a *TokenAuthorizer) Authorize(ctx context.Context, r *http.Request, ref AgentRef, verb Verb) error {
	token := bearerToken(r)
	if token == "" {
		if a.Next != nil {
			return a.Next.Authorize(ctx, r, ref, verb)
		}
		return fmt.Errorf("%w: a bearer token is required", ErrUnauthenticated)
	}
	// Looking up the digest rather than the token keeps the lookup's time
	// from telling anything of the tokens.
	a.mu.RLock()
	g, ok := a.grants[sha256.Sum256([]byte(token))]
	a.mu.RUnlock()
	switch {
	case !ok && a.Next != nil:
		return a.Next.Authorize(ctx, r, ref, verb)
	case !ok:
		return fmt.Errorf("%w: the bearer token is not known", ErrUnauthenticated)
	case !g.allows(ref, verb):
		return fmt.Errorf("%w: the token of %s may not %s sessions of Agent %s", ErrForbidden, g.Source, verb, ref)
	}
	return nil
}
