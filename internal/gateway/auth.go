package gateway

import (
	"context"
	"crypto/sha256"
	"fmt"
	"net/http"
	"strings"
	"sync"

	"github.com/stepwise-run/stepwise/internal/grants"
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

// TokenAuthorizer authorizes application tokens by their grants. A token
// it does not know goes to Next; without Next it is refused.
type TokenAuthorizer struct {
	Next Authorizer

	mu     sync.RWMutex
	grants map[[sha256.Size]byte]grants.Grant
}

// SetGrants replaces the known tokens, keyed by the token. Only the
// tokens' SHA-256 digests are kept.
func (a *TokenAuthorizer) SetGrants(byToken map[string]grants.Grant) {
	byDigest := make(map[[sha256.Size]byte]grants.Grant, len(byToken))
	for token, g := range byToken {
		byDigest[sha256.Sum256([]byte(token))] = g
	}
	a.mu.Lock()
	a.grants = byDigest
	a.mu.Unlock()
}

// Authenticate implements Authorizer.
func (a *TokenAuthorizer) Authenticate(ctx context.Context, r *http.Request) error {
	if _, ok := a.grant(r); ok {
		return nil
	}
	if a.Next != nil {
		return a.Next.Authenticate(ctx, r)
	}
	if bearerToken(r) == "" {
		return fmt.Errorf("%w: a bearer token is required", ErrUnauthenticated)
	}
	return fmt.Errorf("%w: the bearer token is not known", ErrUnauthenticated)
}

// grant finds the grant of the request's token.
func (a *TokenAuthorizer) grant(r *http.Request) (grants.Grant, bool) {
	token := bearerToken(r)
	if token == "" {
		return grants.Grant{}, false
	}
	// Looking up the digest rather than the token keeps the lookup's time
	// from telling anything of the tokens.
	a.mu.RLock()
	defer a.mu.RUnlock()
	g, ok := a.grants[sha256.Sum256([]byte(token))]
	return g, ok
}

// Authorize implements Authorizer.
func (a *TokenAuthorizer) Authorize(ctx context.Context, r *http.Request, ref AgentRef, verb grants.Verb) error {
	g, ok := a.grant(r)
	switch {
	case !ok && a.Next != nil:
		return a.Next.Authorize(ctx, r, ref, verb)
	case !ok:
		return a.Authenticate(ctx, r)
	case !g.Allows(ref.Namespace, ref.Name, verb):
		return fmt.Errorf("%w: the token of %s may not %s sessions of Agent %s", ErrForbidden, g.Source, verb, ref)
	}
	return nil
}
