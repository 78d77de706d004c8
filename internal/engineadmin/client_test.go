package engineadmin

import (
	"context"
	"net"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	deploymentpb "go.temporal.io/api/deployment/v1"
	enumspb "go.temporal.io/api/enums/v1"
	taskqueuepb "go.temporal.io/api/taskqueue/v1"
	"go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/stepwise-run/stepwise/internal/devserver"
	"github.com/stepwise-run/stepwise/internal/enginetest"
)

// shortLongPoll makes an idle poll end after ten seconds instead of a
// minute, so a live poller's LastAccess advances every ten seconds.
const shortLongPoll = `matching.longPollExpirationInterval="10s"`

// waitLong is how long a test waits for the engine under load.
const waitLong = time.Minute

func startServer(t *testing.T) (*devserver.Server, Connection) {
	t.Helper()
	server := enginetest.StartDevServer(t, "--dynamic-config-value", shortLongPoll)
	return server, Connection{Address: server.FrontendHostPort(), Namespace: devserver.Namespace}
}

func newTestClient(t *testing.T, opts ...Option) *Client {
	t.Helper()
	r := New(logr.Discard(), opts...)
	t.Cleanup(r.Close)
	return r
}

func idleWorkflow(workflow.Context) error { return nil }
func idleActivity(context.Context) error  { return nil }

// startWorker starts a worker on the task queue with an identity shaped as
// the stepwise workers' are, "<pid>@<pod>@".
func startWorker(t *testing.T, server *devserver.Server, taskQueue, identity string) worker.Worker {
	t.Helper()
	w := worker.New(server.Client(), taskQueue, worker.Options{Identity: identity})
	w.RegisterWorkflow(idleWorkflow)
	w.RegisterActivity(idleActivity)
	if err := w.Start(); err != nil {
		t.Fatal(err)
	}
	return w
}

// lastAccess is each task queue type's LastAccess of the identity; a type
// is missing when the engine does not list the identity for it.
func lastAccess(pollers []Poller, identity string) map[string]time.Time {
	out := map[string]time.Time{}
	for _, p := range pollers {
		if p.Identity == identity {
			out[p.TaskQueueType] = p.LastAccess
		}
	}
	return out
}

func TestPollersOfARunningAndAStoppedWorker(t *testing.T) {
	server, conn := startServer(t)
	engines := newTestClient(t)
	ctx := context.Background()
	const identity = "4242@support-7d9f8-abcde@"
	w := startWorker(t, server, "support", identity)

	var first map[string]time.Time
	enginetest.Eventually(t, waitLong, "the worker to be listed for both task queue types", func() (bool, error) {
		pollers, err := engines.Pollers(ctx, conn, "support")
		first = lastAccess(pollers, identity)
		return len(first) == 2, err
	})
	pollers, err := engines.Pollers(ctx, conn, "support")
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range pollers {
		if p.Identity == identity && (p.LastAccess.IsZero() || p.Versioned || p.BuildID != "" || p.DeploymentName != "") {
			t.Errorf("poller %+v: want a last access time and no worker deployment version for an unversioned worker", p)
		}
	}
	// A polling worker's LastAccess advances at least once per long poll.
	enginetest.Eventually(t, waitLong, "a running worker's last access to advance for both types", func() (bool, error) {
		pollers, err := engines.Pollers(ctx, conn, "support")
		now := lastAccess(pollers, identity)
		return now[WorkflowTaskQueue].After(first[WorkflowTaskQueue]) && now[ActivityTaskQueue].After(first[ActivityTaskQueue]), err
	})

	w.Stop()
	// A stopped worker stays listed, with a LastAccess that no longer
	// changes: two reads more than a long poll apart agree.
	var settled map[string]time.Time
	enginetest.Eventually(t, 2*waitLong, "a stopped worker's last access to stop advancing", func() (bool, error) {
		before, err := engines.Pollers(ctx, conn, "support")
		if err != nil {
			return false, err
		}
		time.Sleep(12 * time.Second)
		after, err := engines.Pollers(ctx, conn, "support")
		if err != nil {
			return false, err
		}
		a, b := lastAccess(before, identity), lastAccess(after, identity)
		settled = b
		return len(a) == 2 && len(b) == 2 && a[WorkflowTaskQueue].Equal(b[WorkflowTaskQueue]) && a[ActivityTaskQueue].Equal(b[ActivityTaskQueue]), nil
	})
	if !settled[WorkflowTaskQueue].After(first[WorkflowTaskQueue]) {
		t.Errorf("the stopped worker's last access %v is not after its first %v: stopping should end its polls", settled, first)
	}
}

func TestPollersOfAnUnknownTaskQueueAreNone(t *testing.T) {
	_, conn := startServer(t)
	pollers, err := newTestClient(t).Pollers(context.Background(), conn, "nobody-polls-this")
	if err != nil || len(pollers) != 0 {
		t.Fatalf("Pollers() = %v, %v; want none and no error", pollers, err)
	}
}

// refusingAddress is a loopback address nothing listens on.
func refusingAddress(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	address := l.Addr().String()
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	return address
}

