// The hub's keyring: who may write to the hub and who may read from it.
//
// Writing and reading use separate credentials. A worker publishes with
// its Agent's publish token, which the operator signs with a publish key
// and which names the Agent's namespace, name and UID and an expiry; the
// hub lets it write that Agent's sessions only. A gateway reads with a
// read token, a random secret of its own that can mint nothing. Each side
// takes a list, so a key or token is replaced with no downtime: add the
// new one, let every holder move to it, remove the old one.

package hub

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"time"
)

// MinKeyBytes is the shortest publish key, and the shortest read token,
// accepted.
const MinKeyBytes = 32

// DefaultTokenLifetime is how long a publish token is valid. The operator
// renews it when a third of that is left.
const DefaultTokenLifetime = 30 * 24 * time.Hour

// keyIDPattern is what a key ID may be: short, and safe in a token.
var keyIDPattern = regexp.MustCompile(`^[a-z0-9]{1,16}$`)

// PublishKeys sign and check publish tokens. The first key signs; every key
// checks, so during a key change the tokens of the old key stay valid until
// their holders have new ones.
type PublishKeys struct {
	keys []namedKey
}

type namedKey struct {
	id  string
	key []byte
}

// ParsePublishKeys reads publish keys, one per line as ID:KEY, the signing
// key first. Blank lines and lines starting with # are skipped.
func ParsePublishKeys(data []byte) (*PublishKeys, error) {
	var keys PublishKeys
	seen := map[string]bool{}
	for i, line := range strings.Split(string(data), "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		id, key, ok := strings.Cut(line, ":")
		switch {
		case !ok:
			return nil, fmt.Errorf("line %d: a publish key is ID:KEY", i+1)
		case !keyIDPattern.MatchString(id):
			return nil, fmt.Errorf("line %d: key ID %q: 1 to 16 lowercase letters and digits", i+1, id)
		case seen[id]:
			return nil, fmt.Errorf("line %d: key ID %q appears twice", i+1, id)
		case len(key) < MinKeyBytes:
			return nil, fmt.Errorf("line %d: key %q has %d bytes; it needs at least %d", i+1, id, len(key), MinKeyBytes)
		}
		seen[id] = true
		keys.keys = append(keys.keys, namedKey{id: id, key: []byte(key)})
	}
	if len(keys.keys) == 0 {
		return nil, errors.New("no publish key: write one per line as ID:KEY")
	}
	return &keys, nil
}

// SigningKeyID is the ID of the key new tokens are signed with.
func (k *PublishKeys) SigningKeyID() string { return k.keys[0].id }

// PublishClaims are what a publish token says of its holder.
type PublishClaims struct {
	Namespace string    `json:"ns"`
	Agent     string    `json:"agent"`
	AgentUID  string    `json:"uid"`
	Expires   time.Time `json:"exp"`
}

func (c PublishClaims) sameAgent(o PublishClaims) bool {
	return c.Namespace == o.Namespace && c.Agent == o.Agent && c.AgentUID == o.AgentUID
}

const publishTokenPrefix = "p1"

func mac(key []byte, parts ...string) []byte {
	m := hmac.New(sha256.New, key)
	m.Write([]byte(strings.Join(parts, "\x00")))
	return m.Sum(nil)
}

// Mint signs a publish token for the claims with the signing key.
func (k *PublishKeys) Mint(c PublishClaims) string {
	c.Expires = c.Expires.UTC().Truncate(time.Second)
	payload, _ := json.Marshal(c)
	body := base64.RawURLEncoding.EncodeToString(payload)
	signer := k.keys[0]
	sum := mac(signer.key, "publish", signer.id, body)
	return strings.Join([]string{publishTokenPrefix, signer.id, body, base64.RawURLEncoding.EncodeToString(sum)}, ".")
}

// errUnauthorized is every refused token, with no hint of which part was
// wrong.
var errUnauthorized = errors.New("the event hub refuses this token")

// maxTokenBytes bounds what a check reads of a header.
const maxTokenBytes = 4096

