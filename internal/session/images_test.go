package session

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"

	"github.com/stepwise-run/stepwise/internal/media"
	"github.com/stepwise-run/stepwise/internal/media/mediatest"
)

const testStore = "s3://agent-media/sessions"

func testImage(t *testing.T, seed byte) ImageReference {
	t.Helper()
	ref, err := media.BuildReference(mediatest.PNG(2, 2, seed), testStore)
	if err != nil {
		t.Fatal(err)
	}
	return ImageReference(ref)
}

func TestCheckSendImages(t *testing.T) {
	img := testImage(t, 1)
	other := img
	other.URI = "s3://other-bucket/sha256/" + img.SHA256
	bad := img
	bad.SHA256 = strings.ToUpper(bad.SHA256)
	many := make([]ImageReference, media.MaxImagesPerMessage+1)
	for i := range many {
		many[i] = img
	}
	tests := []struct {
		name   string
		store  string
		images []ImageReference
		want   string // "" accepts
	}{
		{"no images, no store", "", nil, ""},
		{"images of the store", testStore, []ImageReference{img, testImage(t, 2)}, ""},
		{"twenty images", testStore, many[:media.MaxImagesPerMessage], ""},
		{"images without a store", "", []ImageReference{img}, "has no media store"},
		{"an image of another store", testStore, []ImageReference{img, other}, "images[1].uri: s3://other-bucket/sha256/"},
		{"an invalid reference", testStore, []ImageReference{bad}, "images[0].sha256"},
		{"twenty-one images", testStore, many, "21 images"},
	}
	for _, tt := range tests {
		s := startedState(t)
		s.ImageStoreURI = tt.store
		err := s.CheckSend(SendRequest{Text: "look", Images: tt.images})
		switch {
		case tt.want == "" && err != nil:
			t.Errorf("%s: CheckSend = %v", tt.name, err)
		case tt.want != "" && (err == nil || !isRejection(err) || !strings.Contains(err.Error(), tt.want)):
			t.Errorf("%s: CheckSend = %v, want a rejection with %q", tt.name, err, tt.want)
		}
	}

	// The handler runs on replay without the worker's configuration: it
	// checks the references alone, so what the validator took stays taken.
	s := startedState(t)
	if _, err := s.Send(SendRequest{Text: "look", Images: []ImageReference{img}}); err != nil {
		t.Errorf("Send of a valid reference without a store: %v", err)
	}
	if _, err := s.Send(SendRequest{Text: "look", Images: []ImageReference{bad}}); !isRejection(err) {
		t.Errorf("Send of an invalid reference: %v", err)
	}
}

func TestImagesAreStoredWithTheirMessages(t *testing.T) {
	img, img2 := testImage(t, 1), testImage(t, 2)
	s := startedState(t)
	s.ImageStoreURI = testStore
	m, err := s.Send(SendRequest{Text: "what is this?", Images: []ImageReference{img}})
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(m.Images, []ImageReference{img}) || !reflect.DeepEqual(s.Queued[0].Images, m.Images) {
		t.Fatalf("queued message %+v", s.Queued)
	}
	s.BeginTurn()
	if got := s.Window[0]; got.Role != RoleUser || !reflect.DeepEqual(got.Images, []ImageReference{img}) {
		t.Fatalf("stored user message %+v", got)
	}

	s.ApplyModelOutcome(requested(allBuiltIns, call("r1", "screenshot", "{}", readPolicy), call("r2", "screenshot", "{}", readPolicy)), testNow)
	s.RecordToolOutcome("r1", ToolOutcome{Kind: ToolResultSucceeded, Output: "took [image 1]", Images: []ImageReference{img2}})
	s.RecordToolOutcome("r2", ToolOutcome{Kind: ToolResultFailed, Error: "no screen"})
	s.ResumeTurn()
	var results []Message
	for _, msg := range s.Window {
		if msg.Role == RoleTool {
			results = append(results, msg)
		}
	}
	if len(results) != 2 || !reflect.DeepEqual(results[0].Images, []ImageReference{img2}) || results[1].Images != nil {
		t.Fatalf("tool results %+v", results)
	}
	snap := s.Snapshot()
	raw, err := json.Marshal(snap)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Count(string(raw), `"sha256":"`+img2.SHA256+`"`) < 2 {
		t.Errorf("the snapshot shows the tool result's image in the record and the message: %s", raw)
	}

	// A message without images keeps the bytes it had before images.
	plain, err := json.Marshal(Message{Sequence: 1, TurnID: "turn-1", Role: RoleUser, Text: "hi"})
	if err != nil {
		t.Fatal(err)
	}
	if string(plain) != `{"sequence":1,"turnId":"turn-1","role":"user","text":"hi"}` {
		t.Errorf("a message without images encodes as %s", plain)
	}
	withImage, _ := json.Marshal(Message{Role: RoleUser, Text: "hi", Images: []ImageReference{img}})
	if !strings.HasSuffix(string(withImage), `"images":[{"type":"image","uri":"`+img.URI+`","mimeType":"image/png","sha256":"`+img.SHA256+`","sizeBytes":`+jsonInt(img.SizeBytes)+`}]}`) {
		t.Errorf("a message with an image encodes as %s", withImage)
	}
}

func jsonInt(n int64) string {
	raw, _ := json.Marshal(n)
	return string(raw)
}
