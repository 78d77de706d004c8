package session

import (
	"slices"
	"strings"
	"testing"
)

// TestWriteTodosErrorsNameTheSameKeyEveryTime: the error is stored in the
// session, so it must not follow Go's random map order.
func TestWriteTodosErrorsNameTheSameKeyEveryTime(t *testing.T) {
	for _, c := range []struct{ args, want string }{
		{`{"todos":[],"zeta":1,"beta":2,"alpha":3,"gamma":4,"delta":5}`, `invalid todos: unknown argument "alpha"`},
		{`{"todos":[{"content":"a","status":"pending","zz":1,"mm":2,"bb":3,"kk":4}]}`, `invalid todos: todos[0] has an unknown field "bb"`},
	} {
		for range 50 {
			if _, err := ParseWriteTodos(c.args); err == nil || err.Error() != c.want {
				t.Fatalf("ParseWriteTodos(%s) = %v, want %q", c.args, err, c.want)
			}
		}
	}
}

func TestParseWriteTodos(t *testing.T) {
	cases := []struct {
		args    string
		want    int
		wantErr string
	}{
		{`{"todos":[]}`, 0, ""},
		{`{"todos":[{"content":"a","status":"pending"},{"content":"b","status":"completed"}]}`, 2, ""},
		{`[]`, 0, "invalid todos: arguments must be a JSON object"},
		{`{}`, 0, "invalid todos: todos is required"},
		{`{"todos":"x"}`, 0, "invalid todos: todos must be a list of objects"},
		{`{"todos":[{"content":" ","status":"pending"}]}`, 0, "invalid todos: todos[0].content must be a non-blank string"},
		{`{"todos":[{"content":"a","status":"done"}]}`, 0, `invalid todos: todos[0].status must be pending, in_progress or completed, not "done"`},
		{`{"todos":[{"content":"a","status":"pending","owner":"me"}]}`, 0, `invalid todos: todos[0] has an unknown field "owner"`},
		{`{"todos":[],"extra":1}`, 0, `invalid todos: unknown argument "extra"`},
	}
	for _, c := range cases {
		todos, err := ParseWriteTodos(c.args)
		if c.wantErr != "" {
			if err == nil || err.Error() != c.wantErr {
				t.Errorf("ParseWriteTodos(%s) = %v, want %q", c.args, err, c.wantErr)
			}
			continue
		}
		if err != nil || len(todos) != c.want {
			t.Errorf("ParseWriteTodos(%s) = %v, %v", c.args, todos, err)
		}
	}
}

// planningState is a started session with plan mode on.
func planningState(t *testing.T) *State {
	t.Helper()
	s := startedState(t)
	s.PlanModeEnabled = true
	return s
}

func todos(statuses ...TodoStatus) string {
	var parts []string
	for i, st := range statuses {
		parts = append(parts, `{"content":"task `+string(rune('a'+i))+`","status":"`+string(st)+`"}`)
	}
	return `{"todos":[` + strings.Join(parts, ",") + `]}`
}

func TestWriteTodosRevisesThePlan(t *testing.T) {
	cases := []struct {
		name       string
		planning   bool
		args       string
		wantStatus PlanStatus
		wantOutput string
	}{
		{"a planning turn writes a draft", true, todos(TodoPending, TodoPending), PlanDraft, `{"status":"updated","revision":1,"task_count":2}`},
		{"a chat turn writes an active plan", false, todos(TodoInProgress, TodoPending), PlanActive, `{"status":"updated","revision":1,"task_count":2}`},
		{"every task completed", false, todos(TodoCompleted, TodoCompleted), PlanCompleted, `{"status":"updated","revision":1,"task_count":2}`},
		{"no tasks clears it", true, todos(), PlanCleared, `{"status":"cleared","revision":1}`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s := planningState(t)
			if _, err := s.Send(SendRequest{Text: "plan it", PlanMode: c.planning}); err != nil {
				t.Fatal(err)
			}
			s.BeginTurn()
			records, events := s.ApplyModelOutcome(requested(allBuiltIns, call("p1", "write_todos", c.args, unknownPolicy)), testNow)
			wantEvents(t, events, EventUsageRecorded, EventToolCallDeferred, EventToolCallFinished, EventPlanUpdated)
			if records[0].Status != ToolCallSucceeded || records[0].Output != c.wantOutput {
				t.Errorf("record = %s %q, want %q", records[0].Status, records[0].Output, c.wantOutput)
			}
			if s.Plan == nil || s.Plan.Status != c.wantStatus || s.Plan.Revision != 1 {
				t.Errorf("plan = %+v, want %s revision 1", s.Plan, c.wantStatus)
			}
			if p := payloadOf(t, events[3]); p["status"] != string(c.wantStatus) || p["revision"] != float64(1) {
				t.Errorf("plan_updated = %v", p)
			}
		})
	}
}

