package media

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strings"
	"unicode/utf8"
)

// Limits on images, the same in every store and every session.
const (
	// MaxImageBytes is the largest image. Its base64 text is 5,000,000
	// bytes, which fits every provider's per-image limit.
	MaxImageBytes = 3_750_000
	// MaxImagesPerMessage is the most images one user message or one tool
	// result carries.
	MaxImagesPerMessage = 20
)

// Reference is what a session stores of an image: where its bytes are and
// what they must be. The bytes live in a media store, under a key made of
// their SHA-256, so the same image is one object however often it is sent.
type Reference struct {
	// Type is always "image".
	Type string `json:"type"`
	// URI is the image's location: <store URI>/sha256/<SHA256>.
	URI string `json:"uri"`
	// MIMEType is the image's type, as its bytes show it.
	MIMEType string `json:"mimeType"`
	// SHA256 is the lowercase hex SHA-256 of the bytes.
	SHA256 string `json:"sha256"`
	// SizeBytes is the number of bytes.
	SizeBytes int64 `json:"sizeBytes"`
}

// ReferenceType is a Reference's Type.
const ReferenceType = "image"

// Store keeps image bytes by their SHA-256. PutImage is idempotent: the
// same bytes make the same reference and one object, so a retried Step, a
// client sending again, or two workers at once write one image. GetImage
// returns bytes only after VerifyBytes accepted them.
type Store interface {
	// StoreURI is the location every image URI of the store starts with.
	StoreURI() string
	// PutImage stores an image and returns its reference.
	PutImage(ctx context.Context, data []byte) (Reference, error)
	// GetImage reads the bytes of a reference of this store.
	GetImage(ctx context.Context, ref Reference) ([]byte, error)
}

// ErrInvalidImage matches every *ValidationError with errors.Is.
var ErrInvalidImage = errors.New("invalid image")

// ValidationError refuses image bytes or a reference. Field names what is
// wrong, such as images[2].sha256; the message never holds image bytes.
type ValidationError struct {
	Field  string
	Reason string
}

func (e *ValidationError) Error() string {
	if e.Field == "" {
		return "invalid image: " + e.Reason
	}
	return "invalid image: " + e.Field + ": " + e.Reason
}

// Is makes errors.Is(err, ErrInvalidImage) true.
func (e *ValidationError) Is(target error) bool { return target == ErrInvalidImage }

func invalid(field, format string, args ...any) error {
	return &ValidationError{Field: field, Reason: fmt.Sprintf(format, args...)}
}

// ErrStore matches every *StoreError with errors.Is.
var ErrStore = errors.New("media store error")

// StoreError is a store that could not write or read an image: the object
// is missing, the service refused, or the bytes it holds are not the ones
// referenced. URI names the image; the message never holds a credential.
type StoreError struct {
	Op  string
	URI string
	Err error
}

func (e *StoreError) Error() string {
	if e.URI == "" {
		return fmt.Sprintf("media store: %s: %v", e.Op, e.Err)
	}
	return fmt.Sprintf("media store: %s %s: %v", e.Op, e.URI, e.Err)
}

// Unwrap returns the cause.
func (e *StoreError) Unwrap() error { return e.Err }

// Is makes errors.Is(err, ErrStore) true.
func (e *StoreError) Is(target error) bool { return target == ErrStore }

// CheckStoreURI refuses a store location whose image URIs would be longer
// than MaxImageURILength, so a store refuses to be built rather than make
// references every session refuses.
func CheckStoreURI(storeURI string) error {
	if n := ImageURILength(storeURI); n > MaxImageURILength {
		return fmt.Errorf("store %s makes image URIs of %d bytes, more than the %d allowed", storeURI, n, MaxImageURILength)
	}
	return nil
}

// ImageURI is the URI of the image with this SHA-256 in a store.
func ImageURI(storeURI, sum string) string {
	return storeURI + "/sha256/" + sum
}

// BuildReference checks image bytes and makes their reference in a store.
func BuildReference(data []byte, storeURI string) (Reference, error) {
	if len(data) == 0 {
		return Reference{}, invalid("", "the image is empty")
	}
	if len(data) > MaxImageBytes {
		return Reference{}, invalid("", "the image has %d bytes, more than the %d allowed", len(data), MaxImageBytes)
	}
	mime := Sniff(data)
	if mime == "" {
		return Reference{}, invalid("", "the bytes are not a PNG, JPEG, GIF or WebP image")
	}
	sum := sha256.Sum256(data)
	ref := Reference{
		Type:      ReferenceType,
		URI:       ImageURI(storeURI, hex.EncodeToString(sum[:])),
		MIMEType:  mime,
		SHA256:    hex.EncodeToString(sum[:]),
		SizeBytes: int64(len(data)),
	}
	if err := ValidateReference(ref); err != nil {
		return Reference{}, err
	}
	return ref, nil
}

