package mcp

import (
	"crypto/sha256"
	"encoding/hex"
	"strings"
)

// MaxToolNameLength is the longest tool name every provider accepts.
const MaxToolNameLength = 64

// ToolName is the name a model sees for a server's tool:
// "<server>__<tool>", with every character other than a letter, digit, '_'
// or '-' replaced by '_', and a name over 64 characters shortened with a
// hash of the whole name, so two long names stay apart.
func ToolName(server, tool string) string {
	name := sanitize(server) + "__" + sanitize(tool)
	if len(name) <= MaxToolNameLength {
		return name
	}
	sum := sha256.Sum256([]byte(server + "\x00" + tool))
	suffix := "_" + hex.EncodeToString(sum[:])[:12]
	return name[:MaxToolNameLength-len(suffix)] + suffix
}

func sanitize(s string) string {
	return strings.Map(func(r rune) rune {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '_', r == '-':
			return r
		}
		return '_'
	}, s)
}
