package hub

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

var (
	testKeys, _ = ParsePublishKeys([]byte("k1:0123456789abcdef0123456789abcdef\n"))
	testAgent   = PublishClaims{Namespace: "team-a", Agent: "support", AgentUID: "uid-support"}
)

func TestRenewKeepsATokenUntilAThirdOfItsLifeIsLeft(t *testing.T) {
	now := time.Date(2026, 12, 7, 0, 0, 0, 0, time.UTC)
	first, renewAt := testKeys.Renew("", testAgent, now, 30*time.Hour)
	if want := now.Add(20 * time.Hour); !renewAt.Equal(want) {
		t.Errorf("renewAt = %s, want %s", renewAt, want)
	}
	if kept, _ := testKeys.Renew(first, testAgent, now.Add(19*time.Hour), 30*time.Hour); kept != first {
		t.Error("a token with over a third of its life left was renewed")
	}
	renewed, next := testKeys.Renew(first, testAgent, now.Add(21*time.Hour), 30*time.Hour)
	if renewed == first || !next.Equal(now.Add(41*time.Hour)) {
		t.Errorf("a token near its expiry: kept=%v, next renewal %s", renewed == first, next)
	}
	recreated := testAgent
	recreated.AgentUID = "uid-of-a-new-support"
	if got, _ := testKeys.Renew(first, recreated, now, 30*time.Hour); got == first {
		t.Error("an Agent made again under the name kept the old Agent's token")
	}
	if got, _ := testKeys.Renew("garbage", testAgent, now, 30*time.Hour); got == "garbage" {
		t.Error("Renew kept a token that is not one")
	}
}

func TestCredentialFilesAreCheckedAndReread(t *testing.T) {
	for name, data := range map[string]string{
		"no key":           "# nothing\n",
		"no ID":            "0123456789abcdef0123456789abcdef",
		"a bad ID":         "K/1:0123456789abcdef0123456789abcdef",
		"a short key":      "k1:short",
		"an ID used twice": "k1:0123456789abcdef0123456789abcdef\nk1:0123456789abcdef0123456789abcdeX",
	} {
		if _, err := ParsePublishKeys([]byte(data)); err == nil {
			t.Errorf("publish keys with %s were accepted", name)
		}
	}
	if _, err := ParseReadTokens([]byte("short")); err == nil || !strings.Contains(err.Error(), "at least 32") {
		t.Errorf("a short read token: %v", err)
	}
	path := filepath.Join(t.TempDir(), "tokens")
	if err := os.WriteFile(path, []byte("the first read token, 32 bytes or more"), 0o600); err != nil {
		t.Fatal(err)
	}
	src, err := LoadFile(path, ParseReadTokens)
	if err != nil {
		t.Fatal(err)
	}
	clock := time.Now()
	src.now = func() time.Time { return clock }
	if err := os.WriteFile(path, []byte("the second read token, 32 bytes or more"), 0o600); err != nil {
		t.Fatal(err)
	}
	if got := src.Get().Current(); !strings.HasPrefix(got, "the first") {
		t.Errorf("reread before its interval: %q", got)
	}
	clock = clock.Add(rereadEvery)
	if got := src.Get().Current(); !strings.HasPrefix(got, "the second") {
		t.Errorf("after the interval: %q, want the new token", got)
	}
	// A bad write keeps the last good token.
	if err := os.WriteFile(path, []byte("short"), 0o600); err != nil {
		t.Fatal(err)
	}
	clock = clock.Add(rereadEvery)
	if got := src.Get().Current(); !strings.HasPrefix(got, "the second") {
		t.Errorf("after a bad write: %q, want the last good token", got)
	}
}
