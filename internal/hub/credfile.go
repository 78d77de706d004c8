package hub

import (
	"bytes"
	"fmt"
	"os"
	"sync"
	"time"
)

// rereadEvery is how often a credential file is read again. A mounted
// Secret changes in place, so a new key reaches a running process within
// the kubelet's sync period plus this.
const rereadEvery = 10 * time.Second

// FileSource is a credential read from a file, read again while the process
// runs so a key change needs no restart. A file that turns unreadable or
// invalid keeps the last good value: a half-written change never locks
// everyone out.
type FileSource[T any] struct {
	path  string
	parse func([]byte) (T, error)
	now   func() time.Time

	mu     sync.Mutex
	raw    []byte
	value  T
	readAt time.Time
	// OnError, when set, hears of a reread that failed.
	OnError func(error)
}

// LoadFile reads a credential file once, failing when it cannot be read or
// parsed, and returns a source that rereads it.
func LoadFile[T any](path string, parse func([]byte) (T, error)) (*FileSource[T], error) {
	s := &FileSource[T]{path: path, parse: parse, now: time.Now}
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	value, err := parse(raw)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	s.raw, s.value, s.readAt = raw, value, s.now()
	return s, nil
}

// Get returns the newest good value.
func (s *FileSource[T]) Get() T {
	s.mu.Lock()
	defer s.mu.Unlock()
	if now := s.now(); now.Sub(s.readAt) >= rereadEvery {
		s.readAt = now
		raw, err := os.ReadFile(s.path)
		if err == nil && !bytes.Equal(raw, s.raw) {
			var value T
			if value, err = s.parse(raw); err == nil {
				s.raw, s.value = raw, value
			}
		}
		if err != nil && s.OnError != nil {
			s.OnError(fmt.Errorf("%s: %w", s.path, err))
		}
	}
	return s.value
}
