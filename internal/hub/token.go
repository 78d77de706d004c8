package hub

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strconv"
	"strings"
)

// Token is a reader's place in one session's events. It is opaque to
// readers, who pass it back as Last-Event-ID; it is not a secret, since
// every route that takes one first checks that the caller may read the
// session.
type Token struct {
	// Epoch is the hub run that gave the token.
	Epoch string
	// Gen tells apart the buffers the hub kept for the session, should it
	// drop the session and see it again.
	Gen uint64
	// Seq is the last event the reader has.
	Seq uint64
	// Binding ties the token to its session, so another session's token
	// is refused rather than read as a place in this one.
	Binding string
}

const tokenPrefix = "v1"

// maxTokenLength bounds what ParseToken reads of a header a browser sends.
const maxTokenLength = 128

// String is the token's wire form.
func (t Token) String() string {
	return fmt.Sprintf("%s.%s.%d.%d.%s", tokenPrefix, t.Epoch, t.Gen, t.Seq, t.Binding)
}

// ParseToken reads a token's wire form. It checks the form only; the hub
// checks the rest.
func ParseToken(s string) (Token, error) {
	if len(s) > maxTokenLength {
		return Token{}, ErrInvalidToken
	}
	parts := strings.Split(s, ".")
	if len(parts) != 5 || parts[0] != tokenPrefix || !isHex(parts[1]) || !isHex(parts[4]) {
		return Token{}, ErrInvalidToken
	}
	gen, err := strconv.ParseUint(parts[2], 10, 64)
	if err != nil {
		return Token{}, ErrInvalidToken
	}
	seq, err := strconv.ParseUint(parts[3], 10, 64)
	if err != nil {
		return Token{}, ErrInvalidToken
	}
	return Token{Epoch: parts[1], Gen: gen, Seq: seq, Binding: parts[4]}, nil
}

func isHex(s string) bool {
	if s == "" {
		return false
	}
	_, err := hex.DecodeString(s)
	return err == nil
}

func binding(epoch string, k Key, gen uint64) string {
	sum := sha256.Sum256([]byte(epoch + "\x00" + k.Namespace + "\x00" + k.Agent + "\x00" + k.AgentUID + "\x00" + k.Session + "\x00" + strconv.FormatUint(gen, 10)))
	return hex.EncodeToString(sum[:8])
}

// NewEpoch returns a random epoch for a hub run.
func NewEpoch() string {
	b := make([]byte, 8)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
