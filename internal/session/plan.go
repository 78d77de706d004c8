package session

import (
	"encoding/json"
	"fmt"
	"strings"
)

// PlanStatus is where a plan stands.
type PlanStatus string

// Plan statuses.
const (
	// PlanDraft is a plan a planning turn wrote; it waits for execute_plan.
	PlanDraft     PlanStatus = "draft"
	PlanActive    PlanStatus = "active"
	PlanCompleted PlanStatus = "completed"
	// PlanCleared is a plan with no tasks.
	PlanCleared PlanStatus = "cleared"
)

// TodoStatus is where one task of a plan stands.
type TodoStatus string

// Task statuses.
const (
	TodoPending    TodoStatus = "pending"
	TodoInProgress TodoStatus = "in_progress"
	TodoCompleted  TodoStatus = "completed"
)

// Todo is one task of a plan.
type Todo struct {
	Content string     `json:"content"`
	Status  TodoStatus `json:"status"`
}

// Plan is the session's plan, replaced as a whole by each write_todos call.
type Plan struct {
	Revision int        `json:"revision"`
	Status   PlanStatus `json:"status"`
	Todos    []Todo     `json:"todos"`
}

// Texts of plans and plan mode.
const (
	// WriteTodosRepeatedText fails every write_todos call of a response that
	// made more than one.
	WriteTodosRepeatedText = "write_todos was called more than once in one response"
	// PlanningOnlyText is the result of any other call of a planning turn.
	PlanningOnlyText = "The tool call was not run: a planning turn can only call write_todos."
	// PlanNoteHeader starts the note that shows the model the plan.
	PlanNoteHeader = "[stepwise] Plan"
)

// PlanExecutionMessage is the user message of the turn that executes an
// approved plan.
func PlanExecutionMessage(revision int) string {
	return fmt.Sprintf("[stepwise] The user approved plan revision %d. Execute it and keep the task statuses current with write_todos.", revision)
}

// ParseWriteTodos decodes and checks write_todos arguments; the error is the
// call's model-visible failure.
func ParseWriteTodos(arguments string) ([]Todo, error) {
	invalid := func(reason string) error { return fmt.Errorf("invalid todos: %s", reason) }
	var obj map[string]json.RawMessage
	if err := json.Unmarshal([]byte(arguments), &obj); err != nil || obj == nil {
		return nil, invalid("arguments must be a JSON object")
	}
	// Keys in order, so the error names the same key on every replay.
	for _, k := range sortedKeys(obj) {
		if k != "todos" {
			return nil, invalid(fmt.Sprintf("unknown argument %q", k))
		}
	}
	raw, ok := obj["todos"]
	if !ok || string(raw) == "null" {
		return nil, invalid("todos is required")
	}
	var items []map[string]json.RawMessage
	if err := json.Unmarshal(raw, &items); err != nil {
		return nil, invalid("todos must be a list of objects")
	}
	todos := make([]Todo, 0, len(items))
	for i, item := range items {
		var t Todo
		if err := json.Unmarshal(item["content"], &t.Content); err != nil || strings.TrimSpace(t.Content) == "" {
			return nil, invalid(fmt.Sprintf("todos[%d].content must be a non-blank string", i))
		}
		if err := json.Unmarshal(item["status"], &t.Status); err != nil {
			return nil, invalid(fmt.Sprintf("todos[%d].status must be pending, in_progress or completed", i))
		}
		switch t.Status {
		case TodoPending, TodoInProgress, TodoCompleted:
		default:
			return nil, invalid(fmt.Sprintf("todos[%d].status must be pending, in_progress or completed, not %q", i, t.Status))
		}
		for _, k := range sortedKeys(item) {
			if k != "content" && k != "status" {
				return nil, invalid(fmt.Sprintf("todos[%d] has an unknown field %q", i, k))
			}
		}
		todos = append(todos, t)
	}
	return todos, nil
}

// writeTodos records one write_todos call in RunModel's commit: the plan's
// next revision, or the call's failure.
func (s *State) writeTodos(r *ToolCallRecord, repeated bool) []Event {
	if repeated {
		return s.finish(r, ToolCallFailed, "", WriteTodosRepeatedText)
	}
	todos, err := ParseWriteTodos(r.Arguments)
	if err != nil {
		return s.finish(r, ToolCallFailed, "", err.Error())
	}
	revision := 1
	if s.Plan != nil {
		revision = s.Plan.Revision + 1
	}
	plan := &Plan{Revision: revision, Todos: todos, Status: PlanActive}
	completed := 0
	for _, t := range todos {
		if t.Status == TodoCompleted {
			completed++
		}
	}
	switch {
	case len(todos) == 0:
		plan.Status = PlanCleared
	case s.Turn.Mode == ModePlanning:
		plan.Status = PlanDraft
	case completed == len(todos):
		plan.Status = PlanCompleted
	}
	s.Plan = plan
	var output string
	if plan.Status == PlanCleared {
		output = jsonText(struct {
			Status   string `json:"status"`
			Revision int    `json:"revision"`
		}{"cleared", revision})
	} else {
		output = jsonText(struct {
			Status    string `json:"status"`
			Revision  int    `json:"revision"`
			TaskCount int    `json:"task_count"`
		}{"updated", revision, len(todos)})
	}
	return append(s.finish(r, ToolCallSucceeded, output, ""), s.planUpdated())
}

