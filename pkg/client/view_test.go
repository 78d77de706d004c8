package client

import (
	"encoding/json"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stepwise-run/stepwise/internal/session"
)

// notShown are the fields of the session's query results that the view
// leaves out on purpose, by type and field: what only the engine reads, and
// the provider's own output items (their text, reasoning and tool calls are
// shown). A field added to a query result fails
// TestTheViewShowsEveryFieldOfTheQueryResults until it is mapped or listed
// here.
var notShown = []string{
	"Snapshot.QueuedMessageCount", // len(QueuedMessages)
	"ToolCallRecord.SourceReference",
	"ToolCallRecord.Ordered",
	"ToolCallRecord.AfterWrite",
	"ToolCallRecord.StepLimit",
	"ToolCallRecord.InputQuestions",
	"ToolCallRecord.InputContinuation",
	"ToolCallRecord.TaskPollInterval",
	"ToolCallRecord.TaskAnswer",
	"ToolCallRecord.TaskAbandoned",
	"ToolCallRecord.ResultStored",
	"ToolCallRecord.TraceContext",
	"OutputItem.Provider",
	"OutputItem.API",
	"OutputItem.Item",
	"OutputItem.ToolCall",
}

// filler gives every field of a value a distinct value: each string names
// its field, each number is new, so a field's value found in the view's
// JSON shows that the field was mapped.
type filler struct {
	n     int
	marks map[string]string // field -> its value as JSON shows it
}

// fill fills v, the value of the field owner; the fields of a field in
// notShown are filled but not marked.
func (f *filler) fill(v reflect.Value, owner string) {
	if slices.Contains(notShown, owner) {
		(&filler{n: f.n, marks: map[string]string{}}).fill(v, "")
		return
	}
	if v.Type() == reflect.TypeFor[session.OutputItemType]() {
		// Reasoning items are what the view shows of output items.
		v.SetString(string(session.OutputReasoning))
		return
	}
	switch v.Kind() {
	case reflect.Pointer:
		if v.Type() == reflect.TypeFor[*time.Time]() {
			f.n++
			t := time.Date(2030, 1, 1, 0, 0, f.n, 0, time.UTC)
			v.Set(reflect.ValueOf(&t))
			f.marks[owner] = t.Format(time.RFC3339)
			return
		}
		v.Set(reflect.New(v.Type().Elem()))
		f.fill(v.Elem(), owner)
	case reflect.Struct:
		for i := range v.NumField() {
			field := v.Type().Field(i)
			if !field.IsExported() {
				continue
			}
			f.fill(v.Field(i), v.Type().Name()+"."+field.Name)
		}
	case reflect.Slice:
		if v.Type() == reflect.TypeFor[json.RawMessage]() {
			f.n++
			raw := fmt.Sprintf(`{"mark":%d}`, 7000000+f.n)
			v.SetBytes([]byte(raw))
			f.marks[owner] = raw
			return
		}
		s := reflect.MakeSlice(v.Type(), 1, 1)
		f.fill(s.Index(0), owner)
		v.Set(s)
	case reflect.String:
		mark := "mark-" + strings.ReplaceAll(owner, ".", "-")
		v.SetString(mark)
		f.marks[owner] = mark
	case reflect.Int, reflect.Int64:
		f.n++
		v.SetInt(int64(7000000 + f.n))
		f.marks[owner] = fmt.Sprint(7000000 + f.n)
	case reflect.Bool:
		v.SetBool(true)
		f.marks[owner] = "true"
	case reflect.Map:
		v.Set(reflect.MakeMap(v.Type()))
	}
}

// TestTheViewShowsEveryFieldOfTheQueryResults fills every field of a
// snapshot and a messages page with a distinct value, maps them, and
// checks that each value reaches the view (unless listed in notShown) and
// that the view has no field the mapping leaves empty.
func TestTheViewShowsEveryFieldOfTheQueryResults(t *testing.T) {
	for _, tc := range []struct {
		name string
		from any
		view func(any) any
	}{
		{"snapshot", &session.Snapshot{}, func(v any) any { return snapshotView(*v.(*session.Snapshot)) }},
		{"messages page", &session.MessagesPage{}, func(v any) any { return messagesPageView(*v.(*session.MessagesPage)) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := &filler{marks: map[string]string{}}
			f.fill(reflect.ValueOf(tc.from).Elem(), "")
			view := tc.view(tc.from)
			raw, err := json.Marshal(view)
			if err != nil {
				t.Fatal(err)
			}
			for field, mark := range f.marks {
				if mark == "true" {
					continue
				}
				if !strings.Contains(string(raw), mark) {
					t.Errorf("%s does not reach the view: map it, or list it in notShown", field)
				}
			}
			assertFilled(t, reflect.ValueOf(view), reflect.TypeOf(view).Name())
		})
	}
}

// assertFilled fails for each field of the view left at its zero value.
func assertFilled(t *testing.T, v reflect.Value, path string) {
	t.Helper()
	switch v.Kind() {
	case reflect.Pointer:
		if v.IsNil() {
			t.Errorf("the view's %s is empty: the mapping does not fill it", path)
			return
		}
		if v.Type() != reflect.TypeFor[*time.Time]() {
			assertFilled(t, v.Elem(), path)
		}
	case reflect.Struct:
		for i := range v.NumField() {
			assertFilled(t, v.Field(i), path+"."+v.Type().Field(i).Name)
		}
	case reflect.Slice:
		if v.Len() == 0 {
			t.Errorf("the view's %s is empty: the mapping does not fill it", path)
			return
		}
		if v.Type() != reflect.TypeFor[json.RawMessage]() {
			assertFilled(t, v.Index(0), path+"[0]")
		}
	default:
		if v.IsZero() {
			t.Errorf("the view's %s is empty: the mapping does not fill it", path)
		}
	}
}

