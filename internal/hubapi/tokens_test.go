package hubapi

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stepwise-run/stepwise/internal/hub"
	"github.com/stepwise-run/stepwise/internal/session"
)

func TestTokensKeepAgentsApartAndOnlyGatewaysRead(t *testing.T) {
	now := time.Now()
	th := startHub(t, hub.Limits{}, func(o *ServerOptions) { o.Now = func() time.Time { return now } })
	otherHub, _ := hub.ParsePublishKeys([]byte("k1:zzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzz"))
	publish := func(token string, body string) int {
		req, _ := http.NewRequest(http.MethodPost, th.url+PublishPath, strings.NewReader(body))
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_ = resp.Body.Close()
		return resp.StatusCode
	}
	one := `{"events":[{"session":"s-1","event":{"type":"text_delta","payload":{"text":"a"}}}]}`
	aToken := tokenOf(testAgent)
	parts := strings.Split(aToken, ".")
	bClaims, _ := json.Marshal(hub.PublishClaims{Namespace: "team-b", Agent: "support", AgentUID: "uid-support", Expires: now.Add(time.Hour)})
	forged := strings.Join([]string{parts[0], parts[1], base64.RawURLEncoding.EncodeToString(bClaims), parts[3]}, ".")
	expired := testAgent
	expired.Expires = now.Add(-time.Second)
	for name, token := range map[string]string{
		"no token":                    "",
		"another hub's token":         otherHub.Mint(hub.PublishClaims{Namespace: "team-a", Agent: "support", AgentUID: "uid-support", Expires: now.Add(time.Hour)}),
		"one Agent's MAC for another": forged,
		"the read token":              testReaders.Current(),
		"an expired token":            testKeys.Mint(expired),
		"a token with the MAC cut":    strings.Join(parts[:3], ".") + ".",
		"a token of an unknown key":   strings.Join([]string{parts[0], "k9", parts[2], parts[3]}, "."),
		"a token with no Agent UID":   testKeys.Mint(hub.PublishClaims{Namespace: "team-a", Agent: "support", Expires: now.Add(time.Hour)}),
	} {
		if got := publish(token, one); got != http.StatusUnauthorized {
			t.Errorf("publish with %s = %d, want 401", name, got)
		}
	}
	if got := publish(aToken, one); got != http.StatusNoContent {
		t.Fatalf("publish = %d", got)
	}
	// team-a's worker wrote session s-1 of team-a/support with its UID only:
	// an Agent made again under the name is another Agent.
	r := th.reader()
	for _, k := range []hub.Key{
		{Namespace: "team-b", Agent: "support", AgentUID: "uid-support", Session: "s-1"},
		{Namespace: "team-a", Agent: "billing", AgentUID: "uid-support", Session: "s-1"},
		{Namespace: "team-a", Agent: "support", AgentUID: "uid-of-a-new-support", Session: "s-1"},
	} {
		if th.hub.End(k).Seq != 0 {
			t.Errorf("%+v has events", k)
		}
	}
	a := keyOf(testAgent, "s-1")
	if got := th.hub.End(a); got.Seq != 1 {
		t.Errorf("team-a's session has %d events, want 1", got.Seq)
	}
	// Reading takes a read token; a publish token cannot read.
	bad := NewReader(th.url, func() string { return aToken }, nil)
	if _, err := bad.Position(context.Background(), a, ""); err == nil || !strings.Contains(err.Error(), "401") {
		t.Errorf("reading with a publish token: %v, want 401", err)
	}
	if _, err := r.Position(context.Background(), a, ""); err != nil {
		t.Errorf("reading with the read token: %v", err)
	}
}

