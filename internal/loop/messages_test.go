package loop

import (
	"encoding/json"
	"fmt"
	"reflect"
	"testing"

	"github.com/stepwise-run/stepwise/internal/session"
	"github.com/stepwise-run/stepwise/pkg/agent"
)

// fill gives every field of v a value that differs from every other
// field's, and each slice one element, so a field a conversion drops or
// mixes up shows.
func fill(v reflect.Value, n *int) {
	*n++
	switch v.Kind() {
	case reflect.Pointer:
		v.Set(reflect.New(v.Type().Elem()))
		fill(v.Elem(), n)
	case reflect.Struct:
		for i := range v.NumField() {
			fill(v.Field(i), n)
		}
	case reflect.Slice:
		if v.Type() == reflect.TypeFor[json.RawMessage]() {
			v.SetBytes(fmt.Appendf(nil, `{"n":%d}`, *n))
			return
		}
		s := reflect.MakeSlice(v.Type(), 1, 1)
		fill(s.Index(0), n)
		v.Set(s)
	case reflect.String:
		v.SetString(fmt.Sprintf("value-%d", *n))
	case reflect.Int, reflect.Int64:
		v.SetInt(int64(*n))
	}
}

// TestStoredMessagesAreTheModelMessagesByteForByte fills every field of a
// model message, usage and call metadata, stores them and reads them back:
// nothing is lost, and the stored JSON is the model interface's JSON byte
// for byte, so stored state and recorded histories read the same through
// either type.
func TestStoredMessagesAreTheModelMessagesByteForByte(t *testing.T) {
	n := 0
	var m agent.Message
	fill(reflect.ValueOf(&m).Elem(), &n)
	var u agent.Usage
	fill(reflect.ValueOf(&u).Elem(), &n)
	var meta agent.CallMetadata
	fill(reflect.ValueOf(&meta).Elem(), &n)

	stored := storedMessage(m)
	if back := modelMessage(stored); !reflect.DeepEqual(back, m) {
		t.Errorf("a message read back = %+v\nwant %+v", back, m)
	}
	for _, c := range []struct {
		name          string
		model, stored any
	}{
		{"message", m, stored},
		{"usage", u, storedUsage(u)},
		{"call metadata", meta, storedMetadata(meta)},
	} {
		want, err := json.Marshal(c.model)
		if err != nil {
			t.Fatal(err)
		}
		got, err := json.Marshal(c.stored)
		if err != nil {
			t.Fatal(err)
		}
		if string(got) != string(want) {
			t.Errorf("the stored %s is %s\nthe model's is %s", c.name, got, want)
		}
		// The JSON of one reads into the other unchanged.
		into := reflect.New(reflect.TypeOf(c.stored))
		if err := json.Unmarshal(want, into.Interface()); err != nil || !reflect.DeepEqual(into.Elem().Interface(), c.stored) {
			t.Errorf("the model's %s read as stored = %+v, %v", c.name, into.Elem().Interface(), err)
		}
	}
	if got := modelMessages(nil); got != nil {
		t.Errorf("no messages convert to %v", got)
	}
	if got := storedMessages([]agent.Message{{Role: agent.RoleUser, Text: "hi"}}); len(got) != 1 || got[0].Role != session.RoleUser || got[0].ToolCalls != nil || got[0].Output != nil {
		t.Errorf("a plain message stored as %+v", got)
	}
}
