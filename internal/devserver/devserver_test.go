package devserver

import (
	"context"
	"net"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/stepwise-run/stepwise/internal/testtools"
)

// A port chosen free can be bound by another process before the server binds
// it; parallel test packages each starting a server make that happen. Start
// then tries fresh ports instead of failing.
func TestStartTriesNewPortsWhenOneIsTakenFirst(t *testing.T) {
	binary := testtools.Temporal.Path(t)
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = taken.Close() }()
	takenPort := taken.Addr().(*net.TCPAddr).Port

	var tries [][]int
	choose := func(n int) ([]int, error) {
		ports, err := freePorts(n)
		if err != nil {
			return nil, err
		}
		if len(tries) == 0 {
			// The membership port of the first service: the server
			// starts, then exits when it cannot bind it.
			ports[2] = takenPort
		}
		tries = append(tries, ports)
		return ports, nil
	}
	s, err := startOn(context.Background(), binary, choose, nil)
	if err != nil {
		t.Fatalf("start: %v", err)
	}
	defer func() { _ = s.Stop() }()

	if len(tries) != 2 {
		t.Fatalf("ports chosen %d times, want 2 (one refused, one used)", len(tries))
	}
	if slices.Contains(tries[1], takenPort) {
		t.Fatalf("second try %v reuses the taken port %d", tries[1], takenPort)
	}
	if want := net.JoinHostPort("127.0.0.1", strconv.Itoa(tries[1][0])); s.FrontendHostPort() != want {
		t.Fatalf("frontend %s, want the second try's %s", s.FrontendHostPort(), want)
	}
	if _, err := s.Client().CheckHealth(context.Background(), nil); err != nil {
		t.Fatalf("the server on the second try's ports answers no health check: %v", err)
	}
}

// A server that fails for another reason is not retried.
func TestStartDoesNotRetryOtherFailures(t *testing.T) {
	calls := 0
	choose := func(n int) ([]int, error) {
		calls++
		return freePorts(n)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	_, err := startOn(ctx, "/bin/false", choose, nil)
	if err == nil {
		t.Fatal("a binary that exits at once started")
	}
	if calls != 1 {
		t.Fatalf("ports chosen %d times, want 1", calls)
	}
}
