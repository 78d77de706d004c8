// Package hubapi is the event hub's HTTP face: workers publish session
// events to it in batches, and gateway replicas read them. Both sides prove
// themselves with tokens derived from the hub key, so a worker of one Agent
// can write only that Agent's sessions, and only gateways can read.
package hubapi

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"strings"
)

// MinKeyBytes is the shortest hub key accepted.
const MinKeyBytes = 32

// Keyring derives and checks the hub's tokens from its key.
type Keyring struct {
	key []byte
}

// NewKeyring returns a keyring for a key of at least MinKeyBytes.
func NewKeyring(key []byte) (*Keyring, error) {
	if len(key) < MinKeyBytes {
		return nil, fmt.Errorf("the event hub key has %d bytes; it needs at least %d", len(key), MinKeyBytes)
	}
	return &Keyring{key: append([]byte(nil), key...)}, nil
}

func (k *Keyring) mac(parts ...string) string {
	m := hmac.New(sha256.New, k.key)
	m.Write([]byte(strings.Join(parts, "\x00")))
	return hex.EncodeToString(m.Sum(nil))
}

// ReadKeyFile reads the hub key from a file, such as a mounted Secret key,
// without the line end an editor may leave.
func ReadKeyFile(path string) (*Keyring, error) {
	key, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	keys, err := NewKeyring([]byte(strings.TrimSpace(string(key))))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return keys, nil
}

// PublishToken is the token a worker of one Agent publishes with. The
// operator hands it to the Agent's workers only.
func (k *Keyring) PublishToken(namespace, agent string) string {
	return namespace + "/" + agent + "/" + k.mac("publish", namespace, agent)
}

// ReadToken is the token gateway replicas read with.
func (k *Keyring) ReadToken() string { return k.mac("read") }

// errUnauthorized is every refused token, with no hint of which part was
// wrong.
var errUnauthorized = errors.New("the event hub refuses this token")

// checkPublish returns the Agent a publish token was made for.
func (k *Keyring) checkPublish(token string) (namespace, agent string, err error) {
	parts := strings.Split(token, "/")
	if len(parts) != 3 || parts[0] == "" || parts[1] == "" {
		return "", "", errUnauthorized
	}
	if !hmac.Equal([]byte(parts[2]), []byte(k.mac("publish", parts[0], parts[1]))) {
		return "", "", errUnauthorized
	}
	return parts[0], parts[1], nil
}

func (k *Keyring) checkRead(token string) error {
	if !hmac.Equal([]byte(token), []byte(k.ReadToken())) {
		return errUnauthorized
	}
	return nil
}

func bearer(header string) string {
	const prefix = "Bearer "
	if len(header) > len(prefix) && strings.EqualFold(header[:len(prefix)], prefix) {
		return header[len(prefix):]
	}
	return ""
}