func TestKeysAndReadTokensChangeWithNoDowntime(t *testing.T) {
	oldKeys, _ := hub.ParsePublishKeys([]byte("old:an old publish key of 32 bytes or more"))
	both, _ := hub.ParsePublishKeys([]byte("new:a new publish key, 32 bytes or more\nold:an old publish key of 32 bytes or more"))
	newOnly, _ := hub.ParsePublishKeys([]byte("new:a new publish key, 32 bytes or more"))
	oldRead, _ := hub.ParseReadTokens([]byte("an old read token of 32 bytes or more"))
	bothRead, _ := hub.ParseReadTokens([]byte("a new read token of 32 bytes or more!\nan old read token of 32 bytes or more"))
	var keys atomic.Pointer[hub.PublishKeys]
	var readers atomic.Pointer[hub.ReadTokens]
	keys.Store(oldKeys)
	readers.Store(oldRead)
	th := startHub(t, hub.Limits{}, func(o *ServerOptions) { o.PublishKeys, o.ReadTokens = keys.Load, readers.Load })
	now := time.Now()
	oldToken, _ := oldKeys.Renew("", testAgent, now, time.Hour)
	publish := func(token string) error {
		return post(context.Background(), http.DefaultClient, th.url, token, PublishRequest{Events: []PublishedEvent{{Session: "s-1", Event: delta("t1", "a")}}})
	}
	if err := publish(oldToken); err != nil {
		t.Fatal(err)
	}
	// The new key signs; tokens of the old one are valid until renewed.
	keys.Store(both)
	readers.Store(bothRead)
	if err := publish(oldToken); err != nil {
		t.Errorf("a token of the old key during the change: %v", err)
	}
	newToken, _ := both.Renew(oldToken, testAgent, now, time.Hour)
	if newToken == oldToken || strings.Split(newToken, ".")[1] != "new" {
		t.Fatalf("Renew kept a token of the old key: %s", newToken)
	}
	if err := publish(newToken); err != nil {
		t.Errorf("a token of the new key: %v", err)
	}
	for _, token := range []string{oldRead.Current(), bothRead.Current()} {
		if _, err := NewReader(th.url, func() string { return token }, nil).Position(context.Background(), keyOf(testAgent, "s-1"), ""); err != nil {
			t.Errorf("read token %q during the change: %v", token[:6], err)
		}
	}
	// The old key gone, its tokens go with it.
	keys.Store(newOnly)
	if err := publish(oldToken); err == nil || !strings.Contains(err.Error(), "401") {
		t.Errorf("a token of a removed key: %v, want 401", err)
	}
	if err := publish(newToken); err != nil {
		t.Errorf("the new token after the change: %v", err)
	}
}

func TestReadersAreToldWhichTokensTheHubRefuses(t *testing.T) {
	th := startHub(t, hub.Limits{SessionBytes: 1000})
	k := keyOf(testAgent, "s-1")
	start := th.hub.End(k).String()
	for range 50 {
		th.hub.Publish(k, []session.Event{delta("t1", "xxxxxxxxxxxxxxxxxxxx")})
	}
	r := th.reader()
	if _, err := r.Events(context.Background(), k, start, 0); !errors.Is(err, hub.ErrExpiredToken) {
		t.Errorf("a token before dropped events: %v, want hub.ErrExpiredToken", err)
	}
	for _, tok := range []string{"", "garbage", th.hub.End(keyOf(testAgent, "s-2")).String()} {
		if _, err := r.Events(context.Background(), k, tok, 0); !errors.Is(err, hub.ErrInvalidToken) {
			t.Errorf("token %q: %v, want hub.ErrInvalidToken", tok, err)
		}
	}
	if _, err := r.Events(context.Background(), k, th.hub.End(k).String(), 31*time.Second); err == nil || !strings.Contains(err.Error(), "wait=") {
		t.Errorf("a wait over the limit: %v, want a refusal naming wait", err)
	}
	// A waiting read returns as soon as an event comes.
	end := th.hub.End(k).String()
	got := make(chan []WireRecord)
	go func() {
		records, _ := r.Events(context.Background(), k, end, 20*time.Second)
		got <- records
	}()
	time.Sleep(100 * time.Millisecond)
	th.hub.Publish(k, []session.Event{delta("t1", "now")})
	select {
	case records := <-got:
		if texts(records) != "now" {
			t.Errorf("waiting read = %q", texts(records))
		}
	case <-time.After(10 * time.Second):
		t.Fatal("a waiting read did not return when an event came")
	}
}
