package worker

import (
	"context"
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stepwise-run/stepwise/internal/enginetest"
	"github.com/stepwise-run/stepwise/internal/render"
	"github.com/stepwise-run/stepwise/internal/tenancy"
	"github.com/stepwise-run/stepwise/pkg/client"
	"github.com/stepwise-run/stepwise/pkg/workerconfig"
)

func TestRunRefusesABadDefinitionBeforeConnecting(t *testing.T) {
	cfg := demoConfig()
	cfg.Definition.Model = workerconfig.Model{Provider: "mistral", Name: "large"}
	err := Run(context.Background(), cfg, Options{Logger: discardLogger()})
	if err == nil || !strings.Contains(err.Error(), "definition.model.provider") {
		t.Fatalf("Run() = %v, want an error naming definition.model.provider", err)
	}
}

func TestRunServesSessionsUntilItsContextEnds(t *testing.T) {
	server := enginetest.StartDevServer(t)
	cfg := demoConfig()
	cfg.FlowType = "WorkerRunDemo"
	cfg.Engine = workerconfig.Engine{
		Address: server.FrontendHostPort(), Namespace: "default", TaskQueue: tenancy.Tenant(cfg.Agent.Namespace, cfg.FlowType).TaskQueue(),
	}
	cfg.HealthAddress = freeAddress(t)
	health := "http://" + cfg.HealthAddress
	cfg.DebugAddress = freeAddress(t)
	debug := "http://" + cfg.DebugAddress

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- Run(ctx, cfg, Options{Logger: discardLogger(), StopTimeout: 5 * time.Second}) }()

	enginetest.Eventually(t, 30*time.Second, "the worker to be ready", func() (bool, error) {
		select {
		case err := <-done:
			t.Fatalf("Run() returned %v before the worker was ready", err)
		default:
		}
		resp, err := http.Get(health + "/readyz")
		if err != nil {
			return false, err
		}
		_ = resp.Body.Close()
		return resp.StatusCode == http.StatusOK, nil
	})

	sessions := client.New(server.Client(), client.Agent{Namespace: cfg.Agent.Namespace, Name: cfg.Agent.Name, FlowType: cfg.FlowType})
	if ok, err := sessions.Start(context.Background(), "run-s1", "hi"); !ok || err != nil {
		t.Fatalf("Start() = %v, %v", ok, err)
	}
	var last string
	enginetest.Eventually(t, 30*time.Second, "the first turn to end", func() (bool, error) {
		snap, err := sessions.Snapshot(context.Background(), "run-s1")
		if err != nil || snap.State == nil || snap.State.TurnCount < 1 || snap.State.ActiveTurnID != "" {
			return false, err
		}
		if snap.State.LastTurnError != "" {
			t.Fatalf("the turn failed: %s", snap.State.LastTurnError)
		}
		last = snap.Messages[len(snap.Messages)-1].Text
		return true, nil
	})
	if last != "Demo reply: hi" {
		t.Errorf("the last message is %q, want %q", last, "Demo reply: hi")
	}
	status, body := get(t, debug+"/debug/events?session=run-s1")
	if status != http.StatusOK || !strings.Contains(body, `"turn_started"`) {
		t.Errorf("/debug/events of the session = %d %s, want its turn_started event", status, body)
	}
	if status, body := get(t, health+"/debug/events?session=run-s1"); status != http.StatusNotFound {
		t.Errorf("/debug/events on the health port = %d %s, want 404", status, body)
	}

	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("Run() after its context ended = %v, want nil", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("Run() did not return within 30s of its context ending")
	}
	resp, err := http.Get(health + "/readyz")
	if err == nil {
		_ = resp.Body.Close()
		t.Fatalf("/readyz answered %d after Run returned, want no answer", resp.StatusCode)
	}
	if !errors.Is(err, syscall.ECONNREFUSED) {
		t.Errorf("/readyz after Run returned: %v, want the connection refused", err)
	}
}

// A worker joins a Worker Deployment with both a name and a build ID, or
// not at all; a half-set pair or a name Temporal would refuse stops it at
// start, naming the flag.
func TestDeploymentVersionNeedsBothFlags(t *testing.T) {
	if v, err := deploymentVersion("", ""); v != nil || err != nil {
		t.Errorf("no flags = %+v, %v; want an unversioned worker", v, err)
	}
	v, err := deploymentVersion("shop_support", "0.5.0-1a2b3c4d5e6f")
	if err != nil || v == nil || v.DeploymentName != "shop_support" || v.BuildID != "0.5.0-1a2b3c4d5e6f" {
		t.Errorf("both flags = %+v, %v", v, err)
	}
	for _, c := range []struct{ name, buildID, want string }{
		{"shop_support", "", "--build-id"},
		{"", "0.5.0-1a2b3c4d5e6f", "--deployment-name"},
		{"shop.support", "0.5.0-1a2b3c4d5e6f", `may not contain "."`},
	} {
		if _, err := deploymentVersion(c.name, c.buildID); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("deploymentVersion(%q, %q) = %v, want an error naming %s", c.name, c.buildID, err, c.want)
		}
	}
}

// The operator's init container runs this command of the stock worker
// before a worker with a hostPath store starts; its exit status decides.
func TestCheckMediaRootRefusesAStoreThroughALink(t *testing.T) {
	if checkMediaRootCommand != render.MediaRootCheckCommand {
		t.Fatalf("the worker answers %q, the operator runs %q", checkMediaRootCommand, render.MediaRootCheckCommand)
	}
	base := t.TempDir()
	other := t.TempDir()
	if err := os.Mkdir(filepath.Join(base, "store"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(other, filepath.Join(base, "link")); err != nil {
		t.Fatal(err)
	}
	if got := checkMediaRoot([]string{"--base=" + base, "--store=" + filepath.Join(base, "store"), "--path=store"}); got != 0 {
		t.Errorf("a real directory: exit %d, want 0", got)
	}
	if got := checkMediaRoot([]string{"--base=" + base, "--store=" + other, "--path=link"}); got != 1 {
		t.Errorf("a store through a link: exit %d, want 1", got)
	}
	if got := checkMediaRoot([]string{"--unknown"}); got != 2 {
		t.Errorf("a bad flag: exit %d, want 2", got)
	}
}
