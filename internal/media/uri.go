// Package media holds what sessions know of image storage: where a store's
// images live and how their URIs are formed.
package media

import (
	"strings"
)

// MaxImageURILength is the longest image URI, in bytes, that a session
// stores, the same in every core.
const MaxImageURILength = 1024

// imageKeySuffixLength is the length of "/sha256/" and 64 hex digits.
const imageKeySuffixLength = len("/sha256/") + 64

// S3StoreURI is the location of a bucket and prefix; image URIs are
// <store URI>/sha256/<sha256>.
func S3StoreURI(bucket, prefix string) string {
	if prefix == "" {
		return "s3://" + bucket
	}
	return "s3://" + bucket + "/" + prefix
}

// LocalStoreURI is the location of a local directory: the root as text,
// with every byte other than ASCII letters, digits, "-._~" and "/"
// percent-encoded.
func LocalStoreURI(root string) string {
	var b strings.Builder
	b.WriteString("file://")
	const hex = "0123456789ABCDEF"
	for i := 0; i < len(root); i++ {
		c := root[i]
		if unreservedPathByte(c) {
			b.WriteByte(c)
			continue
		}
		b.WriteByte('%')
		b.WriteByte(hex[c>>4])
		b.WriteByte(hex[c&0x0f])
	}
	return b.String()
}

func unreservedPathByte(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' ||
		c == '-' || c == '.' || c == '_' || c == '~' || c == '/'
}

// ImageURILength is the length in bytes of every image URI of a store.
func ImageURILength(storeURI string) int {
	return len(storeURI) + imageKeySuffixLength
}
