package gateway_test

import (
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/stepwise-run/stepwise/internal/gateway"
)

// Random bearer tokens cost the API server a TokenReview each only within
// the gateway's limits, per client and in all; a token once accepted passes
// freely, whoever floods.
func TestUnknownTokensAreReviewedWithinLimits(t *testing.T) {
	k := startKube(t)
	ctx := t.Context()
	must(t, k.admin.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "team-a"}}))
	valid := k.serviceAccountToken(t, "team-a", "reader")
	var reviews atomic.Int64
	cfg := rest.CopyConfig(k.gatewayConfig)
	cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper {
		return roundTripFunc(func(r *http.Request) (*http.Response, error) {
			if strings.HasSuffix(r.URL.Path, "/tokenreviews") {
				reviews.Add(1)
			}
			return rt.RoundTrip(r)
		})
	})
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	auth, err := gateway.NewKubernetesAuthorizerWithLimits(cs, nil, gateway.DefaultAuthorizerCache,
		gateway.ReviewLimits{PerClient: 0.1, PerClientBurst: 5, Total: 1, TotalBurst: 8})
	if err != nil {
		t.Fatal(err)
	}
	from := func(client, token string) *http.Request {
		r := requestWith(token)
		r.RemoteAddr = client + ":41000"
		return r
	}
	must(t, auth.Authenticate(ctx, from("10.0.0.9", valid)))
	limited := 0
	for i := range 100 {
		err := auth.Authenticate(ctx, from("10.0.0.1", fmt.Sprintf("random-token-%d", i)))
		switch {
		case err != nil && strings.Contains(err.Error(), "unknown bearer tokens"):
			limited++
		case !errors.Is(err, gateway.ErrUnauthenticated):
			t.Fatalf("a random token: %v", err)
		}
	}
	if limited < 90 {
		t.Errorf("%d of 100 random tokens from one client were refused unreviewed, want all past the burst of 5", limited)
	}
	if n := reviews.Load(); n > 8 {
		t.Errorf("100 random tokens cost %d TokenReviews; the limit allows 8", n)
	}
	// Another client is reviewed from its own allowance, and the token
	// accepted before passes for everyone, even the flooding client.
	if err := auth.Authenticate(ctx, from("10.0.0.2", "another-random-token")); !errors.Is(err, gateway.ErrUnauthenticated) {
		t.Errorf("another client's first unknown token: %v, want it reviewed and refused", err)
	}
	must(t, auth.Authenticate(ctx, from("10.0.0.1", valid)))
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }
