// Package modeltest serves a model provider's API on a local port for the
// model clients' tests: it records each request as sent and answers with
// canned responses in the provider's wire format, streaming included.
package modeltest

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
)

// Response answers one request.
type Response func(w http.ResponseWriter)

// Server records each request to one path and answers it with the next
// response, repeating the last.
type Server struct {
	// URL is the server's root.
	URL string

	t         testing.TB
	mu        sync.Mutex
	raw       []string
	keys      []string
	traces    []string
	responses []Response
}

// NewServer serves path until the test ends.
func NewServer(t testing.TB, path string, responses ...Response) *Server {
	s := &Server{t: t, responses: responses}
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != path || r.Method != http.MethodPost {
			http.Error(w, "unexpected "+r.Method+" "+r.URL.Path, http.StatusNotFound)
			return
		}
		body, _ := io.ReadAll(r.Body)
		s.mu.Lock()
		s.raw = append(s.raw, string(body))
		s.keys = append(s.keys, r.Header.Get("Authorization")+r.Header.Get("X-Api-Key"))
		s.traces = append(s.traces, r.Header.Get("Traceparent"))
		respond := s.responses[min(len(s.raw), len(s.responses))-1]
		s.mu.Unlock()
		respond(w)
	}))
	t.Cleanup(ts.Close)
	s.URL = ts.URL
	return s
}

// Traceparent is request i's W3C traceparent header, empty when it had
// none.
func (s *Server) Traceparent(i int) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.traces[i]
}

// Count is the number of requests so far.
func (s *Server) Count() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.raw)
}

// Raw is request i's body as sent.
func (s *Server) Raw(i int) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.raw[i]
}

// Body is request i's body decoded.
func (s *Server) Body(i int) map[string]any {
	var v map[string]any
	if err := json.Unmarshal([]byte(s.Raw(i)), &v); err != nil {
		s.t.Fatalf("request %d is not JSON: %s", i, s.Raw(i))
	}
	return v
}

// Key is the credential request i carried: its Authorization and X-Api-Key
// headers.
func (s *Server) Key(i int) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.keys[i]
}

// Events streams each JSON event as a Server-Sent Event, named by its
// "type" when it has one. A stream without its final event is a stream cut
// mid-answer.
func Events(events ...string) Response {
	return func(w http.ResponseWriter) {
		w.Header().Set("Content-Type", "text/event-stream")
		for _, e := range events {
			var typed struct {
				Type string `json:"type"`
			}
			if json.Unmarshal([]byte(e), &typed) == nil && typed.Type != "" {
				fmt.Fprintf(w, "event: %s\n", typed.Type)
			}
			fmt.Fprintf(w, "data: %s\n\n", e)
			w.(http.Flusher).Flush()
		}
	}
}

// Failing answers with an HTTP error and a JSON body.
func Failing(status int, header map[string]string, body string) Response {
	return func(w http.ResponseWriter) {
		for k, v := range header {
			w.Header().Set(k, v)
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		_, _ = io.WriteString(w, body)
	}
}
