package tenancy

import (
	"strings"
	"testing"
)

func TestNames(t *testing.T) {
	for _, tc := range []struct {
		name                                   string
		names                                  Names
		taskQueue, workflowID, counter, shared string
	}{
		{
			name: "tenant", names: Tenant("team-a", "SupportAgent"),
			taskQueue: "stepwise/team-a/SupportAgent", workflowID: "team-a/SupportAgent/s1",
			counter: "stepwise.spend-counter/team-a/SupportAgent",
		},
		{
			name: "another namespace, the same Flow type", names: Tenant("team-b", "SupportAgent"),
			taskQueue: "stepwise/team-b/SupportAgent", workflowID: "team-b/SupportAgent/s1",
			counter: "stepwise.spend-counter/team-b/SupportAgent",
		},
		{
			name: "shared", names: Shared("SupportAgent"),
			taskQueue: "stepwise/SupportAgent", workflowID: "s1", counter: "stepwise-spend-counter/SupportAgent", shared: "yes",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n := tc.names
			if got := n.TaskQueue(); got != tc.taskQueue {
				t.Errorf("TaskQueue() = %q, want %q", got, tc.taskQueue)
			}
			if got := n.WorkerDeployment(); got != tc.taskQueue || strings.Contains(got, ".") {
				t.Errorf("WorkerDeployment() = %q, want the task queue %q, which holds no '.'", got, tc.taskQueue)
			}
			if got := n.WorkflowID("s1"); got != tc.workflowID {
				t.Errorf("WorkflowID(s1) = %q, want %q", got, tc.workflowID)
			}
			if id, ok := n.SessionID(tc.workflowID); !ok || id != "s1" {
				t.Errorf("SessionID(%q) = %q, %v; want s1, true", tc.workflowID, id, ok)
			}
			if got := n.SpendCounterID(); got != tc.counter {
				t.Errorf("SpendCounterID() = %q, want %q", got, tc.counter)
			}
			if n.IsShared() != (tc.shared != "") {
				t.Errorf("IsShared() = %v", n.IsShared())
			}
		})
	}
}

// TestNamesNeverMeet checks that no choice of names one Agent makes can
// give it a name another Agent has: a task queue, a session's workflow ID
// or a spend counter, whatever the namespaces, Flow types and session IDs.
// The shared names are one session ID space for the whole Temporal
// namespace, which is why they are left behind; they still meet no tenant
// name.
func TestNamesNeverMeet(t *testing.T) {
	namespaces := []string{"team-a", "team-b", "stepwise-spend-counter", "a", "team"}
	flowTypes := []string{"SupportAgent", "Support", "a", "team-a"}
	sessionIDs := []string{"s1", "SupportAgent", "team-a", "stepwise-spend-counter", "x.y", "a:b@c=d+e-f"}
	var all []Names
	for _, ns := range namespaces {
		for _, ft := range flowTypes {
			all = append(all, Tenant(ns, ft))
		}
	}
	for _, ft := range flowTypes {
		all = append(all, Shared(ft))
	}
	owner := map[string]string{}
	claim := func(name, who string) {
		t.Helper()
		if prev, ok := owner[name]; ok && prev != who {
			t.Errorf("%q is a name of both %s and %s", name, prev, who)
		}
		owner[name] = who
	}
	for _, n := range all {
		who := n.String()
		claim("queue:"+n.TaskQueue(), who)
		// A workflow ID is one space for sessions and spend counters.
		claim("workflow:"+n.SpendCounterID(), who+" (counter)")
		for _, id := range sessionIDs {
			if n.IsShared() {
				who = "the shared names"
			}
			claim("workflow:"+n.WorkflowID(id), who+" session "+id)
		}
	}
}

func TestSessionIDOfAnotherAgent(t *testing.T) {
	a := Tenant("team-a", "SupportAgent")
	for _, id := range []string{
		"team-b/SupportAgent/s1",  // another namespace
		"team-a/Other/s1",         // another Flow type
		"team-a/SupportAgent/",    // no session ID
		"team-a/SupportAgent/x/y", // not a session ID
		"s1",                      // a shared session
	} {
		if got, ok := a.SessionID(id); ok {
			t.Errorf("SessionID(%q) = %q, true; want it refused", id, got)
		}
	}
	if _, ok := Shared("SupportAgent").SessionID("team-a/SupportAgent/s1"); ok {
		t.Error("the shared names took a tenant workflow ID as a session ID")
	}
}

func TestCheckSessionID(t *testing.T) {
	for _, id := range []string{"s1", "a", "A-1_b.c:d@e=f+g", strings.Repeat("x", 256)} {
		if err := CheckSessionID(id); err != nil {
			t.Errorf("CheckSessionID(%q) = %v, want nil", id, err)
		}
	}
	for _, id := range []string{"", "-a", ".a", "a/b", "a b", "a\nb", strings.Repeat("x", 257), "ä"} {
		if err := CheckSessionID(id); err == nil {
			t.Errorf("CheckSessionID(%q) = nil, want an error", id)
		}
	}
}

func TestOwns(t *testing.T) {
	a := Owner{Namespace: "team-a", Agent: "support", AgentUID: "u1"}
	for _, tc := range []struct {
		recorded Owner
		want     bool
	}{
		{Owner{Namespace: "team-a", Agent: "support", AgentUID: "u1"}, true},
		// An Agent created again under the name takes its sessions up.
		{Owner{Namespace: "team-a", Agent: "support", AgentUID: "u0"}, true},
		{Owner{Namespace: "team-b", Agent: "support", AgentUID: "u1"}, false},
		{Owner{Namespace: "team-a", Agent: "other", AgentUID: "u1"}, false},
		{Owner{}, false},
	} {
		if got := a.Owns(tc.recorded); got != tc.want {
			t.Errorf("%v.Owns(%v) = %v, want %v", a, tc.recorded, got, tc.want)
		}
	}
	if (Owner{}).Owns(Owner{}) {
		t.Error("an empty owner owns an unrecorded session")
	}
}