// ValidateReference checks one reference on its own: its type, a
// lowercase hex SHA-256, a supported MIME type, a size within the limit,
// and a URI of at most MaxImageURILength bytes of UTF-8, without control
// characters, that ends in /sha256/<SHA256>.
func ValidateReference(ref Reference) error {
	return validateReference("", ref)
}

// ValidateReferences checks the images of one message or tool result:
// at most MaxImagesPerMessage, each valid. Errors name images[i].
func ValidateReferences(refs []Reference) error {
	if len(refs) > MaxImagesPerMessage {
		return invalid("images", "%d images, more than the %d one message may carry", len(refs), MaxImagesPerMessage)
	}
	for i, ref := range refs {
		if err := validateReference(fmt.Sprintf("images[%d].", i), ref); err != nil {
			return err
		}
	}
	return nil
}

func validateReference(field string, ref Reference) error {
	if ref.Type != ReferenceType {
		return invalid(field+"type", "%q is not %q", ref.Type, ReferenceType)
	}
	if !isSHA256Hex(ref.SHA256) {
		return invalid(field+"sha256", "must be 64 lowercase hex digits")
	}
	if !slices.Contains(MIMETypes, ref.MIMEType) {
		return invalid(field+"mimeType", "%q is not one of %s", ref.MIMEType, strings.Join(MIMETypes, ", "))
	}
	if ref.SizeBytes < 1 || ref.SizeBytes > MaxImageBytes {
		return invalid(field+"sizeBytes", "%d is not between 1 and %d", ref.SizeBytes, MaxImageBytes)
	}
	switch {
	case len(ref.URI) > MaxImageURILength:
		return invalid(field+"uri", "%d bytes, more than the %d allowed", len(ref.URI), MaxImageURILength)
	case !utf8.ValidString(ref.URI):
		return invalid(field+"uri", "not UTF-8")
	case strings.ContainsFunc(ref.URI, func(r rune) bool { return r < 0x20 || r == 0x7f }):
		return invalid(field+"uri", "holds a control character")
	case !strings.HasSuffix(ref.URI, "/sha256/"+ref.SHA256):
		return invalid(field+"uri", "does not end in /sha256/<sha256>")
	case !strings.Contains(strings.TrimSuffix(ref.URI, "/sha256/"+ref.SHA256), "://"):
		return invalid(field+"uri", "has no scheme")
	}
	return nil
}

func isSHA256Hex(s string) bool {
	if len(s) != 64 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

// RequireStoreReference checks that a valid reference names an image of
// this store, so a read never leaves the store's own bucket and prefix or
// directory, whatever URI a message carries.
func RequireStoreReference(ref Reference, storeURI string) error {
	if err := ValidateReference(ref); err != nil {
		return err
	}
	if ref.URI != ImageURI(storeURI, ref.SHA256) {
		return &StoreError{Op: "read", URI: ref.URI, Err: fmt.Errorf("the image is not in this store (%s)", storeURI)}
	}
	return nil
}

// VerifyBytes checks that bytes read for a reference are the ones it was
// made from: its size, its SHA-256, and a well-formed image of its type.
func VerifyBytes(ref Reference, data []byte) error {
	if int64(len(data)) != ref.SizeBytes {
		return &StoreError{Op: "verify", URI: ref.URI, Err: fmt.Errorf("read %d bytes, the reference has %d", len(data), ref.SizeBytes)}
	}
	sum := sha256.Sum256(data)
	want, err := hex.DecodeString(ref.SHA256)
	if err != nil || !bytes.Equal(sum[:], want) {
		return &StoreError{Op: "verify", URI: ref.URI, Err: errors.New("the bytes' SHA-256 differs from the reference's")}
	}
	if got := Sniff(data); got != ref.MIMEType {
		return &StoreError{Op: "verify", URI: ref.URI, Err: fmt.Errorf("the bytes are not a well-formed %s image", ref.MIMEType)}
	}
	return nil
}
