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
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	temporalclient "go.temporal.io/sdk/client"

	agentsv1 "github.com/stepwise-run/stepwise/api/v1alpha1"
	"github.com/stepwise-run/stepwise/internal/demo"
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

// runDemoSession drives the demo session through the client: a turn that
// looks an order up and asks to refund it, the approval, and the reply.
func runDemoSession(out io.Writer, c temporalclient.Client, agent *agentsv1.Agent) error {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	s := sessions.New(c, sessions.AgentOf(agent))
	_, err := demo.Refund(ctx, out, s, demo.SessionID, "Please refund order 7", true)
	return err
}
