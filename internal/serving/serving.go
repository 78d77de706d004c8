// Package serving runs the project's HTTP servers (the gateway, the event
// hub, the worker's health and metrics) with the bounds every port a pod
// opens needs: any pod in the cluster may reach it. Each server times out
// slow headers, slow bodies, slow readers and idle connections, bounds
// header size, and caps the connections and the concurrent requests of one
// client address, so a slowloris or a connection flood from one pod leaves
// the server serving the others.
package serving

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"sync"
	"time"
)

// Limits bound one server.
type Limits struct {
	// ReadHeaderTimeout bounds reading a request's headers.
	ReadHeaderTimeout time.Duration
	// ReadTimeout bounds reading a whole request, body included.
	ReadTimeout time.Duration
	// WriteTimeout bounds a response; a stream lifts it for itself
	// (Stream) and sends keep-alives instead.
	WriteTimeout time.Duration
	// IdleTimeout closes a kept-alive connection with no request.
	IdleTimeout time.Duration
	// MaxHeaderBytes bounds a request's headers.
	MaxHeaderBytes int
	// ConnectionsPerClient bounds the open connections from one address;
	// past it a new connection is closed at once.
	ConnectionsPerClient int
	// RequestsPerClient bounds the requests one address has in flight;
	// past it a request is answered 429.
	RequestsPerClient int
}

// DefaultLimits suit the gateway and the hub: a request waits at most 30 s
// for a worker or an event, so a response gets a minute. A browser opens a
// handful of connections; a client address is also every user behind one
// proxy, hence the room.
var DefaultLimits = Limits{
	ReadHeaderTimeout:    10 * time.Second,
	ReadTimeout:          30 * time.Second,
	WriteTimeout:         60 * time.Second,
	IdleTimeout:          2 * time.Minute,
	MaxHeaderBytes:       64 << 10,
	ConnectionsPerClient: 256,
	RequestsPerClient:    128,
}

// HubLimits suit the event hub, whose clients are few and busy: every open
// event stream of a gateway replica is one long poll of the hub, so a
// replica's requests in flight are its streams.
var HubLimits = Limits{
	ReadHeaderTimeout:    DefaultLimits.ReadHeaderTimeout,
	ReadTimeout:          DefaultLimits.ReadTimeout,
	WriteTimeout:         DefaultLimits.WriteTimeout,
	IdleTimeout:          DefaultLimits.IdleTimeout,
	MaxHeaderBytes:       16 << 10,
	ConnectionsPerClient: 20_000,
	RequestsPerClient:    20_000,
}

// ProbeLimits suit a port only probes and scrapers call.
var ProbeLimits = Limits{
	ReadHeaderTimeout:    5 * time.Second,
	ReadTimeout:          10 * time.Second,
	WriteTimeout:         30 * time.Second,
	IdleTimeout:          time.Minute,
	MaxHeaderBytes:       16 << 10,
	ConnectionsPerClient: 16,
	RequestsPerClient:    8,
}

// Server is an http.Server with its listener's and its handler's limits.
type Server struct {
	*http.Server
	listener net.Listener
}

// Listen listens on address and returns a server of handler within limits.
// ctx is the base of every request's context.
func Listen(ctx context.Context, address string, handler http.Handler, limits Limits) (*Server, error) {
	listener, err := net.Listen("tcp", address)
	if err != nil {
		return nil, err
	}
	return New(ctx, listener, handler, limits), nil
}

// New serves handler on listener within limits.
func New(ctx context.Context, listener net.Listener, handler http.Handler, limits Limits) *Server {
	if limits.ConnectionsPerClient > 0 {
		listener = &perClientListener{Listener: listener, max: limits.ConnectionsPerClient, open: map[string]int{}}
	}
	if limits.RequestsPerClient > 0 {
		handler = &perClientRequests{next: handler, max: limits.RequestsPerClient, inFlight: map[string]int{}}
	}
	srv := &http.Server{
		Handler:           handler,
		ReadHeaderTimeout: limits.ReadHeaderTimeout,
		ReadTimeout:       limits.ReadTimeout,
		WriteTimeout:      limits.WriteTimeout,
		IdleTimeout:       limits.IdleTimeout,
		MaxHeaderBytes:    limits.MaxHeaderBytes,
		BaseContext:       func(net.Listener) context.Context { return ctx },
	}
	return &Server{Server: srv, listener: listener}
}

// Addr is the address the server listens on.
func (s *Server) Addr() net.Addr { return s.listener.Addr() }

// Serve serves until Shutdown or Close; like http.Server.Serve, it returns
// http.ErrServerClosed then.
func (s *Server) Serve() error { return s.Server.Serve(s.listener) }

// Stream lifts the read and write deadlines of a long response, such as
// an event stream, which sends keep-alives instead. Without it the read
// deadline would end the request's context and the write deadline the
// stream.
func Stream(w http.ResponseWriter) {
	rc := http.NewResponseController(w)
	_ = rc.SetReadDeadline(time.Time{})
	_ = rc.SetWriteDeadline(time.Time{})
}

// clientOf is the address a connection or a request comes from, without
// its port.
func clientOf(remote string) string {
	if host, _, err := net.SplitHostPort(remote); err == nil {
		return host
	}
	return remote
}

type perClientListener struct {
	net.Listener
	max int

	mu   sync.Mutex
	open map[string]int
}

func (l *perClientListener) Accept() (net.Conn, error) {
	for {
		conn, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		client := clientOf(conn.RemoteAddr().String())
		l.mu.Lock()
		full := l.open[client] >= l.max
		if !full {
			l.open[client]++
		}
		l.mu.Unlock()
		if full {
			_ = conn.Close()
			continue
		}
		return &countedConn{Conn: conn, release: func() { l.release(client) }}, nil
	}
}

func (l *perClientListener) release(client string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.open[client]--; l.open[client] <= 0 {
		delete(l.open, client)
	}
}

type countedConn struct {
	net.Conn
	once    sync.Once
	release func()
}

func (c *countedConn) Close() error {
	c.once.Do(c.release)
	return c.Conn.Close()
}

type perClientRequests struct {
	next http.Handler
	max  int

	mu       sync.Mutex
	inFlight map[string]int
}

func (p *perClientRequests) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	client := clientOf(r.RemoteAddr)
	p.mu.Lock()
	full := p.inFlight[client] >= p.max
	if !full {
		p.inFlight[client]++
	}
	p.mu.Unlock()
	if full {
		w.Header().Set("Retry-After", "1")
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusTooManyRequests)
		_, _ = fmt.Fprintf(w, `{"reason":"too_many_requests","message":"this address has %s requests in flight, the most one client may"}`+"\n",
			strconv.Itoa(p.max))
		return
	}
	defer func() {
		p.mu.Lock()
		defer p.mu.Unlock()
		if p.inFlight[client]--; p.inFlight[client] <= 0 {
			delete(p.inFlight, client)
		}
	}()
	p.next.ServeHTTP(w, r)
}

// ServeTLS serves TLS with the certificates of the server's TLSConfig.
func (s *Server) ServeTLS() error { return s.Server.ServeTLS(s.listener, "", "") }
