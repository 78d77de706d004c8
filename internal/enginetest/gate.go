// Package enginetest runs sessions on a real Temporal dev server with the
// worker as a child process, so tests can kill it with SIGKILL at exact
// points. Gates are files: the worker marks a gate as reached and waits for
// the test to release it.
package enginetest

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"
)

// Gate is one named point a worker stops at.
type Gate struct {
	Dir  string
	Name string
}

func (g Gate) reachedPath() string { return filepath.Join(g.Dir, g.Name+".reached") }
func (g Gate) releasePath() string { return filepath.Join(g.Dir, g.Name+".release") }

// Enabled reports whether the test armed the gate.
func (g Gate) Enabled() bool {
	_, err := os.Stat(filepath.Join(g.Dir, g.Name+".armed"))
	return err == nil
}

// Arm makes the gate stop the worker that reaches it.
func (g Gate) Arm() error {
	return os.WriteFile(filepath.Join(g.Dir, g.Name+".armed"), nil, 0o600)
}

// Pass marks the gate reached and waits for its release; an unarmed gate
// passes at once.
func (g Gate) Pass(ctx context.Context) error {
	if !g.Enabled() {
		return nil
	}
	if err := os.WriteFile(g.reachedPath(), nil, 0o600); err != nil {
		return err
	}
	for {
		if _, err := os.Stat(g.releasePath()); err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// WaitReached waits until a worker reached the gate.
func (g Gate) WaitReached(timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		if _, err := os.Stat(g.reachedPath()); err == nil {
			return nil
		}
		time.Sleep(20 * time.Millisecond)
	}
	return fmt.Errorf("gate %s was not reached within %s", g.Name, timeout)
}

// Release lets the worker at the gate go on and disarms it.
func (g Gate) Release() error {
	_ = os.Remove(filepath.Join(g.Dir, g.Name+".armed"))
	return os.WriteFile(g.releasePath(), nil, 0o600)
}

// Log appends lines that several worker processes share: one line per real
// call, so a test counts calls across worker crashes.
type Log struct {
	Path string
	mu   sync.Mutex
}

// Append writes one line.
func (l *Log) Append(fields ...string) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	f, err := os.OpenFile(l.Path, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o600)
	if err != nil {
		return err
	}
	defer f.Close()
	_, err = fmt.Fprintln(f, strings.Join(fields, "\t"))
	return err
}

// Lines reads every line.
func (l *Log) Lines() [][]string {
	f, err := os.Open(l.Path)
	if err != nil {
		return nil
	}
	defer f.Close()
	var out [][]string
	s := bufio.NewScanner(f)
	for s.Scan() {
		out = append(out, strings.Split(s.Text(), "\t"))
	}
	return out
}
