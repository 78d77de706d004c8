// Package devserver starts a Temporal server for the tests and the local
// default: the server the Makefile builds from go.temporal.io/server, on an
// in-memory SQLite store and free loopback ports, set up the way sessions
// need: the default namespace, the search attributes of active Steps and of
// owners, and one partition per task queue.
//
// It runs the server itself rather than the Temporal CLI's dev server: the
// CLI releases that build here embed a server older than 1.31, which never
// tells a session pinned to a worker version that its Worker Deployment's
// current version changed, so sessions could not move between versions.
package devserver

import (
	"bytes"
	"context"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"text/template"
	"time"

	"go.temporal.io/api/operatorservice/v1"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
	temporallog "go.temporal.io/sdk/log"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/stepwise-run/stepwise/internal/searchattr"
)

// Namespace is the namespace the server registers.
const Namespace = "default"

// DynamicConfigFlag precedes one "key=value" setting among Start's extra
// arguments; the value is JSON, as in `"10s"`, `1` or `true`.
const DynamicConfigFlag = "--dynamic-config-value"

// defaults tune the server for one machine: one partition per task queue,
// so a task never waits to be forwarded to the partition a worker polls;
// eager activity dispatch, so an activity that workflow code schedules on
// its own task queue goes straight back to the worker that completed the
// workflow task; search attributes visible as soon as they are added; and
// a namespace registered at start visible to every service at once.
var defaults = map[string]string{
	"matching.numTaskqueueReadPartitions":            "1",
	"matching.numTaskqueueWritePartitions":           "1",
	"system.enableActivityEagerExecution":            "true",
	"system.forceSearchAttributesCacheRefreshOnRead": "true",
	"system.namespaceCacheRefreshInterval":           `"1s"`,
	"frontend.persistenceMaxQPS":                     "10000",
	"history.persistenceMaxQPS":                      "45000",
}

// serverPorts is how many ports server.yaml.tmpl binds; the first is the
// frontend's.
const serverPorts = 9

// portAttempts bounds how often Start picks new ports after another
// process took one of them.
const portAttempts = 5

// errPortTaken marks a server that exited because a port it was given was
// bound by someone else in the meantime.
var errPortTaken = errors.New("a port was taken before the server bound it")

//go:embed server.yaml.tmpl
var configTemplate string

// Server is a running Temporal server process and a client of it.
type Server struct {
	cmd      *exec.Cmd
	dir      string
	frontend string
	client   client.Client
	done     chan struct{}
}

// FrontendHostPort is the address clients and workers dial.
func (s *Server) FrontendHostPort() string { return s.frontend }

// Client is a client of the server's default namespace.
func (s *Server) Client() client.Client { return s.client }

// RegisterNamespace registers another namespace, for tests of several
// Temporal namespaces on one server. It returns once the namespace serves
// requests; its search attributes are not registered.
func (s *Server) RegisterNamespace(ctx context.Context, name string) error {
	_, err := s.client.WorkflowService().RegisterNamespace(ctx, &workflowservice.RegisterNamespaceRequest{
		Namespace: name, WorkflowExecutionRetentionPeriod: durationpb.New(24 * time.Hour),
	})
	var exists *serviceerror.NamespaceAlreadyExists
	if err != nil && !errors.As(err, &exists) {
		return fmt.Errorf("registering namespace %s: %w", name, err)
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	return retry(ctx, s.done, func() error {
		_, err := s.client.WorkflowService().DescribeNamespace(ctx, &workflowservice.DescribeNamespaceRequest{Namespace: name})
		return err
	})
}

// Stop stops the server and removes its files.
func (s *Server) Stop() error {
	if s.client != nil {
		s.client.Close()
	}
	_ = syscall.Kill(-s.cmd.Process.Pid, syscall.SIGTERM)
	select {
	case <-s.done:
	case <-time.After(10 * time.Second):
		_ = syscall.Kill(-s.cmd.Process.Pid, syscall.SIGKILL)
		<-s.done
	}
	return os.RemoveAll(s.dir)
}

// Start starts the server binary at path. Extra arguments are dynamic
// configuration, each as DynamicConfigFlag and "key=value"; they override
// the defaults. Stop the server with its Stop.
func Start(ctx context.Context, path string, extra ...string) (*Server, error) {
	return startOn(ctx, path, freePorts, extra)
}

// startOn is Start with the ports chosen by choose, called once per try.
func startOn(ctx context.Context, path string, choose func(n int) ([]int, error), extra []string) (*Server, error) {
	settings, err := dynamicConfig(extra)
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "temporal-server-")
	if err != nil {
		return nil, err
	}
	// The ports are free when chosen but not held until the server binds
	// them, so another process can take one first: then the server exits
	// at once, and a new set of ports is tried.
	var s *Server
	for attempt := 1; ; attempt++ {
		var ports []int
		if ports, err = choose(serverPorts); err != nil {
			break
		}
		s, err = start(ctx, path, dir, settings, ports)
		if !errors.Is(err, errPortTaken) || attempt == portAttempts {
			break
		}
	}
	if err != nil {
		_ = os.RemoveAll(dir)
		return nil, fmt.Errorf("starting the Temporal server %s: %w", path, err)
	}
	return s, nil
}

