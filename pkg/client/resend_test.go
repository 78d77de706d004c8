package client_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"go.temporal.io/api/serviceerror"

	"github.com/stepwise-run/stepwise/pkg/client"
)

func TestSendUntilTakenResendsOnlyWhatTheEngineDidNotRun(t *testing.T) {
	notReady := serviceerror.NewWorkflowNotReady("Unable to perform workflow execution update due to unexpected workflow task failure.")
	refusedErr := errors.New("refused")
	cases := []struct {
		name    string
		answers []error
		sends   int
		want    error
	}{
		{"an answer on the first send", []error{nil}, 1, nil},
		{"a failed workflow task, then an answer", []error{notReady, notReady, nil}, 3, nil},
		{"another error is not sent again", []error{refusedErr}, 1, refusedErr},
		{"a failed workflow task, then another error", []error{notReady, refusedErr}, 2, refusedErr},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			sends := 0
			err := client.SendUntilTaken(context.Background(), func() error {
				sends++
				return tc.answers[sends-1]
			})
			if !errors.Is(err, tc.want) || sends != tc.sends {
				t.Fatalf("got %v after %d sends, want %v after %d", err, sends, tc.want, tc.sends)
			}
		})
	}
	t.Run("the caller's context ends the resends", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
		defer cancel()
		sends := 0
		err := client.SendUntilTaken(ctx, func() error { sends++; return notReady })
		var got *serviceerror.WorkflowNotReady
		if !errors.As(err, &got) || sends < 2 {
			t.Fatalf("got %v after %d sends, want the engine's answer after several", err, sends)
		}
	})
}
