// Command gateway runs stepwise-gateway: the HTTP API of sessions, found by
// Agent and authorized by Kubernetes RBAC, with their events as Server-Sent
// Events; and, with --hub-listen, the event hub the workers publish to.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/client/config"

	apischeme "github.com/stepwise-run/stepwise/api/scheme"
	"github.com/stepwise-run/stepwise/internal/engineadmin"
	"github.com/stepwise-run/stepwise/internal/engineflags"
	"github.com/stepwise-run/stepwise/internal/gateway"
	"github.com/stepwise-run/stepwise/internal/hub"
	"github.com/stepwise-run/stepwise/internal/hubapi"
	"github.com/stepwise-run/stepwise/internal/render"
	"github.com/stepwise-run/stepwise/internal/serving"
	"github.com/stepwise-run/stepwise/internal/version"
	"github.com/stepwise-run/stepwise/pkg/workerconfig"
)

func main() {
	logger := slog.New(slog.NewJSONHandler(os.Stderr, nil))
	if err := run(logger); err != nil {
		logger.Error("the gateway stopped", "error", err)
		os.Exit(1)
	}
}

func run(logger *slog.Logger) error {
	var listen, hubListen, hubURL, publishKeysFile, readTokensFile string
	flag.StringVar(&listen, "listen", ":8080", "Address of the session API and the event streams; empty runs the event hub alone.")
	flag.StringVar(&hubListen, "hub-listen", "",
		"Address where workers publish session events to this process's event hub; empty runs no hub here.")
	flag.StringVar(&hubURL, "hub-url", "",
		"http://host:port of the event hub the gateway reads; empty reads this process's hub (--hub-listen). Without either, the gateway serves no events.")
	flag.StringVar(&publishKeysFile, "hub-publish-keys-file", "",
		"File of the event hub's publish keys, one per line as ID:KEY (32 bytes or more), with which the hub checks the workers' publish tokens; required with --hub-listen. It is read again while the hub runs.")
	flag.StringVar(&readTokensFile, "hub-read-tokens-file", "",
		"File of the event hub's read tokens, one per line (32 bytes or more): the hub lets each read, and the gateway reads with the first. Required with --hub-listen or --hub-url; read again while running.")
	audiences := flag.String("token-audiences", gateway.DefaultAudience,
		"Comma-separated audiences a Kubernetes bearer token must be for; empty takes the API server's, so a token the gateway "+
			"is shown could be replayed against the API server.")
	grants := flag.String("gateway-grants-configmap", "",
		"The ConfigMap of --operator-namespace the operator publishes the application tokens' grants in; empty takes Kubernetes tokens alone.")
	engineFlags := engineflags.Bind(flag.CommandLine)
	flag.Parse()

	var (
		readTokens  *hub.FileSource[*hub.ReadTokens]
		publishKeys *hub.FileSource[*hub.PublishKeys]
		err         error
	)
	if hubListen != "" || hubURL != "" {
		if readTokens, err = loadCredential(logger, "--hub-read-tokens-file", readTokensFile, hub.ParseReadTokens); err != nil {
			return err
		}
	}
	if hubListen != "" {
		if publishKeys, err = loadCredential(logger, "--hub-publish-keys-file", publishKeysFile, hub.ParsePublishKeys); err != nil {
			return err
		}
	}
	if hubURL != "" {
		if err := workerconfig.CheckHubURL(hubURL); err != nil {
			return fmt.Errorf("--hub-url: %w", err)
		}
	}

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	servers := map[string]served{}
	if hubListen != "" {
		h := hub.New(hub.NewEpoch(), hub.DefaultLimits, time.Now)
		servers[hubListen] = served{hubapi.NewServer(h, hubapi.ServerOptions{PublishKeys: publishKeys.Get, ReadTokens: readTokens.Get}).Handler(),
			serving.HubLimits}
		if hubURL == "" {
			hubURL, err = localURL(hubListen)
			if err != nil {
				return err
			}
		}
	}

	if listen != "" {
		api, closeAPI, err := sessionAPI(ctx, logger, engineFlags, *audiences, *grants, hubURL, readTokens)
		if err != nil {
			return err
		}
		defer closeAPI()
		servers[listen] = served{api, serving.DefaultLimits}
	}
	if len(servers) == 0 {
		return errors.New("nothing to serve: --listen and --hub-listen are both empty")
	}

	logger.Info("starting the gateway", "version", version.Operator, "listen", listen, "hubListen", hubListen, "hubURL", hubURL,
		"defaultEngine", engineFlags.DefaultEngine, "allowNamespaceEngines", engineFlags.AllowNamespaceEngines)
	return serve(ctx, logger, servers)
}

