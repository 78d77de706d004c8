package gateway_test

import (
	"fmt"
	"net/http"
	"slices"
	"testing"
	"time"

	"github.com/stepwise-run/stepwise/internal/enginetest"
	"github.com/stepwise-run/stepwise/internal/gatewayapi"
	sessions "github.com/stepwise-run/stepwise/pkg/client"
)

func waiting(t *testing.T, f *fixture, path, token string) (gatewayapi.WaitingResponse, int) {
	t.Helper()
	var resp gatewayapi.WaitingResponse
	status := call(t, http.MethodGet, f.gateway+path, token, nil, &resp)
	return resp, status
}

func sessionIDs(resp gatewayapi.WaitingResponse) []string {
	var ids []string
	for _, s := range resp.Sessions {
		ids = append(ids, s.Namespace+"/"+s.Agent+"/"+s.SessionID)
	}
	return ids
}

func TestWaitingSessionsAcrossAgentsShowOnlyWhatTheCallerMayRead(t *testing.T) {
	f := start(t)
	mustAccept(t, http.MethodPost, sessionURL(f, support, "s-waits-1"), gatewayapi.StartRequest{Message: "tools: write_approved"})
	mustAccept(t, http.MethodPost, sessionURL(f, support, "s-waits-2"), gatewayapi.StartRequest{Message: "tools: write_approved"})
	mustAccept(t, http.MethodPost, sessionURL(f, support, "s-idle"), gatewayapi.StartRequest{})

	var all gatewayapi.WaitingResponse
	enginetest.Eventually(t, 30*time.Second, "two sessions waiting for approval", func() (bool, error) {
		var status int
		all, status = waiting(t, f, gatewayapi.WaitingPath, operatorToken)
		return status == http.StatusOK && len(all.Sessions) == 2, fmt.Errorf("status %d: %+v", status, all)
	})
	// Newest first, each with the Step it waits in.
	if got, want := sessionIDs(all), []string{"team-a/support/s-waits-2", "team-a/support/s-waits-1"}; !slices.Equal(got, want) {
		t.Errorf("sessions = %v, want %v", got, want)
	}
	for _, s := range all.Sessions {
		if !slices.Equal(s.Steps, []string{sessions.StepAwaitToolApproval}) || s.StartTime.IsZero() {
			t.Errorf("session %s: steps %v, start %v", s.SessionID, s.Steps, s.StartTime)
		}
	}
	// The operator token reads every Agent of team-a: the one whose engine
	// does not answer is named, and its cause stays in the log.
	if len(all.Unavailable) != 1 || all.Unavailable[0].Agent != unreachable.Name || all.Unavailable[0].Reason != "engine_error" ||
		all.Unavailable[0].Message != "the engine did not answer the search; see the gateway's log" {
		t.Errorf("unavailable = %+v", all.Unavailable)
	}

	cases := []struct {
		name, path, token string
		status            int
		sessions          int
		unavailable       int
	}{
		{"a reader of one Agent sees its sessions and nothing of the others", gatewayapi.WaitingPath, readerToken, 200, 2, 0},
		{"a namespace's search", "/api/v1/namespaces/team-a/waiting", readerToken, 200, 2, 0},
		{"another namespace's token sees none, and no sign of team-a", gatewayapi.WaitingPath, otherNSToken, 200, 0, 0},
		{"a search of a namespace the token does not reach", "/api/v1/namespaces/team-a/waiting", otherNSToken, 200, 0, 0},
		{"the limit truncates", gatewayapi.WaitingPath + "?limit=1", readerToken, 200, 1, 0},
		{"a Step nobody waits in", gatewayapi.WaitingPath + "?step=AwaitQuestionAnswer", readerToken, 200, 0, 0},
		{"no token", gatewayapi.WaitingPath, "", 401, 0, 0},
		{"an unknown token", gatewayapi.WaitingPath, "not-a-known-token-0123456789abcdef", 401, 0, 0},
		{"a Step that is not one", gatewayapi.WaitingPath + "?step=Nap", readerToken, 400, 0, 0},
		{"a limit out of range", gatewayapi.WaitingPath + "?limit=501", readerToken, 400, 0, 0},
		{"a namespace that is not a name", "/api/v1/namespaces/Team_A/waiting", readerToken, 400, 0, 0},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			resp, status := waiting(t, f, tc.path, tc.token)
			if status != tc.status {
				t.Fatalf("status = %d, want %d", status, tc.status)
			}
			if status != http.StatusOK {
				return
			}
			if len(resp.Sessions) != tc.sessions || len(resp.Unavailable) != tc.unavailable {
				t.Errorf("sessions %v, unavailable %+v; want %d and %d", sessionIDs(resp), resp.Unavailable, tc.sessions, tc.unavailable)
			}
			if resp.Truncated != (tc.sessions == 1) {
				t.Errorf("truncated = %v", resp.Truncated)
			}
			for _, s := range resp.Sessions {
				if s.Namespace != support.Namespace || s.Agent != support.Name {
					t.Errorf("session of %s/%s shown", s.Namespace, s.Agent)
				}
			}
		})
	}
}