func TestAPlanningTurnRunsOnlyOneWriteTodos(t *testing.T) {
	s := planningState(t)
	if _, err := s.Send(SendRequest{Text: "plan", PlanMode: true}); err != nil {
		t.Fatal(err)
	}
	s.BeginTurn()
	if s.Turn.Mode != ModePlanning || s.Mode != ModePlanning {
		t.Fatalf("mode = %s", s.Turn.Mode)
	}
	records, _ := s.ApplyModelOutcome(requested(allBuiltIns,
		call("p1", "write_todos", todos(TodoPending), unknownPolicy),
		call("p2", "write_todos", todos(TodoPending), unknownPolicy),
		call("w1", "refund", `{}`, writePolicy),
	), testNow)
	for _, r := range records[:2] {
		if r.Status != ToolCallFailed || r.Error != WriteTodosRepeatedText {
			t.Errorf("%s = %s %q, want failed: repeated", r.ID, r.Status, r.Error)
		}
	}
	if r := records[2]; r.Status != ToolCallRejected || DescribeOutcome(*r) != PlanningOnlyText || r.RequiresApproval {
		t.Errorf("w1 = %s %q", r.Status, DescribeOutcome(*r))
	}
	if s.Plan != nil || len(s.Interrupts) != 0 || !s.ToolCallsFinal() {
		t.Errorf("plan %+v, interrupts %v, final %v", s.Plan, s.Interrupts, s.ToolCallsFinal())
	}
}

func TestPlanModeMessages(t *testing.T) {
	s := startedState(t)
	if err := s.CheckSend(SendRequest{Text: "plan", PlanMode: true}); !isRejection(err) || !strings.Contains(err.Error(), "plan mode is not enabled") {
		t.Errorf("a plan_mode message with plan mode off = %v", err)
	}
	// The handler decides from the request and the state alone: a request
	// the validator accepted replays the same after plan mode is turned off.
	if m, err := s.Send(SendRequest{Text: "plan", PlanMode: true}); err != nil || !m.PlanMode {
		t.Errorf("Send of an accepted plan_mode message = %+v, %v", m, err)
	}
	// While a draft exists, any message plans: feedback revises the draft.
	s = planningState(t)
	s.Plan = &Plan{Revision: 3, Status: PlanDraft, Todos: []Todo{{Content: "a", Status: TodoPending}}}
	if _, err := s.QueueUserMessage("make it shorter"); err != nil {
		t.Fatal(err)
	}
	s.BeginTurn()
	if s.Turn.Mode != ModePlanning {
		t.Errorf("a message with a draft started a %s turn", s.Turn.Mode)
	}
}

