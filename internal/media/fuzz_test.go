package media_test

import (
	"encoding/json"
	"testing"
	"unicode/utf8"

	"github.com/stepwise-run/stepwise/internal/media"
	"github.com/stepwise-run/stepwise/internal/media/mediatest"
)

// FuzzSniff: no input panics a sniffer, and whatever a sniffer takes makes
// a reference whose bytes verify.
func FuzzSniff(f *testing.F) {
	for _, seed := range [][]byte{
		mediatest.PNG(1, 1, 0), mediatest.JPEG(1, 1, 0), mediatest.GIF(1, 1, 0), mediatest.WebP(),
		[]byte("RIFF\x0c\x00\x00\x00WEBPVP8X"), {0xFF, 0xD8, 0xFF, 0xE0, 0xFF, 0xD9}, []byte("GIF89a\x01\x00\x01\x00\x00\x00\x00"),
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		mime := media.Sniff(data)
		if mime == "" {
			if _, err := media.BuildReference(data, store); err == nil {
				t.Fatal("BuildReference took bytes no sniffer takes")
			}
			return
		}
		ref, err := media.BuildReference(data, store)
		if err != nil {
			if len(data) > media.MaxImageBytes {
				return
			}
			t.Fatalf("BuildReference refused a %s image: %v", mime, err)
		}
		if ref.MIMEType != mime {
			t.Fatalf("reference type %s, sniffed %s", ref.MIMEType, mime)
		}
		if err := media.VerifyBytes(ref, data); err != nil {
			t.Fatalf("VerifyBytes: %v", err)
		}
	})
}

// FuzzValidateReference: no reference panics the validator, and one it
// takes has a URI within the limit that ends in its hash, and is still
// valid after a JSON round trip.
func FuzzValidateReference(f *testing.F) {
	good, err := media.BuildReference(mediatest.PNG(1, 1, 0), store)
	if err != nil {
		f.Fatal(err)
	}
	f.Add(good.Type, good.URI, good.MIMEType, good.SHA256, good.SizeBytes)
	f.Add("image", "file:///srv/m%C3%A9dia/sha256/"+good.SHA256, "image/webp", good.SHA256, int64(26))
	f.Add("image", "s3:///sha256/"+good.SHA256, "image/gif", good.SHA256, int64(media.MaxImageBytes))
	f.Add("", "", "", "", int64(-1))
	f.Fuzz(func(t *testing.T, typ, uri, mime, sum string, size int64) {
		ref := media.Reference{Type: typ, URI: uri, MIMEType: mime, SHA256: sum, SizeBytes: size}
		if err := media.ValidateReference(ref); err != nil {
			return
		}
		if len(ref.URI) > media.MaxImageURILength || !utf8.ValidString(ref.URI) {
			t.Fatalf("took URI of %d bytes", len(ref.URI))
		}
		if len(ref.SHA256) != 64 || ref.URI[len(ref.URI)-64:] != ref.SHA256 {
			t.Fatalf("took URI %q that does not end in the hash %q", ref.URI, ref.SHA256)
		}
		raw, err := json.Marshal(ref)
		if err != nil {
			t.Fatal(err)
		}
		var back media.Reference
		if err := json.Unmarshal(raw, &back); err != nil || back != ref {
			t.Fatalf("round trip: %v, %+v", err, back)
		}
		if err := media.ValidateReference(back); err != nil {
			t.Fatalf("invalid after a round trip: %v", err)
		}
	})
}