func start(ctx context.Context, path, dir string, settings map[string]string, ports []int) (*Server, error) {
	dynamicPath := filepath.Join(dir, "dynamic.yaml")
	if err := os.WriteFile(dynamicPath, dynamicYAML(settings), 0o600); err != nil {
		return nil, err
	}
	var config bytes.Buffer
	err := template.Must(template.New("server").Parse(configTemplate)).Execute(&config, map[string]any{
		"Ports": ports, "DynamicConfig": dynamicPath,
	})
	if err != nil {
		return nil, err
	}
	configPath := filepath.Join(dir, "server.yaml")
	if err := os.WriteFile(configPath, config.Bytes(), 0o600); err != nil {
		return nil, err
	}
	logFile, err := os.Create(filepath.Join(dir, "server.log"))
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(path, "--config-file", configPath, "--allow-no-auth", "start")
	cmd.Stdout, cmd.Stderr = logFile, logFile
	// Its own process group, so Stop reaches it and a test's ^C does not
	// stop it before the test's cleanup does.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		_ = logFile.Close()
		return nil, err
	}
	s := &Server{cmd: cmd, dir: dir, frontend: net.JoinHostPort("127.0.0.1", strconv.Itoa(ports[0])), done: make(chan struct{})}
	go func() { _ = cmd.Wait(); _ = logFile.Close(); close(s.done) }()
	if err := s.setUp(ctx); err != nil {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		<-s.done
		log, _ := os.ReadFile(logFile.Name())
		if bytes.Contains(log, []byte("address already in use")) {
			err = fmt.Errorf("%w: %w", errPortTaken, err)
		}
		return nil, fmt.Errorf("%w; the server's log ends:\n%s", err, tail(log, 20))
	}
	return s, nil
}

// setUp waits for the frontend, then registers the namespace and the
// search attribute, and dials the namespace.
func (s *Server) setUp(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	quiet := temporallog.NewStructuredLogger(slog.New(slog.NewTextHandler(io.Discard, nil)))
	options := client.Options{HostPort: s.frontend, Namespace: Namespace, Logger: quiet}
	var namespaces client.NamespaceClient
	err := retry(ctx, s.done, func() error {
		var err error
		namespaces, err = client.NewNamespaceClient(options)
		if err != nil {
			return err
		}
		err = namespaces.Register(ctx, &workflowservice.RegisterNamespaceRequest{
			Namespace: Namespace, WorkflowExecutionRetentionPeriod: durationpb.New(24 * time.Hour),
		})
		var exists *serviceerror.NamespaceAlreadyExists
		if errors.As(err, &exists) {
			err = nil
		}
		if err != nil {
			namespaces.Close()
		}
		return err
	})
	if err != nil {
		return fmt.Errorf("registering namespace %s: %w", Namespace, err)
	}
	defer namespaces.Close()
	err = retry(ctx, s.done, func() error {
		c, err := client.Dial(options)
		if err != nil {
			return err
		}
		_, err = c.OperatorService().AddSearchAttributes(ctx, &operatorservice.AddSearchAttributesRequest{
			Namespace:        Namespace,
			SearchAttributes: searchattr.Needed,
		})
		var exists *serviceerror.AlreadyExists
		if errors.As(err, &exists) {
			err = nil
		}
		if err == nil {
			// Every service knows the namespace once a workflow can start:
			// list one to be sure the namespace's visibility answers.
			_, err = c.ListWorkflow(ctx, &workflowservice.ListWorkflowExecutionsRequest{Namespace: Namespace})
		}
		if err != nil {
			c.Close()
			return err
		}
		s.client = c
		return nil
	})
	if err != nil {
		return fmt.Errorf("adding the sessions' search attributes: %w", err)
	}
	return nil
}

// retry calls f until it succeeds, the context ends or the server exits.
func retry(ctx context.Context, exited <-chan struct{}, f func() error) error {
	for {
		err := f()
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return err
		case <-exited:
			return errors.New("the server exited")
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// dynamicConfig reads the extra arguments over the defaults.
func dynamicConfig(extra []string) (map[string]string, error) {
	settings := map[string]string{}
	for k, v := range defaults {
		settings[k] = v
	}
	for i := 0; i < len(extra); i++ {
		if extra[i] != DynamicConfigFlag || i+1 == len(extra) {
			return nil, fmt.Errorf("server argument %q: want %s key=value", extra[i], DynamicConfigFlag)
		}
		i++
		key, value, ok := strings.Cut(extra[i], "=")
		if !ok || key == "" || !json.Valid([]byte(value)) {
			return nil, fmt.Errorf("dynamic config %q: want key=value with a JSON value", extra[i])
		}
		settings[key] = value
	}
	return settings, nil
}

// dynamicYAML writes settings as the server's dynamic config file. A JSON
// scalar is a YAML scalar, so values go in as they are.
func dynamicYAML(settings map[string]string) []byte {
	keys := make([]string, 0, len(settings))
	for k := range settings {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	var b bytes.Buffer
	for _, k := range keys {
		fmt.Fprintf(&b, "%s:\n  - value: %s\n", k, settings[k])
	}
	return b.Bytes()
}

// freePorts asks the kernel for n free loopback ports at once, so no two
// are the same.
func freePorts(n int) ([]int, error) {
	ports := make([]int, 0, n)
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		defer func() { _ = l.Close() }()
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

func tail(log []byte, lines int) string {
	all := strings.Split(strings.TrimRight(string(log), "\n"), "\n")
	return strings.Join(all[max(0, len(all)-lines):], "\n")
}
