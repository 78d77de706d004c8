package media_test

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"strings"
	"testing"

	"github.com/stepwise-run/stepwise/internal/media"
	"github.com/stepwise-run/stepwise/internal/media/mediatest"
)

const store = "s3://agent-media/sessions"

func TestSniff(t *testing.T) {
	png := mediatest.PNG(4, 3, 1)
	jpg := mediatest.JPEG(4, 3, 1)
	gif := mediatest.GIF(4, 3, 1)
	webp := mediatest.WebP()
	tests := []struct {
		name string
		data []byte
		want string
	}{
		{"png", png, media.MIMEPNG},
		{"jpeg", jpg, media.MIMEJPEG},
		{"gif", gif, media.MIMEGIF},
		{"webp", webp, media.MIMEWebP},
		{"empty", nil, ""},
		{"text", []byte("hello, this is not an image at all"), ""},
		{"png signature only", png[:8], ""},
		{"png without IHDR", append(append([]byte{}, png[:12]...), []byte("IDAT0123456789abcdefghijkl")...), ""},
		{"png of zero width", withBytes(png, 16, 0, 0, 0, 0), ""},
		{"jpeg without end of image", jpg[:len(jpg)-2], ""},
		{"jpeg with a zero marker", withBytes(jpg, 3, 0x00), ""},
		{"jpeg start and end only", []byte{0xFF, 0xD8, 0xFF, 0xD9}, ""},
		{"gif header only", gif[:6], ""},
		{"gif of zero height", withBytes(gif, 8, 0, 0), ""},
		{"gif of another version", withBytes(gif, 3, '9', '0', 'a'), ""},
		{"webp with a wrong RIFF size", withBytes(webp, 4, 0x1b), ""},
		{"webp truncated", webp[:len(webp)-1], ""},
		{"webp with an unknown chunk", withBytes(webp, 12, 'A', 'L', 'P', 'H'), ""},
		{"webp whose chunk overruns", withBytes(webp, 16, 0xFF), ""},
		{"riff of another form", withBytes(webp, 8, 'W', 'A', 'V', 'E'), ""},
	}
	for _, tt := range tests {
		if got := media.Sniff(tt.data); got != tt.want {
			t.Errorf("%s: Sniff = %q, want %q", tt.name, got, tt.want)
		}
	}
}

// withBytes copies data with b written at offset.
func withBytes(data []byte, offset int, b ...byte) []byte {
	out := bytes.Clone(data)
	copy(out[offset:], b)
	return out
}

func TestBuildReference(t *testing.T) {
	png := mediatest.PNG(2, 2, 7)
	ref, err := media.BuildReference(png, store)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(png)
	want := media.Reference{Type: "image", URI: store + "/sha256/" + hex.EncodeToString(sum[:]), MIMEType: "image/png",
		SHA256: hex.EncodeToString(sum[:]), SizeBytes: int64(len(png))}
	if ref != want {
		t.Errorf("reference = %+v, want %+v", ref, want)
	}
	if err := media.VerifyBytes(ref, png); err != nil {
		t.Errorf("VerifyBytes of the bytes it was made from: %v", err)
	}

	for name, data := range map[string][]byte{
		"empty":     nil,
		"not image": []byte("<svg></svg>"),
		"too large": append(bytes.Clone(mediatest.JPEG(8, 8, 1)[:20]), make([]byte, media.MaxImageBytes)...),
	} {
		if _, err := media.BuildReference(data, store); !errors.Is(err, media.ErrInvalidImage) {
			t.Errorf("%s: BuildReference = %v, want an invalid image", name, err)
		}
	}
	long := "s3://" + strings.Repeat("b", 1024-len("s3:///sha256/")-64+1)
	if err := media.CheckStoreURI(long); err == nil {
		t.Error("CheckStoreURI took a store whose image URIs are 1025 bytes")
	}
	if err := media.CheckStoreURI(long[:len(long)-1]); err != nil {
		t.Errorf("CheckStoreURI refused a store whose image URIs are 1024 bytes: %v", err)
	}
}

