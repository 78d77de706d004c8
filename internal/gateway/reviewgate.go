package gateway

import (
	"crypto/sha256"
	"net"
	"net/http"
	"sync"
	"time"

	"golang.org/x/time/rate"
)

// ReviewLimits bound the TokenReviews that tokens the gateway has not seen
// accepted may cost: random bearer tokens must not each cost the API server
// a review without end. A token once accepted passes freely while its
// answer is cached.
type ReviewLimits struct {
	// PerClient is the steady rate of unknown tokens one client address may
	// present, and PerClientBurst how many at once.
	PerClient      rate.Limit
	PerClientBurst int
	// Total is the rate for all clients together, and TotalBurst its
	// burst.
	Total      rate.Limit
	TotalBurst int
}

// DefaultReviewLimits let a client sign in a few times a second, and the
// gateway ask the API server a hundred reviews a second at most.
var DefaultReviewLimits = ReviewLimits{PerClient: 2, PerClientBurst: 10, Total: 100, TotalBurst: 200}

// maxKnownTokens bounds the accepted tokens the gate remembers; past it a
// new token is reviewed as an unknown one, within the limits.
const maxKnownTokens = 100_000

// reviewGate admits a token to review: freely when it was accepted within
// the cache's TTL, within the limits otherwise.
type reviewGate struct {
	limits ReviewLimits
	ttl    time.Duration
	now    func() time.Time
	total  *rate.Limiter

	mu      sync.Mutex
	known   map[[sha256.Size]byte]time.Time // accepted token → until
	clients map[string]*clientLimiter
}

type clientLimiter struct {
	*rate.Limiter
	used time.Time
}

func newReviewGate(limits ReviewLimits, ttl time.Duration) *reviewGate {
	return &reviewGate{limits: limits, ttl: ttl, now: time.Now, total: rate.NewLimiter(limits.Total, limits.TotalBurst),
		known: map[[sha256.Size]byte]time.Time{}, clients: map[string]*clientLimiter{}}
}

// admit says whether the request's token may be reviewed now.
func (g *reviewGate) admit(r *http.Request, token string) bool {
	now := g.now()
	digest := sha256.Sum256([]byte(token))
	g.mu.Lock()
	defer g.mu.Unlock()
	if until, ok := g.known[digest]; ok && now.Before(until) {
		return true
	}
	client, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		client = r.RemoteAddr
	}
	l := g.clients[client]
	if l == nil {
		if len(g.clients) >= 10_000 {
			for k, v := range g.clients {
				if now.Sub(v.used) > time.Minute {
					delete(g.clients, k)
				}
			}
		}
		l = &clientLimiter{Limiter: rate.NewLimiter(g.limits.PerClient, g.limits.PerClientBurst)}
		g.clients[client] = l
	}
	l.used = now
	// The client's allowance first, so one client's flood does not spend
	// the total that others need.
	return l.AllowN(now, 1) && g.total.AllowN(now, 1)
}

// accepted remembers a token the API server accepted.
func (g *reviewGate) accepted(token string) {
	now := g.now()
	g.mu.Lock()
	defer g.mu.Unlock()
	if len(g.known) >= maxKnownTokens {
		for k, until := range g.known {
			if !now.Before(until) {
				delete(g.known, k)
			}
		}
		if len(g.known) >= maxKnownTokens {
			return
		}
	}
	g.known[sha256.Sum256([]byte(token))] = now.Add(g.ttl)
}
