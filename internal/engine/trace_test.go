package engine

import (
	"flag"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/stepwise-run/stepwise/internal/session"
	"github.com/stepwise-run/stepwise/internal/version"
)

// move is one move a session made between Steps, without the graph's text.
type move struct {
	From, To session.StepName
	Kind     session.TransitionKind
}

func (m move) String() string { return fmt.Sprintf("%s -%s-> %s", m.From, m.Kind, m.To) }

// movesTaken collects every move the sessions of this package's workflow
// tests make, for TestMain to hold against the published graph.
var movesTaken = struct {
	sync.Mutex
	seen map[move]bool
}{seen: map[move]bool{}}

// graphMoves are the moves the current engine version's graph shows.
func graphMoves() map[move]bool {
	g, err := session.Graph("F", version.EngineVersion)
	if err != nil {
		panic(err)
	}
	out := map[move]bool{}
	for _, t := range g.Transitions {
		out[move{t.From, t.To, t.Kind}] = true
	}
	return out
}

// moveTracer records the moves of one test's sessions, and of all tests.
type moveTracer struct {
	mu    sync.Mutex
	moves []move
}

func (m *moveTracer) trace(from, to session.StepName, kind session.TransitionKind) {
	mv := move{from, to, kind}
	m.mu.Lock()
	m.moves = append(m.moves, mv)
	m.mu.Unlock()
	movesTaken.Lock()
	movesTaken.seen[mv] = true
	movesTaken.Unlock()
}

// checkInGraph fails the test for every move its sessions made that the
// published graph does not show.
func (m *moveTracer) checkInGraph(t *testing.T) {
	t.Helper()
	known := graphMoves()
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, mv := range m.moves {
		if !known[mv] {
			t.Errorf("the session moved %s, which the published Flow graph does not show", mv)
		}
	}
}

// TestMain holds the moves every workflow test made against the published
// Flow graph, both ways: a move the graph lacks, or a transition of the
// graph no test took, fails the run. It checks only a run of every test.
func TestMain(m *testing.M) {
	code := m.Run()
	if code == 0 && flag.Lookup("test.run").Value.String() == "" && flag.Lookup("test.skip").Value.String() == "" {
		if problems := compareMovesWithGraph(); len(problems) > 0 {
			fmt.Fprintf(os.Stderr, "FAIL: the engine's moves and the published Flow graph differ:\n  %s\n", strings.Join(problems, "\n  "))
			code = 1
		}
	}
	os.Exit(code)
}

func compareMovesWithGraph() []string {
	known := graphMoves()
	movesTaken.Lock()
	defer movesTaken.Unlock()
	var problems []string
	for mv := range movesTaken.seen {
		if !known[mv] {
			problems = append(problems, "taken, not in the graph: "+mv.String())
		}
	}
	for mv := range known {
		if !movesTaken.seen[mv] {
			problems = append(problems, "in the graph, taken by no test: "+mv.String())
		}
	}
	slices.Sort(problems)
	return problems
}
