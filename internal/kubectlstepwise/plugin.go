// Package kubectlstepwise is the kubectl stepwise plugin: session commands
// addressed by Agent, sent to the gateway with the caller's Kubernetes
// credentials, which the gateway reviews as it reviews any caller's.
package kubectlstepwise

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"

	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"k8s.io/client-go/transport"
)

const usage = `Usage: kubectl stepwise <command> [arguments] [flags]

Session commands name an Agent of the namespace (-n, or the kubeconfig's):
  start <agent> <session> [message]           Start a session; a message starts its first turn.
  send <agent> <session> <message>            Send a user message.
  plan <agent> <session> <message>            Send a message that starts a planning turn.
  steer <agent> <session> <message>           Steer the running turn (queued when none runs).
  steer-queued <agent> <session> <message-id> Steer the running turn with a queued message.
  delete-queued <agent> <session> <message-id>
                                              Delete a queued message.
  approve <agent> <session> <interrupt>       Approve a pending tool call.
  reject <agent> <session> <interrupt> [why]  Reject a tool call (the model sees why).
  answer <agent> <session> <interrupt> <text> Answer a pending question.
  cancel <agent> <session> <turn>             Cancel the running turn now.
  execute-plan <agent> <session> <revision>   Approve a plan revision and execute it.
  settings <agent> <session> <json>           Replace the session settings with a JSON object.
  get <agent> <session>                       Show the session: state, pending interrupts, tool calls.
  messages <agent> <session> [before] [limit] Show a page of stored messages, newest last.
  waiting                                     List sessions waiting for a person (-A: every namespace).

The gateway is --gateway (STEPWISE_GATEWAY), such as the URL of
"kubectl port-forward -n stepwise-system svc/stepwise-gateway 8080:80". The
token is --token (STEPWISE_TOKEN), or the kubeconfig user's bearer token,
token file or exec credential; a client certificate is not one the gateway
can review. A gateway takes tokens for its own audience by default:
--token "$(kubectl create token NAME --audience stepwise-gateway)".

Exit statuses:
  0  the session accepted the request (prints true), or the command succeeded
  1  an error: bad input, no connection, refused by the gateway
  2  a bad command line
  3  the session refused the request (prints false)
  4  the request was sent but no worker ran it in time (prints pending); run
     the command again with --request-id <id> (the ID it printed) to learn the
     outcome, which it does not repeat

Flags:
`

// Exit statuses, as the stepwise CLI's.
const (
	exitError   = 1
	exitUsage   = 2
	exitFalse   = 3
	exitPending = 4
)

// Env reads an environment variable.
type Env func(string) string

// options are the flags.
type options struct {
	kubeconfig, context, namespace string
	gateway, token                 string
	output                         string
	requestID                      string
	allNamespaces                  bool
	steps                          stringList
	timeout                        time.Duration
	plainHTTP                      bool
}

type stringList []string

func (s *stringList) String() string     { return strings.Join(*s, ",") }
func (s *stringList) Set(v string) error { *s = append(*s, v); return nil }

// Run runs the command line and returns the exit status.
func Run(ctx context.Context, args []string, env Env, stdout, stderr io.Writer) int {
	var o options
	flags := flag.NewFlagSet("kubectl stepwise", flag.ContinueOnError)
	flags.SetOutput(stderr)
	flags.StringVar(&o.kubeconfig, "kubeconfig", "", "The kubeconfig file; default $KUBECONFIG or ~/.kube/config.")
	flags.StringVar(&o.context, "context", "", "The kubeconfig context.")
	for _, name := range []string{"namespace", "n"} {
		flags.StringVar(&o.namespace, name, "", "The Agent's namespace; default the context's.")
	}
	flags.StringVar(&o.gateway, "gateway", env("STEPWISE_GATEWAY"), "The gateway's URL (STEPWISE_GATEWAY).")
	flags.StringVar(&o.token, "token", env("STEPWISE_TOKEN"), "A bearer token (STEPWISE_TOKEN); default the kubeconfig user's.")
	for _, name := range []string{"output", "o"} {
		flags.StringVar(&o.output, name, "table", "Output: table, json or yaml.")
	}
	flags.StringVar(&o.requestID, "request-id", "", "Names the request, so running the command again is the same request and\nlearns its outcome; default a new random ID, printed when the request is pending.")
	for _, name := range []string{"all-namespaces", "A"} {
		flags.BoolVar(&o.allNamespaces, name, false, "waiting: search every namespace.")
	}
	flags.Var(&o.steps, "step", "waiting: a Step to search; repeat for more (default AwaitToolApproval and AwaitQuestionAnswer).")
	flags.BoolVar(&o.plainHTTP, "plain-http", false, "Allow an http gateway URL other than localhost's, which carries the token in clear.")
	flags.DurationVar(&o.timeout, "timeout", 60*time.Second, "How long a command may take.")
	flags.Usage = func() {
		fmt.Fprint(stderr, usage)
		flags.PrintDefaults()
	}
	positional, err := parseInterleaved(flags, args)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		return exitUsage
	}
	if len(positional) == 0 {
		flags.Usage()
		return exitUsage
	}
	if o.output != "table" && o.output != "json" && o.output != "yaml" {
		fmt.Fprintf(stderr, "kubectl stepwise: --output %q: one of table, json, yaml\n", o.output)
		return exitUsage
	}
	ctx, cancel := context.WithTimeout(ctx, o.timeout)
	defer cancel()
	p, err := newPlugin(o, env)
	if err != nil {
		fmt.Fprintln(stderr, "kubectl stepwise:", err)
		return exitError
	}
	status, err := p.run(ctx, positional, stdout)
	if err != nil {
		fmt.Fprintln(stderr, "kubectl stepwise:", err)
		if status == 0 {
			status = exitError
		}
	}
	return status
}

