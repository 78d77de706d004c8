package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stepwise-run/stepwise/internal/media"
	"github.com/stepwise-run/stepwise/internal/media/mediatest"
)

func TestSendWithImages(t *testing.T) {
	c := newCLI(t, "CLIImages")
	c.want(true, "start", "s-img")
	dir := t.TempDir()
	png := filepath.Join(dir, "chart.png")
	if err := os.WriteFile(png, mediatest.PNG(4, 4, 1), 0o600); err != nil {
		t.Fatal(err)
	}
	text := filepath.Join(dir, "notes.png")
	if err := os.WriteFile(text, []byte("not an image at all"), 0o600); err != nil {
		t.Fatal(err)
	}
	large := filepath.Join(dir, "large.png")
	if err := os.WriteFile(large, make([]byte, media.MaxImageBytes+1), 0o600); err != nil {
		t.Fatal(err)
	}
	root := filepath.Join(dir, "media store")
	storeURI := media.LocalStoreURI(root)
	for _, tc := range []struct {
		name   string
		images imageFlags
		want   string
	}{
		{"no store", imageFlags{files: []string{png}}, "--image needs --media-store"},
		{"another scheme", imageFlags{files: []string{png}, store: "https://bucket"}, "must start with s3:// or file://"},
		{"a trailing slash", imageFlags{files: []string{png}, store: "s3://bucket/prefix/"}, "without a trailing slash"},
		{"a root written otherwise", imageFlags{files: []string{png}, store: "file://" + root}, "not written as the store writes it"},
		{"a relative root", imageFlags{files: []string{png}, store: "file://media"}, "clean absolute path"},
		{"a missing file", imageFlags{files: []string{filepath.Join(dir, "missing.png")}, store: storeURI}, "no such file"},
		{"not an image", imageFlags{files: []string{text}, store: storeURI}, "not a PNG, JPEG, GIF or WebP image"},
		{"too large", imageFlags{files: []string{large}, store: storeURI}, "larger than the 3750000 bytes"},
		{"21 images", imageFlags{files: strings.Split(strings.Repeat(png+",", 21), ",")[:21], store: storeURI}, "21 images"},
	} {
		status, out, err := c.runFor(waitLong, config{images: tc.images}, "send", "s-img", "look")
		if err == nil || !strings.Contains(err.Error(), tc.want) || status != 0 || out != "" {
			t.Errorf("%s: status %d, output %q, error %v; want an error with %q", tc.name, status, out, err, tc.want)
		}
	}

	// This Agent's worker has no media store, so the session refuses the
	// uploaded image: false, with status 3.
	status, out, err := c.runFor(waitLong, config{images: imageFlags{files: []string{png}, store: storeURI}}, "send", "s-img", "look")
	if err != nil || status != exitFalse || strings.TrimSpace(out) != "false" {
		t.Errorf("an image for an agent without a store: status %d, output %q, error %v", status, out, err)
	}
	ref, _ := media.BuildReference(mediatest.PNG(4, 4, 1), storeURI)
	if _, err := os.Stat(filepath.Join(root, "sha256", ref.SHA256)); err != nil {
		t.Errorf("the image was not uploaded first: %v", err)
	}
}
