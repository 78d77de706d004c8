package serving

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"
)

// start serves handler on a loopback port; clients reach it from
// 127.0.0.1 and from 127.0.0.2, two client addresses.
func start(t *testing.T, handler http.Handler, limits Limits) string {
	t.Helper()
	srv, err := Listen(context.Background(), "127.0.0.1:0", handler, limits)
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = srv.Serve() }()
	t.Cleanup(func() { _ = srv.Close() })
	return srv.Addr().String()
}

func dialFrom(t *testing.T, from, addr string) net.Conn {
	t.Helper()
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(from)}, Timeout: 5 * time.Second}
	conn, err := d.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return conn
}

// get sends one request from an address and returns the status.
func get(t *testing.T, from, addr string) int {
	t.Helper()
	conn := dialFrom(t, from, addr)
	_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := fmt.Fprintf(conn, "GET / HTTP/1.1\r\nHost: gateway\r\nConnection: close\r\n\r\n"); err != nil {
		return 0
	}
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		return 0
	}
	_ = resp.Body.Close()
	return resp.StatusCode
}

// closedByServer tells whether the server closed conn within wait.
func closedByServer(conn net.Conn, wait time.Duration) bool {
	_ = conn.SetReadDeadline(time.Now().Add(wait))
	_, err := conn.Read(make([]byte, 1))
	var timeout net.Error
	return err != nil && (!errors.As(err, &timeout) || !timeout.Timeout())
}

var ok = http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "ok") })

func TestASlowlorisFromOneClientLeavesTheServerServingOthers(t *testing.T) {
	limits := DefaultLimits
	limits.ReadHeaderTimeout, limits.ConnectionsPerClient = 300*time.Millisecond, 4
	addr := start(t, ok, limits)
	// One client holds its every connection with headers it never ends.
	var stalled []net.Conn
	for range 4 {
		conn := dialFrom(t, "127.0.0.1", addr)
		if _, err := io.WriteString(conn, "GET / HTTP/1.1\r\nHost: gateway\r\nX-Slow: "); err != nil {
			t.Fatal(err)
		}
		stalled = append(stalled, conn)
	}
	time.Sleep(50 * time.Millisecond)
	if extra := dialFrom(t, "127.0.0.1", addr); !closedByServer(extra, 2*time.Second) {
		t.Error("a connection past the client's limit was kept open")
	}
	if got := get(t, "127.0.0.2", addr); got != http.StatusOK {
		t.Errorf("another client during the slowloris: %d, want 200", got)
	}
	// The headers never end, so the server drops them, freeing the slots.
	for i, conn := range stalled {
		if !closedByServer(conn, 5*time.Second) {
			t.Errorf("stalled connection %d outlived the header timeout", i)
		}
	}
	if got := get(t, "127.0.0.1", addr); got != http.StatusOK {
		t.Errorf("the first client once its stalled connections were dropped: %d, want 200", got)
	}
}

func TestAClientsConcurrentRequestsAreCapped(t *testing.T) {
	release := make(chan struct{})
	var entered sync.WaitGroup
	blocking := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("X-Hold") != "" {
			entered.Done()
			<-release
		}
		_, _ = io.WriteString(w, "ok")
	})
	limits := DefaultLimits
	limits.RequestsPerClient = 2
	addr := start(t, blocking, limits)
	var held []net.Conn
	entered.Add(2)
	for range 2 {
		conn := dialFrom(t, "127.0.0.1", addr)
		if _, err := io.WriteString(conn, "GET / HTTP/1.1\r\nHost: gateway\r\nX-Hold: 1\r\n\r\n"); err != nil {
			t.Fatal(err)
		}
		held = append(held, conn)
	}
	entered.Wait()
	if got := get(t, "127.0.0.1", addr); got != http.StatusTooManyRequests {
		t.Errorf("a third request in flight from one client: %d, want 429", got)
	}
	if got := get(t, "127.0.0.2", addr); got != http.StatusOK {
		t.Errorf("another client meanwhile: %d, want 200", got)
	}
	close(release)
	for _, conn := range held {
		resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
		if err != nil {
			t.Errorf("a held request: %v", err)
			continue
		}
		_ = resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Errorf("a held request: %s", resp.Status)
		}
	}
	if got := get(t, "127.0.0.1", addr); got != http.StatusOK {
		t.Errorf("after the held requests ended: %d, want 200", got)
	}
}

func TestTimeoutsBoundResponsesButNotStreams(t *testing.T) {
	limits := DefaultLimits
	limits.ReadTimeout, limits.WriteTimeout = 300*time.Millisecond, 300*time.Millisecond
	streamed := make(chan error, 2)
	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Query().Get("stream") != "" {
			Stream(w)
		}
		for i := range 10 {
			if _, err := fmt.Fprintf(w, "frame %d\n", i); err != nil {
				streamed <- err
				return
			}
			http.NewResponseController(w).Flush()
			select {
			case <-r.Context().Done():
				streamed <- r.Context().Err()
				return
			case <-time.After(100 * time.Millisecond):
			}
		}
		streamed <- nil
	})
	addr := start(t, handler, limits)
	read := func(path string) string {
		conn := dialFrom(t, "127.0.0.1", addr)
		_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
		_, _ = fmt.Fprintf(conn, "GET %s HTTP/1.1\r\nHost: gateway\r\nConnection: close\r\n\r\n", path)
		body, _ := io.ReadAll(conn)
		return string(body)
	}
	if body := read("/?stream=1"); !strings.Contains(body, "frame 9") {
		t.Errorf("a stream was cut by the timeouts: %q", body)
	}
	if err := <-streamed; err != nil {
		t.Errorf("the stream's request ended early: %v", err)
	}
	if body := read("/"); strings.Contains(body, "frame 9") {
		t.Error("a response outlived the write timeout")
	}
}