// parseInterleaved takes flags before, between and after the arguments,
// as kubectl does; every word after -- is an argument.
func parseInterleaved(flags *flag.FlagSet, args []string) ([]string, error) {
	var positional, literal []string
	if i := slices.Index(args, "--"); i >= 0 {
		args, literal = args[:i], args[i+1:]
	}
	for {
		if err := flags.Parse(args); err != nil {
			return nil, err
		}
		rest := flags.Args()
		if len(rest) == 0 {
			return append(positional, literal...), nil
		}
		positional = append(positional, rest[0])
		args = rest[1:]
	}
}

// loopback is a host name that stays on this machine.
func loopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// sameOrigin follows a redirect only to the gateway's own scheme, host and
// port. The transport adds the credential to every request, redirects
// included, out of reach of the standard library's rule that drops
// Authorization on a redirect to another host: any other origin (another
// host, another port, https to http) would get the person's cluster
// credential.
func sameOrigin(req *http.Request, via []*http.Request) error {
	from := via[0].URL
	if req.URL.Scheme != from.Scheme || req.URL.Host != from.Host {
		return fmt.Errorf("the gateway redirected to %s://%s, another origin than %s://%s: not following it with your credential",
			req.URL.Scheme, req.URL.Host, from.Scheme, from.Host)
	}
	if len(via) >= 10 {
		return errors.New("the gateway redirected 10 times")
	}
	return nil
}

// plugin sends commands to one gateway as one caller.
type plugin struct {
	o         options
	namespace string
	base      *url.URL
	http      *http.Client
}

func newPlugin(o options, env Env) (*plugin, error) {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	if o.kubeconfig != "" {
		rules.ExplicitPath = o.kubeconfig
	}
	if v := env("KUBECONFIG"); v != "" && o.kubeconfig == "" {
		rules.Precedence = strings.Split(v, ":")
	}
	kubeconfig := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{
		CurrentContext: o.context, Context: clientcmdapi.Context{Namespace: o.namespace}})
	namespace, _, err := kubeconfig.Namespace()
	if err != nil {
		return nil, fmt.Errorf("reading the kubeconfig: %w", err)
	}
	if o.gateway == "" {
		return nil, errors.New("no gateway: pass --gateway or set STEPWISE_GATEWAY to its URL, for example that of " +
			"kubectl port-forward -n stepwise-system svc/stepwise-gateway 8080:80")
	}
	base, err := url.Parse(o.gateway)
	if err != nil || (base.Scheme != "http" && base.Scheme != "https") || base.Host == "" {
		return nil, fmt.Errorf("--gateway %q is not an http or https URL", o.gateway)
	}
	if base.Scheme == "http" && !loopback(base.Hostname()) && !o.plainHTTP {
		// The token is the person's cluster credential: it must not cross
		// a network in clear by accident.
		return nil, fmt.Errorf("--gateway %q would carry your token in clear: use https, a port-forward to localhost, or --plain-http", o.gateway)
	}
	p := &plugin{o: o, namespace: namespace, base: base, http: &http.Client{CheckRedirect: sameOrigin}}
	if o.token != "" {
		p.http.Transport = transport.NewBearerAuthRoundTripper(o.token, http.DefaultTransport)
		return p, nil
	}
	cfg, err := kubeconfig.ClientConfig()
	if err != nil {
		return nil, fmt.Errorf("reading the kubeconfig: %w; or pass --token", err)
	}
	if cfg.BearerToken == "" && cfg.BearerTokenFile == "" && cfg.ExecProvider == nil && cfg.AuthProvider == nil {
		return nil, errors.New("the kubeconfig's user has no bearer token (a client certificate is not one the gateway can review): " +
			"pass --token, such as one from kubectl create token NAME --audience stepwise-gateway")
	}
	tc, err := cfg.TransportConfig()
	if err != nil {
		return nil, fmt.Errorf("reading the kubeconfig's credentials: %w", err)
	}
	// Only the credentials go to the gateway, never the cluster's TLS
	// settings: the gateway has a certificate of its own.
	rt, err := transport.HTTPWrappersForConfig(tc, http.DefaultTransport)
	if err != nil {
		return nil, fmt.Errorf("reading the kubeconfig's credentials: %w", err)
	}
	p.http.Transport = rt
	return p, nil
}