// TestReasoningShowsTheReasoningItemsOnly maps a message whose output has
// text, a tool call and reasoning: the view shows the reasoning text, and
// never the provider's opaque items.
func TestReasoningShowsTheReasoningItemsOnly(t *testing.T) {
	got := messagesView([]session.Message{{
		Sequence: 3, TurnID: "turn-1", Role: session.RoleAssistant, Text: "answer",
		Output: []session.OutputItem{
			{Provider: "openai", API: "responses", Type: session.OutputReasoning, Text: "first I look", Item: json.RawMessage(`{"encrypted_content":"secret"}`)},
			{Provider: "openai", API: "responses", Type: session.OutputText, Text: "answer"},
			{Provider: "openai", API: "responses", Type: session.OutputReasoning, Text: "then I answer"},
		},
	}})
	want := []Message{{Sequence: 3, TurnID: "turn-1", Role: RoleAssistant, Text: "answer", Reasoning: "first I look\n\nthen I answer"}}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("view = %+v, want %+v", got, want)
	}
	if raw, _ := json.Marshal(got); strings.Contains(string(raw), "secret") {
		t.Errorf("the view shows a provider's opaque item: %s", raw)
	}
}

// TestAnEmptySnapshotHasEmptyListsAndNoState maps a session that has not
// started: lists are empty rather than null, so a UI can range over them.
func TestAnEmptySnapshotHasEmptyListsAndNoState(t *testing.T) {
	raw, err := json.Marshal(snapshotView(session.Snapshot{}))
	if err != nil {
		t.Fatal(err)
	}
	want := `{"state":null,"messages":[],"pendingInterrupts":[],"toolCalls":[],` +
		`"usage":{"modelCalls":0,"inputTokens":0,"outputTokens":0,"cachedInputTokens":0,"reasoningTokens":0},` +
		`"queuedMessages":[],"steeredMessages":[],"settings":{},"plan":null}`
	if string(raw) != want {
		t.Errorf("empty snapshot = %s\nwant %s", raw, want)
	}
}

// TestTheViewsConstantsAreTheSessions checks that every status, kind and
// role the view names is the session's own word for it.
func TestTheViewsConstantsAreTheSessions(t *testing.T) {
	pairs := [][2]string{
		{string(StatusWaitingForUserMessage), string(session.StatusWaitingForUserMessage)},
		{string(StatusRunningModel), string(session.StatusRunningModel)},
		{string(StatusRunningTools), string(session.StatusRunningTools)},
		{string(StatusCompactingContext), string(session.StatusCompactingContext)},
		{string(ModeChat), string(session.ModeChat)},
		{string(ModePlanning), string(session.ModePlanning)},
		{string(ModeExecuting), string(session.ModeExecuting)},
		{string(RoleUser), string(session.RoleUser)},
		{string(RoleAssistant), string(session.RoleAssistant)},
		{string(RoleTool), string(session.RoleTool)},
		{string(InterruptApproval), string(session.InterruptApproval)},
		{string(InterruptQuestion), string(session.InterruptQuestion)},
		{string(ToolCallAwaitingApproval), string(session.ToolCallAwaitingApproval)},
		{string(ToolCallApproved), string(session.ToolCallApproved)},
		{string(ToolCallAwaitingAnswer), string(session.ToolCallAwaitingAnswer)},
		{string(ToolCallWaitingForTimer), string(session.ToolCallWaitingForTimer)},
		{string(ToolCallWaitingForTask), string(session.ToolCallWaitingForTask)},
		{string(ToolCallWriteQueued), string(session.ToolCallWriteQueued)},
		{string(ToolCallRejected), string(session.ToolCallRejected)},
		{string(ToolCallSucceeded), string(session.ToolCallSucceeded)},
		{string(ToolCallFailed), string(session.ToolCallFailed)},
		{string(ToolCallOutcomeUnknown), string(session.ToolCallOutcomeUnknown)},
		{string(PlanDraft), string(session.PlanDraft)},
		{string(PlanActive), string(session.PlanActive)},
		{string(PlanCompleted), string(session.PlanCompleted)},
		{string(PlanCleared), string(session.PlanCleared)},
		{string(TodoPending), string(session.TodoPending)},
		{string(TodoInProgress), string(session.TodoInProgress)},
		{string(TodoCompleted), string(session.TodoCompleted)},
	}
	for _, p := range pairs {
		if p[0] != p[1] {
			t.Errorf("the view says %q where the session says %q", p[0], p[1])
		}
	}
	for _, s := range []session.ToolCallStatus{session.ToolCallRejected, session.ToolCallSucceeded, session.ToolCallApproved, session.ToolCallWriteQueued} {
		if ToolCallStatus(s).Final() != s.Final() {
			t.Errorf("%s: Final = %v in the view, %v in the session", s, ToolCallStatus(s).Final(), s.Final())
		}
	}
}
