package render

import (
	"crypto/sha256"
	"encoding/hex"
	"strings"
	"testing"

	agentsv1 "github.com/stepwise-run/stepwise/api/v1alpha1"
)

func TestClaimAddress(t *testing.T) {
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
		if got := ClaimAddress(tt.address); got != tt.want {
			t.Errorf("ClaimAddress(%q) = %q, want %q", tt.address, got, tt.want)
		}
	}
}

func TestFlowClaimSpellings(t *testing.T) {
	claim := func(address, namespace string) string {
		return FlowClaim(agentsv1.EngineSpec{Address: address, Namespace: namespace}, "SupportAgent")
	}
	holder := claim("temporal.example.com:7233", "agents")
	for _, address := range []string{"TEMPORAL.example.com:7233", "temporal.example.com.:7233", "temporal.example.com:07233"} {
		if got := claim(address, "agents"); got != holder {
			t.Errorf("claim on %s = %s, want the holder's %s", address, got, holder)
		}
	}
	// The hash of an address already in its one spelling is the one earlier
	// releases labelled running workers with, so an upgrade moves no claim.
	earlier := sha256.Sum256([]byte("temporal.example.com:7233\x00agents\x00SupportAgent"))
	if want := hex.EncodeToString(earlier[:16]); holder != want {
		t.Errorf("claim = %s, want %s as before", holder, want)
	}
	for name, other := range map[string]string{
		"another port":                           claim("temporal.example.com:7234", "agents"),
		"another namespace":                      claim("temporal.example.com:7233", "billing"),
		"a namespace in other case, self-hosted": claim("temporal.example.com:7233", "Agents"),
		"another Flow type":                      FlowClaim(agentsv1.EngineSpec{Address: "temporal.example.com:7233", Namespace: "agents"}, "supportagent"),
	} {
		if other == holder {
			t.Errorf("%s shares the holder's claim", name)
		}
	}
	cloud := claim("prod.a1b2c.tmprl.cloud:7233", "prod.a1b2c")
	if got := claim("PROD.a1b2c.tmprl.cloud:7233", "Prod.A1B2C"); got != cloud {
		t.Errorf("a Temporal Cloud namespace in other case = %s, want %s: Cloud namespaces are case-insensitive", got, cloud)
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
