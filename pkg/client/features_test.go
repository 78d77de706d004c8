package client_test

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"go.temporal.io/sdk/activity"
	sdkworker "go.temporal.io/sdk/worker"

	"github.com/stepwise-run/stepwise/internal/engine"
	"github.com/stepwise-run/stepwise/internal/enginetest"
	"github.com/stepwise-run/stepwise/internal/loop"
	"github.com/stepwise-run/stepwise/internal/rollout"
	"github.com/stepwise-run/stepwise/internal/tenancy"
	"github.com/stepwise-run/stepwise/internal/version"
	"github.com/stepwise-run/stepwise/pkg/agent"
	"github.com/stepwise-run/stepwise/pkg/client"
)

// While a worker of an engine version without steering or session settings
// polls the task queue, the client refuses the requests that need them,
// naming that version, and sends nothing; once the worker stops, they go
// through. Other requests are never held back.
func TestAGatedFeatureIsRefusedWhileAWorkerOfAnOlderEngineVersionPolls(t *testing.T) {
	server := enginetest.StartDevServer(t)
	c := server.Client()
	var refunds atomic.Int32
	refund, model := refundAgent(&refunds)
	runner, err := loop.New(agent.Definition{Name: "gated", Model: model, Tools: []agent.Tool{refund}})
	if err != nil {
		t.Fatal(err)
	}
	current := engine.NewWorker(c, engine.WorkerOptions{FlowType: "Gated", TaskQueue: tenancy.Tenant("test", "Gated").TaskQueue(), TaskSlots: 4, Runner: runner,
		Options: sdkworker.Options{Identity: rollout.WorkerIdentity(1, "gated-new", version.EngineVersion)}})
	if err := current.Start(); err != nil {
		t.Fatal(err)
	}
	defer current.Stop()
	s := client.New(c, testAgent("Gated"))
	client.SetRecentPoll(s, 5*time.Second)
	ctx := context.Background()
	if ok, err := s.Start(ctx, "g1", "hello"); !ok || err != nil {
		t.Fatalf("Start = %v, %v", ok, err)
	}
	enginetest.Eventually(t, time.Minute, "the first turn to end", func() (bool, error) {
		snap, err := s.Snapshot(ctx, "g1")
		return err == nil && snap.State != nil && snap.State.TurnCount == 1 && snap.State.ActiveTurnID == "", nil
	})

	// A worker of engine 0.1.0 joins the task queue. It polls only for
	// activities, so it never takes the session's own tasks.
	old := sdkworker.New(c, tenancy.Tenant("test", "Gated").TaskQueue(), sdkworker.Options{Identity: rollout.WorkerIdentity(2, "gated-old", "0.1.0")})
	old.RegisterActivityWithOptions(func(context.Context) error { return nil }, activity.RegisterOptions{Name: "Unused"})
	if err := old.Start(); err != nil {
		t.Fatal(err)
	}
	var refusal *client.FeatureError
	enginetest.Eventually(t, time.Minute, "Steer to be refused while the 0.1.0 worker polls", func() (bool, error) {
		ok, err := s.Steer(ctx, "g1", "change course")
		if ok {
			return false, errors.New("Steer was sent while a worker without steering polls")
		}
		return errors.As(err, &refusal), nil
	})
	if !errors.Is(refusal, client.ErrFeatureNotInEffect) || refusal.Feature != client.FeatureSteering || refusal.EngineVersion != "0.1.0" ||
		!strings.Contains(refusal.Worker, "gated-old") || refusal.Since != "0.2.0" || refusal.Request != "steer_user_message" {
		t.Errorf("the refusal is %+v", refusal)
	}
	if msg := refusal.Error(); !strings.Contains(msg, "steering") || !strings.Contains(msg, "engine 0.1.0") || !strings.Contains(msg, "engine 0.2.0 or later") {
		t.Errorf("the refusal says %q; want it to name the feature, the version that lacks it and the one that brought it", msg)
	}
	for name, call := range map[string]func() (bool, error){
		"CancelTurn":     func() (bool, error) { return s.CancelTurn(ctx, "g1", "turn-1") },
		"DeleteQueued":   func() (bool, error) { return s.DeleteQueued(ctx, "g1", "m1") },
		"UpdateSettings": func() (bool, error) { return s.UpdateSettings(ctx, "g1", client.SessionSettings{"model": "large"}) },
		"ExecutePlan":    func() (bool, error) { return s.ExecutePlan(ctx, "g1", 1) },
		"Start WithSettings": func() (bool, error) {
			return s.Start(ctx, "g2", "hi", client.WithSettings(client.SessionSettings{"model": "large"}))
		},
		"Send WithImages": func() (bool, error) {
			return s.Send(ctx, "g1", "look", client.WithImages(testImage))
		},
	} {
		if ok, err := call(); ok || !errors.Is(err, client.ErrFeatureNotInEffect) || !strings.Contains(err.Error(), "engine 0.1.0") {
			t.Errorf("%s while the 0.1.0 worker polls = %v, %v; want a refusal naming engine 0.1.0", name, ok, err)
		}
	}
	// A request every version serves is sent: the session answers it (an
	// approval of nothing pending is refused by the session, not the gate).
	if ok, err := s.Approve(ctx, "g1", "no-such-interrupt"); ok || err != nil {
		t.Errorf("Approve while the 0.1.0 worker polls = %v, %v; want the session's own refusal", ok, err)
	}

	old.Stop()
	enginetest.Eventually(t, time.Minute, "Steer to go through once the 0.1.0 worker stopped", func() (bool, error) {
		ok, err := s.Steer(ctx, "g1", "change course")
		if errors.Is(err, client.ErrFeatureNotInEffect) {
			return false, nil
		}
		return ok, err
	})
}

// testImage is a well-formed reference; the gate refuses it before any
// store is read.
var testImage = client.ImageReference{Type: "image", URI: "s3://media/sha256/" + strings.Repeat("ab", 32), MIMEType: "image/png",
	SHA256: strings.Repeat("ab", 32), SizeBytes: 100}

// A Send whose references could never be stored is refused before it is
// sent, with ErrInvalidImage naming what is wrong.
func TestSendRefusesInvalidImageReferences(t *testing.T) {
	s := client.New(nil, testAgent("Unsent"))
	bad := testImage
	bad.MIMEType = "image/svg+xml"
	many := make([]client.ImageReference, 21)
	for i := range many {
		many[i] = testImage
	}
	for name, images := range map[string][]client.ImageReference{"svg": {bad}, "21 images": many} {
		ok, err := s.Send(context.Background(), "x", "look", client.WithImages(images...))
		if ok || !errors.Is(err, client.ErrInvalidImage) {
			t.Errorf("%s: Send = %v, %v; want ErrInvalidImage", name, ok, err)
		}
	}
}
