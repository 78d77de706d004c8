package render

import (
	"strings"
	"testing"
)

func TestCanonicalEngineAddress(t *testing.T) {
	tests := []struct{ address, want string }{
		{"temporal.example.com:7233", "temporal.example.com:7233"},
		{"TEMPORAL.example.com:7233", "temporal.example.com:7233"},
		{"temporal.example.com.:7233", "temporal.example.com:7233"},
		{"temporal.example.com:07233", "temporal.example.com:7233"},
		{"Temporal.Example.COM.:007233", "temporal.example.com:7233"},
		{"10.0.0.7:7233", "10.0.0.7:7233"},
		{"[::ffff:10.0.0.7]:7233", "10.0.0.7:7233"},
		{"[2001:DB8:0:0:0:0:0:1]:7233", "[2001:db8::1]:7233"},
		{"temporal-frontend.temporal.svc:7233", "temporal-frontend.temporal.svc:7233"},
		// Different servers, or the same only through DNS, stay apart.
		{"temporal.example.com:7234", "temporal.example.com:7234"},
		{"temporal-frontend.temporal.svc.cluster.local:7233", "temporal-frontend.temporal.svc.cluster.local:7233"},
	}
	for _, tt := range tests {
		if got := CanonicalEngineAddress(tt.address); got != tt.want {
			t.Errorf("CanonicalEngineAddress(%q) = %q, want %q", tt.address, got, tt.want)
		}
	}
}

func TestCheckEngineAddress(t *testing.T) {
	for address, wantErr := range map[string]string{
		"temporal.example.com:7233":  "",
		"[2001:db8::1]:7233":         "",
		"10.0.0.7:7233":              "",
		"temporal.example.com":       "must be host:port",
		"dns:temporal:7233":          "must be host:port",
		"http://temporal:7233":       "must be host:port",
		"temporal.example.com:0":     "port from 1 to 65535",
		"temporal.example.com:70000": "port from 1 to 65535",
	} {
		err := CheckEngineAddress(address)
		if wantErr == "" && err != nil || wantErr != "" && (err == nil || !strings.Contains(err.Error(), wantErr)) {
			t.Errorf("CheckEngineAddress(%q) = %v, want %q", address, err, wantErr)
		}
	}
}
