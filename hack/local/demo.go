package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	temporalclient "go.temporal.io/sdk/client"

	agentsv1 "github.com/stepwise-run/stepwise/api/v1alpha1"
	"github.com/stepwise-run/stepwise/internal/render"
	sessions "github.com/stepwise-run/stepwise/pkg/client"
	"github.com/stepwise-run/stepwise/pkg/workerconfig"
)

func findAgent(agents []agentsv1.Agent, name string) *agentsv1.Agent {
	for i := range agents {
		if agents[i].Name == name {
			return &agents[i]
		}
	}
	return nil
}

// startWorker runs the worker as a process with the configuration document
// the operator rendered into the Agent's ConfigMap, as its pods would.
func startWorker(c client.Client, agent *agentsv1.Agent, binary, workDir string) (func() error, error) {
	var cm corev1.ConfigMap
	key := client.ObjectKey{Namespace: agent.Namespace, Name: render.ConfigMapName(agent.Name, agent.Status.ConfigDigest)}
	if err := c.Get(context.Background(), key, &cm); err != nil {
		return nil, fmt.Errorf("reading the rendered worker configuration %s: %w", key, err)
	}
	cfg, err := workerconfig.Decode([]byte(cm.Data[workerconfig.FileName]))
	if err != nil {
		return nil, err
	}
	// The pod's health port is in use by nothing here, but a local process
	// shares the machine's ports.
	listener, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	cfg.HealthAddress = listener.Addr().String()
	_ = listener.Close()
	doc, err := cfg.Encode()
	if err != nil {
		return nil, err
	}
	path := filepath.Join(workDir, workerconfig.FileName)
	if err := os.WriteFile(path, doc, 0o600); err != nil {
		return nil, err
	}
	logFile, err := os.Create(filepath.Join(workDir, "worker.log"))
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(binary, "--config="+path, "--stop-timeout=10s")
	cmd.Stdout, cmd.Stderr = logFile, logFile
	if err := cmd.Start(); err != nil {
		_ = logFile.Close()
		return nil, fmt.Errorf("starting %s: %w", binary, err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait(); _ = logFile.Close() }()
	stop := func() error {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case err := <-done:
			return err
		case <-time.After(20 * time.Second):
			_ = cmd.Process.Kill()
			return errors.New("the worker did not stop within 20s of SIGTERM")
		}
	}
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		if resp, err := http.Get("http://" + cfg.HealthAddress + "/readyz"); err == nil {
			_ = resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return stop, nil
			}
		}
		select {
		case err := <-done:
			log, _ := os.ReadFile(logFile.Name())
			return nil, fmt.Errorf("the worker exited before it was ready (%w):\n%s", err, log)
		case <-time.After(100 * time.Millisecond):
		}
	}
	_ = stop()
	return nil, errors.New("the worker was not ready within 30s")
}

// runDemoSession drives one session through the client: a turn that looks
// an order up and asks to refund it, the approval, and the reply.
func runDemoSession(out io.Writer, c temporalclient.Client, agent *agentsv1.Agent) error {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	s := sessions.New(c, agent.Spec.FlowType, agent.Status.TaskQueue)
	const id = "demo-session"
	step(out, "starting session %s: %q", id, "Please refund order 7")
	if ok, err := s.Start(ctx, id, "Please refund order 7"); err != nil || !ok {
		return fmt.Errorf("starting the demo session: started=%v: %w", ok, err)
	}
	var interrupt sessions.Interrupt
	if err := poll(ctx, func() (bool, error) {
		snap, err := s.Snapshot(ctx, id)
		if err != nil || len(snap.PendingInterrupts) == 0 {
			return false, err
		}
		interrupt = snap.PendingInterrupts[0]
		return true, nil
	}); err != nil {
		return fmt.Errorf("waiting for the approval: %w", err)
	}
	fmt.Fprintf(out, "the session waits for approval of %s %s (interrupt %s)\n", interrupt.ToolName, interrupt.Arguments, interrupt.ID)
	if err := poll(ctx, func() (bool, error) {
		found, err := sessions.Waiting(ctx, c, "default", sessions.StepAwaitToolApproval)
		for _, w := range found {
			if w.SessionID == id {
				fmt.Fprintf(out, "found waiting for a person: %s %s in %s\n", w.FlowType, w.SessionID, sessions.StepAwaitToolApproval)
				return true, nil
			}
		}
		return false, err
	}); err != nil {
		return fmt.Errorf("searching for sessions waiting for approval: %w", err)
	}
	step(out, "approving %s", interrupt.ID)
	if ok, err := s.Approve(ctx, id, interrupt.ID); err != nil || !ok {
		return fmt.Errorf("approving: ok=%v: %w", ok, err)
	}
	var snap sessions.Snapshot
	if err := poll(ctx, func() (bool, error) {
		var err error
		snap, err = s.Snapshot(ctx, id)
		return err == nil && snap.State != nil && snap.State.ActiveTurnID == "" && len(snap.Messages) > 1, err
	}); err != nil {
		return fmt.Errorf("waiting for the reply: %w", err)
	}
	step(out, "the session's messages")
	for _, m := range snap.Messages {
		text := m.Text
		for _, call := range m.ToolCalls {
			text = strings.TrimSpace(text + fmt.Sprintf(" [calls %s %s]", call.Name, call.Arguments))
		}
		fmt.Fprintf(out, "  %3d %-9s %s\n", m.Sequence, m.Role, text)
	}
	fmt.Fprintf(out, "usage: %d model calls, %d input and %d output tokens\n", snap.Usage.ModelCalls, snap.Usage.InputTokens, snap.Usage.OutputTokens)
	return nil
}

func poll(ctx context.Context, cond func() (bool, error)) error {
	var last error
	for {
		ok, err := cond()
		if ok {
			return nil
		}
		last = err
		select {
		case <-ctx.Done():
			return errors.Join(ctx.Err(), last)
		case <-time.After(100 * time.Millisecond):
		}
	}
}