func TestValidateReferences(t *testing.T) {
	good, err := media.BuildReference(mediatest.GIF(3, 3, 2), store)
	if err != nil {
		t.Fatal(err)
	}
	with := func(change func(*media.Reference)) media.Reference {
		r := good
		change(&r)
		return r
	}
	tests := []struct {
		name  string
		ref   media.Reference
		field string
	}{
		{"another type", with(func(r *media.Reference) { r.Type = "video" }), "images[0].type"},
		{"uppercase hex", with(func(r *media.Reference) {
			r.SHA256 = strings.ToUpper(r.SHA256)
			r.URI = store + "/sha256/" + r.SHA256
		}), "images[0].sha256"},
		{"short hash", with(func(r *media.Reference) { r.SHA256 = r.SHA256[:63] }), "images[0].sha256"},
		{"svg", with(func(r *media.Reference) { r.MIMEType = "image/svg+xml" }), "images[0].mimeType"},
		{"zero size", with(func(r *media.Reference) { r.SizeBytes = 0 }), "images[0].sizeBytes"},
		{"too large", with(func(r *media.Reference) { r.SizeBytes = media.MaxImageBytes + 1 }), "images[0].sizeBytes"},
		{"uri of another hash", with(func(r *media.Reference) { r.URI = store + "/sha256/" + strings.Repeat("0", 64) }), "images[0].uri"},
		{"uri without scheme", with(func(r *media.Reference) { r.URI = "/sha256/" + r.SHA256 }), "images[0].uri"},
		{"uri with a newline", with(func(r *media.Reference) { r.URI = "s3://a\nb/sha256/" + r.SHA256 }), "images[0].uri"},
		{"uri not UTF-8", with(func(r *media.Reference) { r.URI = "s3://\xff/sha256/" + r.SHA256 }), "images[0].uri"},
		{"uri too long", with(func(r *media.Reference) {
			r.URI = "s3://" + strings.Repeat("é", 500) + "/sha256/" + r.SHA256
		}), "images[0].uri"},
	}
	if err := media.ValidateReferences([]media.Reference{good}); err != nil {
		t.Fatalf("a good reference: %v", err)
	}
	for _, tt := range tests {
		err := media.ValidateReferences([]media.Reference{tt.ref})
		var verr *media.ValidationError
		if !errors.As(err, &verr) || verr.Field != tt.field {
			t.Errorf("%s: got %v, want a validation error of %s", tt.name, err, tt.field)
		}
	}
	many := make([]media.Reference, media.MaxImagesPerMessage+1)
	for i := range many {
		many[i] = good
	}
	if err := media.ValidateReferences(many); err == nil || !strings.Contains(err.Error(), "21 images") {
		t.Errorf("21 images: %v", err)
	}
	if err := media.ValidateReferences(many[:media.MaxImagesPerMessage]); err != nil {
		t.Errorf("20 images: %v", err)
	}
}

func TestRequireStoreReferenceAndVerify(t *testing.T) {
	jpg := mediatest.JPEG(5, 5, 3)
	ref, err := media.BuildReference(jpg, store)
	if err != nil {
		t.Fatal(err)
	}
	if err := media.RequireStoreReference(ref, store); err != nil {
		t.Errorf("own store: %v", err)
	}
	for _, other := range []string{"s3://agent-media", "s3://agent-media/sessions/eu", "s3://other/sessions", "file:///srv/media"} {
		if err := media.RequireStoreReference(ref, other); !errors.Is(err, media.ErrStore) {
			t.Errorf("store %s took a reference of %s: %v", other, store, err)
		}
	}
	png := mediatest.PNG(5, 5, 3)
	tests := []struct {
		name string
		data []byte
	}{
		{"one byte more", append(bytes.Clone(jpg), 0)},
		{"one byte less", jpg[:len(jpg)-1]},
		{"same size, other bytes", withBytes(jpg, 10, jpg[10]^0xFF)},
	}
	for _, tt := range tests {
		if err := media.VerifyBytes(ref, tt.data); !errors.Is(err, media.ErrStore) {
			t.Errorf("%s: VerifyBytes = %v, want a store error", tt.name, err)
		}
	}
	// Bytes whose hash and size match but whose type is not the one named.
	pngRef, err := media.BuildReference(png, store)
	if err != nil {
		t.Fatal(err)
	}
	pngRef.MIMEType = media.MIMEJPEG
	if err := media.VerifyBytes(pngRef, png); err == nil || !strings.Contains(err.Error(), "well-formed image/jpeg") {
		t.Errorf("a PNG read as a JPEG: %v", err)
	}
}
