package e2e

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"strings"
	"sync"
	"testing"
	"time"

	sessions "github.com/stepwise-run/stepwise/pkg/client"
)

// startOrSend starts the session with its first message, or sends it the
// next one.
func startOrSend(ctx context.Context, s *sessions.Sessions, id, text string, first bool) (bool, error) {
	if first {
		return s.Start(ctx, id, text)
	}
	return s.Send(ctx, id, text)
}

// turnLoad keeps sessions busy: each sends a turn that runs slow_export as
// soon as its last turn ended, and records how long every turn took beyond
// the export itself.
type turnLoad struct {
	ids     []string
	seconds int
	stopped chan struct{}
	done    sync.WaitGroup

	mu      sync.Mutex
	turns   map[string]int
	longest time.Duration
	errs    []string
}

func startTurnLoad(ctx context.Context, t *testing.T, s *sessions.Sessions, ids []string, seconds int) *turnLoad {
	t.Helper()
	l := &turnLoad{ids: ids, seconds: seconds, stopped: make(chan struct{}), turns: map[string]int{}}
	for _, id := range ids {
		l.done.Add(1)
		go func() {
			defer l.done.Done()
			l.run(ctx, s, id)
		}()
	}
	return l
}

func (l *turnLoad) run(ctx context.Context, s *sessions.Sessions, id string) {
	text := fmt.Sprintf(`call slow_export {"seconds":%d}`, l.seconds)
	for turn := 1; ; turn++ {
		select {
		case <-l.stopped:
			return
		default:
		}
		began := time.Now()
		ok, err := startOrSend(ctx, s, id, text, turn == 1)
		if err != nil || !ok {
			l.fail(fmt.Sprintf("session %s turn %d: sent %v, %v", id, turn, ok, err))
			return
		}
		for {
			snap, err := s.Snapshot(ctx, id)
			if ctx.Err() != nil {
				l.fail(fmt.Sprintf("session %s turn %d did not end: %v", id, turn, err))
				return
			}
			if err == nil && snap.State != nil && snap.State.TurnCount == turn && snap.State.ActiveTurnID == "" {
				// A snapshot shows the newest 200 messages only: a long
				// load outgrows it, so the count reads every stored page.
				n, err := countStoredToolMessages(ctx, s, id, "slow_export")
				if err != nil || n != turn {
					l.fail(fmt.Sprintf("session %s ran slow_export %d times in %d turns (%v); a non-idempotent write runs once per call", id, n, turn, err))
					return
				}
				break
			}
			time.Sleep(200 * time.Millisecond)
		}
		l.mu.Lock()
		l.turns[id] = turn
		l.longest = max(l.longest, time.Since(began)-time.Duration(l.seconds)*time.Second)
		l.mu.Unlock()
	}
}

func (l *turnLoad) fail(problem string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.errs = append(l.errs, problem)
}

// waitTurns waits until every session ended n more turns than now.
func (l *turnLoad) waitTurns(t *testing.T, n int) {
	t.Helper()
	l.mu.Lock()
	from := maps.Clone(l.turns)
	l.mu.Unlock()
	waitFor(t, fmt.Sprintf("every loaded session to end %d more turns", n), func() (bool, error) {
		l.mu.Lock()
		defer l.mu.Unlock()
		if len(l.errs) > 0 {
			return false, errors.New(strings.Join(l.errs, "; "))
		}
		for _, id := range l.ids {
			if l.turns[id] < from[id]+n {
				return false, nil
			}
		}
		return true, nil
	})
}

// stop lets every session end its turn, and fails the test on a session
// that did not answer or ran a tool call twice.
func (l *turnLoad) stop(t *testing.T) {
	t.Helper()
	close(l.stopped)
	l.done.Wait()
	if len(l.errs) > 0 {
		t.Fatal(strings.Join(l.errs, "\n"))
	}
	t.Logf("sessions %v ended %v turns; the longest turn took %s beyond its %ds tool call",
		l.ids, l.turns, l.longest.Round(10*time.Millisecond), l.seconds)
}
