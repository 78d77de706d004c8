package media

import "testing"

func TestStoreURIs(t *testing.T) {
	tests := []struct {
		name, got, want string
	}{
		{"bucket only", S3StoreURI("agent-media", ""), "s3://agent-media"},
		{"bucket and prefix", S3StoreURI("agent-media", "sessions/eu"), "s3://agent-media/sessions/eu"},
		{"a plain root", LocalStoreURI("/var/lib/media"), "file:///var/lib/media"},
		{"unreserved bytes stay", LocalStoreURI("/a-b.c_d~e"), "file:///a-b.c_d~e"},
		{"a space and a percent", LocalStoreURI("/my media/100%"), "file:///my%20media/100%25"},
		{"UTF-8 byte by byte", LocalStoreURI("/médias"), "file:///m%C3%A9dias"},
	}
	for _, tt := range tests {
		if tt.got != tt.want {
			t.Errorf("%s: got %q, want %q", tt.name, tt.got, tt.want)
		}
	}
}

func TestImageURILength(t *testing.T) {
	store := S3StoreURI("b", "")
	uri := store + "/sha256/" + "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
	if got := ImageURILength(store); got != len(uri) {
		t.Errorf("ImageURILength = %d, want %d", got, len(uri))
	}
}
