package testcluster

import (
	"net"
	"testing"
)

// A stale bridge is told from a live cluster's by its listeners, so the
// kernel's socket table must be read right.
func TestListensOnSeesAListenerOnlyOnItsAddress(t *testing.T) {
	l, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = l.Close() }()
	live, err := listensOn("127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	if !live {
		t.Errorf("listensOn(127.0.0.1) = false with %s listening", l.Addr())
	}
	live, err = listensOn("10.255.255.254")
	if err != nil {
		t.Fatal(err)
	}
	if live {
		t.Error("listensOn(10.255.255.254) = true with nothing bound there")
	}
	if _, err := listensOn("::1"); err == nil {
		t.Error("listensOn(::1): want an error for an IPv6 address")
	}
}