// sessionAPI builds the session routes over the cluster's Agents.
func sessionAPI(ctx context.Context, logger *slog.Logger, engineFlags *engineflags.Flags, audiences, grants, hubURL string,
	readTokens *hub.FileSource[*hub.ReadTokens]) (http.Handler, func(), error) {
	var defaults render.Defaults
	if err := engineFlags.Apply(&defaults); err != nil {
		return nil, nil, err
	}
	scheme, err := apischeme.New()
	if err != nil {
		return nil, nil, fmt.Errorf("building the scheme: %w", err)
	}
	cfg, err := config.GetConfig()
	if err != nil {
		return nil, nil, fmt.Errorf("loading the kubeconfig: %w", err)
	}
	source := gateway.GrantsSource{Namespace: engineFlags.OperatorNamespace, Name: grants}
	kube, informers, err := gateway.NewKubernetesClient(ctx, cfg, scheme, source)
	if err != nil {
		return nil, nil, err
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, nil, err
	}
	kubeAuth, err := gateway.NewKubernetesAuthorizer(cs, splitList(audiences), gateway.DefaultAuthorizerCache)
	if err != nil {
		return nil, nil, err
	}
	// An application token the operator published is checked first; any
	// other bearer token goes to the API server.
	auth := &gateway.TokenAuthorizer{Next: kubeAuth}
	if grants != "" {
		if err := gateway.WatchPublishedGrants(ctx, informers, auth, source, logger); err != nil {
			return nil, nil, err
		}
	}
	engines := engineadmin.New(logr.FromSlogHandler(logger.Handler()))
	opts := gateway.Options{
		Agents: &gateway.KubernetesAgents{Reader: kube, Defaults: defaults, OperatorNamespace: engineFlags.OperatorNamespace,
			Engines: engines},
		Authorizer: auth,
		Logger:     logger,
	}
	if hubURL != "" {
		opts.Hub = hubapi.NewReader(hubURL, func() string { return readTokens.Get().Current() }, nil)
	}
	return gateway.New(opts).Handler(), engines.Close, nil
}

// served is one server's routes and limits.
type served struct {
	handler http.Handler
	limits  serving.Limits
}

// serve runs one HTTP server per address, each within serving's limits,
// until ctx ends, then lets each finish its requests for a few seconds;
// event streams end then, and browsers resume them on another replica.
func serve(ctx context.Context, logger *slog.Logger, servers map[string]served) error {
	errs := make(chan error, len(servers))
	var running []*serving.Server
	for addr, s := range servers {
		srv, err := serving.Listen(ctx, addr, s.handler, s.limits)
		if err != nil {
			return fmt.Errorf("serving %s: %w", addr, err)
		}
		running = append(running, srv)
		go func() {
			if err := srv.Serve(); err != nil && !errors.Is(err, http.ErrServerClosed) {
				errs <- fmt.Errorf("serving %s: %w", addr, err)
			}
		}()
	}
	var err error
	select {
	case <-ctx.Done():
	case err = <-errs:
	}
	shutdown, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for _, srv := range running {
		if serr := srv.Shutdown(shutdown); serr != nil {
			logger.Warn("stopping a server", "addr", srv.Addr().String(), "error", serr)
		}
	}
	return err
}

// loadCredential reads a credential file the flag names, and rereads it
// while the process runs.
func loadCredential[T any](logger *slog.Logger, flagName, path string, parse func([]byte) (T, error)) (*hub.FileSource[T], error) {
	if path == "" {
		return nil, fmt.Errorf("%s is required with --hub-listen or --hub-url", flagName)
	}
	src, err := hub.LoadFile(path, parse)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", flagName, err)
	}
	src.OnError = func(err error) {
		logger.Error("rereading a credential file; keeping the last good one", "flag", flagName, "error", err)
	}
	return src, nil
}

// localURL is the URL of this process's hub at a listen address.
func localURL(listen string) (string, error) {
	host, port, err := net.SplitHostPort(listen)
	if err != nil {
		return "", fmt.Errorf("--hub-listen %q: %w", listen, err)
	}
	if host == "" || host == "0.0.0.0" || host == "::" {
		host = "127.0.0.1"
	}
	return "http://" + net.JoinHostPort(host, port), nil
}

func splitList(s string) []string {
	var out []string
	for _, v := range strings.Split(s, ",") {
		if v = strings.TrimSpace(v); v != "" {
			out = append(out, v)
		}
	}
	return out
}