func (s *State) planUpdated() Event {
	return NewEvent(EventPlanUpdated, s.turnID(), map[string]any{
		"revision": s.Plan.Revision, "status": s.Plan.Status, "task_count": len(s.Plan.Todos),
	})
}

func (s *State) turnID() string {
	if s.Turn == nil {
		return ""
	}
	return s.Turn.ID
}

// ExecutePlanRequest is execute_plan's input.
type ExecutePlanRequest struct {
	Revision int `json:"revision"`
}

// CheckExecutePlan is execute_plan's validator.
func (s *State) CheckExecutePlan(req ExecutePlanRequest) error {
	switch {
	case !s.Started:
		return reject("the session has not started")
	case s.Plan == nil || s.Plan.Revision != req.Revision:
		return reject("the plan has no revision %d", req.Revision)
	case s.Plan.Status != PlanDraft && s.Plan.Status != PlanActive:
		return reject("plan revision %d is %s, not draft or active", req.Revision, s.Plan.Status)
	case s.Turn != nil:
		return reject("a turn is running; execute the plan when the session waits for a message")
	case s.PendingPlanExecution != 0:
		return reject("an execution of plan revision %d is already pending", s.PendingPlanExecution)
	case len(s.Queued) > 0 || len(s.Steered) > 0:
		return reject("messages are waiting for a turn")
	}
	return nil
}

// ExecutePlan is execute_plan: it records the approval, which the next
// AwaitUserMessage turns into an executing turn.
func (s *State) ExecutePlan(req ExecutePlanRequest) error {
	if err := s.CheckExecutePlan(req); err != nil {
		return err
	}
	s.PendingPlanExecution = req.Revision
	return nil
}

// planExecutionPending reports whether execute_plan approved a revision
// that no turn has started yet. BeginTurn drops an approval that a later
// revision made stale.
func (s *State) planExecutionPending() bool {
	return s.PendingPlanExecution != 0
}

// beginPlanExecution starts the executing turn of an approved plan, or
// drops an approval that a later revision replaced.
func (s *State) beginPlanExecution() []Event {
	revision := s.PendingPlanExecution
	s.PendingPlanExecution = 0
	if s.Plan == nil || s.Plan.Revision != revision || (s.Plan.Status != PlanDraft && s.Plan.Status != PlanActive) {
		return nil
	}
	wasDraft := s.Plan.Status == PlanDraft
	s.Plan.Status = PlanActive
	events := s.startTurn(ModeExecuting, []UserMessage{{Text: PlanExecutionMessage(revision)}})
	if wasDraft {
		events = append(events, s.planUpdated())
	}
	return append(events, NewEvent(EventPlanExecutionStarted, s.Turn.ID, map[string]any{"revision": revision}))
}

// PlanNote shows the model the plan before the turn's items: the plan and,
// in a planning turn, what the turn is for. It is empty when there is no
// plan and the turn does not plan.
func PlanNote(plan *Plan, mode InteractionMode) string {
	var b strings.Builder
	if plan != nil && plan.Status != PlanCleared {
		fmt.Fprintf(&b, "%s (revision %d, %s):\n", PlanNoteHeader, plan.Revision, plan.Status)
		for _, t := range plan.Todos {
			fmt.Fprintf(&b, "- [%s] %s\n", t.Status, t.Content)
		}
	}
	switch mode {
	case ModePlanning:
		if b.Len() == 0 {
			b.WriteString(PlanNoteHeader + ": none yet.\n")
		}
		b.WriteString("This is a planning turn: write or revise the plan with write_todos, and run nothing else. " +
			"The user reviews the plan before it runs. You may answer in text instead, for example to ask a clarifying question.")
	case ModeExecuting:
		b.WriteString("Execute the plan, and keep the task statuses current with write_todos.")
	default:
		if b.Len() > 0 {
			b.WriteString("Keep the task statuses current with write_todos.")
		}
	}
	return strings.TrimSpace(b.String())
}