func TestExecutePlan(t *testing.T) {
	draft := func() *State {
		s := planningState(t)
		s.Plan = &Plan{Revision: 2, Status: PlanDraft, Todos: []Todo{{Content: "a", Status: TodoPending}}}
		return s
	}
	cases := []struct {
		name    string
		setup   func(*State)
		rev     int
		wantErr string
	}{
		{"another revision", nil, 1, "the plan has no revision 1"},
		{"a completed plan", func(s *State) { s.Plan.Status = PlanCompleted }, 2, "is completed, not draft or active"},
		{"no plan", func(s *State) { s.Plan = nil }, 2, "the plan has no revision 2"},
		{"a running turn", func(s *State) { _, _ = s.QueueUserMessage("x"); s.BeginTurn() }, 2, "a turn is running"},
		{"a queued message", func(s *State) { s.Queued = []UserMessage{{ID: "msg-9", Text: "x"}} }, 2, "messages are waiting"},
		{"a pending execution", func(s *State) { s.PendingPlanExecution = 2 }, 2, "already pending"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s := draft()
			if c.setup != nil {
				c.setup(s)
			}
			if err := s.ExecutePlan(ExecutePlanRequest{Revision: c.rev}); !isRejection(err) || !strings.Contains(err.Error(), c.wantErr) {
				t.Errorf("ExecutePlan = %v, want %q", err, c.wantErr)
			}
		})
	}

	s := draft()
	if err := s.ExecutePlan(ExecutePlanRequest{Revision: 2}); err != nil {
		t.Fatal(err)
	}
	if snap := s.Snapshot(); snap.PendingPlanExecution != 2 || snap.Plan.Revision != 2 {
		t.Errorf("snapshot = plan %+v, pending %d", snap.Plan, snap.PendingPlanExecution)
	}
	events := s.BeginTurn()
	wantEvents(t, events, EventTurnStarted, EventPlanUpdated, EventPlanExecutionStarted)
	if s.Turn.Mode != ModeExecuting || s.Plan.Status != PlanActive || s.PendingPlanExecution != 0 {
		t.Errorf("turn %s, plan %s, pending %d", s.Turn.Mode, s.Plan.Status, s.PendingPlanExecution)
	}
	if got := userTexts(s, s.Turn.ID); !slices.Equal(got, []string{PlanExecutionMessage(2)}) {
		t.Errorf("the executing turn starts with %q", got)
	}
}

func TestAStaleApprovalNeverRuns(t *testing.T) {
	s := planningState(t)
	s.Plan = &Plan{Revision: 2, Status: PlanDraft}
	if err := s.ExecutePlan(ExecutePlanRequest{Revision: 2}); err != nil {
		t.Fatal(err)
	}
	// A message sent after the approval goes first, and its planning turn
	// writes revision 3.
	s.Queued = append(s.Queued, s.newMessage("one more step"))
	s.BeginTurn()
	if s.Turn.Mode != ModePlanning {
		t.Fatalf("mode = %s", s.Turn.Mode)
	}
	s.ApplyModelOutcome(requested(allBuiltIns, call("p1", "write_todos", todos(TodoPending), unknownPolicy)), testNow)
	s.ResumeTurn()
	s.ApplyModelOutcome(completed("revised"), testNow)
	if s.Plan.Revision != 3 || !s.CanBeginTurn() {
		t.Fatalf("plan %+v, can begin %v", s.Plan, s.CanBeginTurn())
	}
	if events := s.BeginTurn(); events != nil || s.Turn != nil || s.PendingPlanExecution != 0 {
		t.Errorf("the stale approval started %v (turn %+v)", eventTypes(events), s.Turn)
	}
}

func TestPlanNote(t *testing.T) {
	plan := &Plan{Revision: 4, Status: PlanActive, Todos: []Todo{{Content: "migrate", Status: TodoInProgress}, {Content: "verify", Status: TodoPending}}}
	cases := []struct {
		plan *Plan
		mode InteractionMode
		want []string
	}{
		{nil, ModeChat, nil},
		{&Plan{Revision: 1, Status: PlanCleared}, ModeChat, nil},
		{nil, ModePlanning, []string{"[stepwise] Plan: none yet.", "This is a planning turn"}},
		{plan, ModeChat, []string{"[stepwise] Plan (revision 4, active):", "- [in_progress] migrate", "- [pending] verify", "Keep the task statuses current"}},
		{plan, ModeExecuting, []string{"revision 4", "Execute the plan"}},
	}
	for _, c := range cases {
		note := PlanNote(c.plan, c.mode)
		if c.want == nil && note != "" {
			t.Errorf("PlanNote(%+v, %s) = %q, want none", c.plan, c.mode, note)
		}
		for _, w := range c.want {
			if !strings.Contains(note, w) {
				t.Errorf("PlanNote(%+v, %s) = %q, want it to contain %q", c.plan, c.mode, note, w)
			}
		}
	}
}