// silentAddress accepts connections and never answers, as a frontend
// behind a broken proxy might.
func silentAddress(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var conns []net.Conn
	var mu sync.Mutex
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		_ = l.Close()
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			_ = c.Close()
		}
	})
	return l.Addr().String()
}

func TestPollersOfAnUnreachableEngineFailWithinTheTimeout(t *testing.T) {
	engines := newTestClient(t, WithCallTimeout(3*time.Second))
	for name, address := range map[string]string{"refused": refusingAddress(t), "silent": silentAddress(t)} {
		t.Run(name, func(t *testing.T) {
			done := make(chan error, 1)
			go func() {
				_, err := engines.Pollers(context.Background(), Connection{Address: address, Namespace: "default"}, "support")
				done <- err
			}()
			select {
			case err := <-done:
				t.Log(err)
				if err == nil || !strings.Contains(err.Error(), address) {
					t.Fatalf("Pollers() error = %v, want one naming %s", err, address)
				}
			case <-time.After(waitLong):
				t.Fatalf("Pollers() of an unreachable engine did not return within %s though its call timeout is 3s", waitLong)
			}
		})
	}
	engines.mu.Lock()
	defer engines.mu.Unlock()
	if len(engines.clients) != 0 {
		t.Errorf("a failed dial stays cached: %d clients", len(engines.clients))
	}
}

func TestPollersErrorsNeverShowSecrets(t *testing.T) {
	_, plain := startServer(t)
	engines := newTestClient(t, WithCallTimeout(10*time.Second))
	for name, conn := range map[string]Connection{
		// An API key turns on TLS, which the plaintext dev server refuses.
		"API key":            {APIKey: testAPIKey},
		"CA":                 {TLS: &TLS{CAPEM: []byte(testPEM.cert)}},
		"client certificate": {TLS: &TLS{ClientCertPEM: []byte(testPEM.cert), ClientKeyPEM: []byte(testPEM.key)}, APIKey: testAPIKey},
		"no PEM in ca.crt":   {TLS: &TLS{CAPEM: []byte("garbage " + testAPIKey)}},
		"a key of no cert":   {TLS: &TLS{ClientCertPEM: []byte(testPEM.key), ClientKeyPEM: []byte(testPEM.key)}},
	} {
		t.Run(name, func(t *testing.T) {
			conn.Address, conn.Namespace = plain.Address, plain.Namespace
			_, err := engines.Pollers(context.Background(), conn, "support")
			if err == nil || !strings.Contains(err.Error(), plain.Address) {
				t.Fatalf("Pollers() error = %v, want one naming %s", err, plain.Address)
			}
			t.Log(err)
			assertNoSecret(t, err.Error(), secret("engine", map[string]string{
				"apiKey": testAPIKey, "cert": testPEM.cert, "key": testPEM.key}))
		})
	}
}

func TestClientSharesAndClosesClients(t *testing.T) {
	server, conn := startServer(t)
	engines := newTestClient(t, WithIdleTimeout(time.Second))
	startWorker(t, server, "support", "1@support-a@").Stop()
	ctx := context.Background()

	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for range 8 {
		wg.Go(func() {
			_, err := engines.Pollers(ctx, conn, "support")
			errs <- err
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	engines.mu.Lock()
	cached := len(engines.clients)
	engines.mu.Unlock()
	if cached != 1 {
		t.Fatalf("concurrent calls for one connection left %d clients, want 1", cached)
	}

	enginetest.Eventually(t, waitLong, "the unused client to be closed", func() (bool, error) {
		engines.mu.Lock()
		defer engines.mu.Unlock()
		return len(engines.clients) == 0, nil
	})
	if _, err := engines.Pollers(ctx, conn, "support"); err != nil {
		t.Fatalf("Pollers() after the idle client was closed: %v", err)
	}

	engines.Close()
	if _, err := engines.Pollers(ctx, conn, "support"); err == nil || !strings.Contains(err.Error(), "closed") {
		t.Fatalf("Pollers() after Close: error = %v, want the engines closed", err)
	}
}

func TestPollersOfConvertsTheEnginesList(t *testing.T) {
	at := time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC)
	got := pollersOf(ActivityTaskQueue, []*taskqueuepb.PollerInfo{
		{Identity: "2@support-b@", LastAccessTime: timestamppb.New(at), DeploymentOptions: &deploymentpb.WorkerDeploymentOptions{
			DeploymentName: "team/support", BuildId: "0.2.0", WorkerVersioningMode: enumspb.WORKER_VERSIONING_MODE_VERSIONED}},
		{Identity: "1@support-a@"},
	})
	want := []Poller{
		{TaskQueueType: ActivityTaskQueue, Identity: "1@support-a@"},
		{TaskQueueType: ActivityTaskQueue, Identity: "2@support-b@", LastAccess: at, DeploymentName: "team/support", BuildID: "0.2.0", Versioned: true},
	}
	if !slices.Equal(got, want) {
		t.Errorf("pollersOf() = %+v, want %+v", got, want)
	}
}