// Check returns the claims of a publish token signed by any of the keys and
// not expired at now.
func (k *PublishKeys) Check(token string, now time.Time) (PublishClaims, error) {
	claims, _, err := k.check(token)
	if err != nil {
		return PublishClaims{}, err
	}
	if !now.Before(claims.Expires) {
		return PublishClaims{}, errUnauthorized
	}
	return claims, nil
}

func (k *PublishKeys) check(token string) (PublishClaims, string, error) {
	if len(token) > maxTokenBytes {
		return PublishClaims{}, "", errUnauthorized
	}
	parts := strings.Split(token, ".")
	if len(parts) != 4 || parts[0] != publishTokenPrefix {
		return PublishClaims{}, "", errUnauthorized
	}
	got, err := base64.RawURLEncoding.DecodeString(parts[3])
	if err != nil {
		return PublishClaims{}, "", errUnauthorized
	}
	var signer *namedKey
	for i := range k.keys {
		if k.keys[i].id == parts[1] {
			signer = &k.keys[i]
		}
	}
	if signer == nil || !hmac.Equal(got, mac(signer.key, "publish", signer.id, parts[2])) {
		return PublishClaims{}, "", errUnauthorized
	}
	payload, err := base64.RawURLEncoding.DecodeString(parts[2])
	if err != nil {
		return PublishClaims{}, "", errUnauthorized
	}
	var claims PublishClaims
	dec := json.NewDecoder(bytes.NewReader(payload))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&claims); err != nil || claims.Namespace == "" || claims.Agent == "" || claims.AgentUID == "" {
		return PublishClaims{}, "", errUnauthorized
	}
	return claims, signer.id, nil
}

// Renew returns the publish token an Agent's workers should hold at now:
// current when it is signed by the signing key, names the same Agent, and
// has more than a third of lifetime left; a new one otherwise. renewAt is
// when the returned token should be renewed.
func (k *PublishKeys) Renew(current string, want PublishClaims, now time.Time, lifetime time.Duration) (token string, renewAt time.Time) {
	if lifetime <= 0 {
		lifetime = DefaultTokenLifetime
	}
	if claims, keyID, err := k.check(current); err == nil && keyID == k.SigningKeyID() && claims.sameAgent(want) {
		renewAt = claims.Expires.Add(-lifetime / 3)
		if now.Before(renewAt) {
			return current, renewAt
		}
	}
	want.Expires = now.Add(lifetime)
	token = k.Mint(want)
	claims, _, _ := k.check(token)
	return token, claims.Expires.Add(-lifetime / 3)
}

// ReadTokens are the tokens the hub lets read. Each is a random secret held
// by the gateways; two are valid while gateways move from one to the next.
type ReadTokens struct {
	tokens [][]byte
}

// ParseReadTokens reads read tokens, one per line, the one gateways use
// first.
func ParseReadTokens(data []byte) (*ReadTokens, error) {
	var out ReadTokens
	for i, line := range strings.Split(string(data), "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		if len(line) < MinKeyBytes {
			return nil, fmt.Errorf("line %d: a read token has %d bytes; it needs at least %d", i+1, len(line), MinKeyBytes)
		}
		out.tokens = append(out.tokens, []byte(line))
	}
	if len(out.tokens) == 0 {
		return nil, errors.New("no read token: write one per line")
	}
	return &out, nil
}

// Current is the token a gateway reads with.
func (t *ReadTokens) Current() string { return string(t.tokens[0]) }

// Check accepts any of the tokens. Each is compared in full, so the time
// taken tells nothing of which one nearly matched.
func (t *ReadTokens) Check(token string) error {
	ok := false
	for _, want := range t.tokens {
		// Compare digests: equal length, so no length leaks either.
		a, b := sha256.Sum256([]byte(token)), sha256.Sum256(want)
		if hmac.Equal(a[:], b[:]) {
			ok = true
		}
	}
	if !ok {
		return errUnauthorized
	}
	return nil
}
