// Package workerconfig is the configuration document a worker reads: one
// versioned JSON file that the operator renders from an Agent and the
// ToolSources, MediaStore and engine it references. The stock worker and
// workers that teams build on the public Go API both read it.
//
// The document never holds a secret. A value from a Secret is named by the
// environment variable that carries it (SecretEnv); the worker reads the
// variable when it needs the value.
package workerconfig

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// APIVersion and Kind identify the document format. A worker refuses a
// document of another version rather than guess at its meaning.
const (
	APIVersion = "worker.stepwise.run/v1alpha1"
	Kind       = "WorkerConfig"
)

// FileName is the name of the document in the worker's config directory.
const FileName = "config.json"

// Config is the whole worker configuration.
type Config struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`

	// Agent names the Agent the document was rendered from.
	Agent AgentRef `json:"agent"`
	// FlowType is the session Flow type the worker registers.
	FlowType string `json:"flowType"`
	// EngineVersion is the session engine version the operator expects the
	// worker image to carry.
	EngineVersion string `json:"engineVersion"`
	// Engine is the Temporal connection.
	Engine Engine `json:"engine"`
	// TaskSlots is how many Steps one worker runs at once.
	TaskSlots int32 `json:"taskSlots"`
	// HealthAddress is where the worker serves /healthz and /readyz, and
	// nothing else: probes reach it over the pod network.
	HealthAddress string `json:"healthAddress"`
	// DebugAddress is where the worker serves /debug/events?session=<id>,
	// one session's recent events, which hold the session's text. It must
	// be a loopback address (127.0.0.1:8081, [::1]:8081, localhost:8081),
	// so only the pod itself, or someone Kubernetes lets port-forward to
	// it, can read them. Empty serves no events.
	DebugAddress string `json:"debugAddress,omitempty"`
	// MetricsAddress is where the worker serves /metrics in the Prometheus
	// text format: the Temporal SDK's metrics and the session counters,
	// which hold no session content. It listens apart from the health
	// probes, so a NetworkPolicy can open one to the kubelet and the other
	// to Prometheus. Empty serves no metrics.
	MetricsAddress string `json:"metricsAddress,omitempty"`

	// Definition is the agent definition the session Flow runs.
	Definition Definition `json:"definition"`
	// ToolSources are the resolved tool sources, in the order the model is
	// offered their tools.
	ToolSources []ToolSource `json:"toolSources,omitempty"`
	// MediaStore is where image bytes live; nil refuses images.
	MediaStore *MediaStore `json:"mediaStore,omitempty"`
	// EventHub is where the worker publishes session events for gateways
	// to stream; nil keeps them in the worker.
	EventHub *EventHub `json:"eventHub,omitempty"`
	// SpendLimit, when set, bounds what the Agent's model calls spend.
	SpendLimit *SpendLimit `json:"spendLimit,omitempty"`
	// Tracing, when set, sends the sessions' spans to an OTLP receiver;
	// nil traces nothing.
	Tracing *Tracing `json:"tracing,omitempty"`
}

// Tracing sends the sessions' OpenTelemetry spans to an OTLP receiver: a
// trace per activation, with a span per model call and tool Step attempt.
type Tracing struct {
	// Endpoint is the receiver's URL: http://host:port, or https:// for
	// TLS; with protocol http/protobuf it may carry the path, /v1/traces
	// by default.
	Endpoint string `json:"endpoint"`
	// Protocol is "grpc" (empty) or "http/protobuf".
	Protocol string `json:"protocol,omitempty"`
	// Headers are sent with every export, such as a backend's API key.
	Headers []Value `json:"headers,omitempty"`
	// CAFile holds the PEM certificates of the authorities that sign an
	// https endpoint's certificate; empty trusts the system's.
	CAFile string `json:"caFile,omitempty"`
	// SamplePercent is the share of activations traced; nil traces all.
	SamplePercent *int32 `json:"samplePercent,omitempty"`
	// AgentName is gen_ai.agent.name; empty uses the Flow type.
	AgentName string `json:"agentName,omitempty"`
	// CaptureMessageContent puts message text, tool arguments and results
	// on spans. Off, spans carry content by reference: session, message
	// sequence and tool call IDs.
	CaptureMessageContent bool `json:"captureMessageContent,omitempty"`
	// SemanticConventions is the GenAI conventions version the spans
	// follow: "1.42.0-dev" (empty) or "1.36.0".
	SemanticConventions string `json:"semanticConventions,omitempty"`
}

// OTLP protocols a Tracing endpoint speaks.
const (
	OTLPProtocolGRPC         = "grpc"
	OTLPProtocolHTTPProtobuf = "http/protobuf"
)

// Semantic conventions versions the spans can follow.
const (
	SemanticConventionsGenAI142Dev = "1.42.0-dev"
	SemanticConventions136         = "1.36.0"
)

// CheckOTLPEndpoint accepts an OTLP receiver's URL: http or https, a host,
// no credentials, query or fragment, and a path only for http/protobuf.
func CheckOTLPEndpoint(raw, protocol string) error {
	switch protocol {
	case "", OTLPProtocolGRPC, OTLPProtocolHTTPProtobuf:
	default:
		return fmt.Errorf("protocol %q is not %s or %s", protocol, OTLPProtocolGRPC, OTLPProtocolHTTPProtobuf)
	}
	u, err := parseHTTPURL(raw)
	switch {
	case err != nil:
		return err
	case u.User != nil:
		return fmt.Errorf("%q may not carry credentials; send them as headers from a Secret", raw)
	case u.RawQuery != "" || u.Fragment != "" || u.Opaque != "":
		return fmt.Errorf("%q may not carry a query or fragment", raw)
	case protocol != OTLPProtocolHTTPProtobuf && strings.Trim(u.Path, "/") != "":
		return fmt.Errorf("%q may carry a path only with protocol %s", raw, OTLPProtocolHTTPProtobuf)
	}
	return nil
}

// problems lists what is wrong with a tracing section, by field.
func (t *Tracing) problems() []string {
	if t == nil {
		return nil
	}
	var problems []string
	switch t.Protocol {
	case "", OTLPProtocolGRPC, OTLPProtocolHTTPProtobuf:
		if err := CheckOTLPEndpoint(t.Endpoint, t.Protocol); err != nil {
			problems = append(problems, "tracing.endpoint: "+err.Error())
		}
	default:
		problems = append(problems, fmt.Sprintf("tracing.protocol %q is not %s or %s", t.Protocol, OTLPProtocolGRPC, OTLPProtocolHTTPProtobuf))
	}
	if t.CAFile != "" && !strings.HasPrefix(t.Endpoint, "https://") {
		problems = append(problems, "tracing.caFile needs an https:// endpoint")
	}
	if p := t.SamplePercent; p != nil && (*p < 0 || *p > 100) {
		problems = append(problems, fmt.Sprintf("tracing.samplePercent must be from 0 to 100, not %d", *p))
	}
	switch t.SemanticConventions {
	case "", SemanticConventionsGenAI142Dev, SemanticConventions136:
	default:
		problems = append(problems, fmt.Sprintf("tracing.semanticConventions %q is not %s or %s",
			t.SemanticConventions, SemanticConventionsGenAI142Dev, SemanticConventions136))
	}
	for _, h := range t.Headers {
		if h.Name == "" {
			problems = append(problems, "tracing.headers: a header has no name")
		}
		if p := HeaderValueProblem(h.Value); p != "" {
			problems = append(problems, fmt.Sprintf("tracing.headers[%s]: the value %s", h.Name, p))
		}
	}
	return problems
}

// EventHub is the event hub a worker publishes to.
type EventHub struct {
	// URL is the hub's base URL, http or https, with no path, query or
	// credentials.
	URL string `json:"url"`
	// Token is the Agent's publish token: the hub lets it write this
	// Agent's sessions only.
	Token SecretEnv `json:"token"`
}

// AgentRef names the Agent resource.
type AgentRef struct {
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	// UID is the Agent's UID, which the sessions it starts record.
	UID string `json:"uid,omitempty"`
}

// SecretEnv names the environment variable that carries a Secret value, and
// the Secret key it came from, for error messages.
type SecretEnv struct {
	Env    string `json:"env"`
	Secret string `json:"secret"`
	Key    string `json:"key"`
}

// Lookup reads the value from the environment. A missing variable is an
// error that names the Secret key, never a value.
func (s SecretEnv) Lookup() (string, error) {
	v, ok := os.LookupEnv(s.Env)
	if !ok {
		return "", fmt.Errorf("environment variable %s for Secret %s key %s is not set", s.Env, s.Secret, s.Key)
	}
	return v, nil
}

// Engine is the Temporal connection.
type Engine struct {
	Address   string `json:"address"`
	Namespace string `json:"namespace"`
	// TaskQueue is the task queue of the Agent's sessions:
	// stepwise/<namespace>/<flowType> from engine 0.8.0 on, the shared
	// stepwise/<flowType> before.
	TaskQueue string `json:"taskQueue"`
	// SharedTaskQueue, when set, is the shared task queue of the Agent's
	// sessions from before engine 0.8.0, which the worker polls as well: a
	// session it runs there moves to TaskQueue between turns, under the
	// Agent's own names. It is unversioned, whatever the worker's
	// version.
	SharedTaskQueue string     `json:"sharedTaskQueue,omitempty"`
	TLS             *TLS       `json:"tls,omitempty"`
	APIKey          *SecretEnv `json:"apiKey,omitempty"`
	// StepHeartbeatTimeout fails a Step attempt whose worker stopped
	// heartbeating; zero keeps the default of two minutes. Shorter finds a
	// dead worker sooner, at the cost of more heartbeats.
	StepHeartbeatTimeout metav1.Duration `json:"stepHeartbeatTimeout,omitempty"`
}

// TLS configures TLS to the engine. Empty file names use the system's
// authorities and no client certificate.
type TLS struct {
	CAFile     string `json:"caFile,omitempty"`
	CertFile   string `json:"certFile,omitempty"`
	KeyFile    string `json:"keyFile,omitempty"`
	ServerName string `json:"serverName,omitempty"`
}

// Definition is the agent definition.
type Definition struct {
	Name              string        `json:"name"`
	Instructions      string        `json:"instructions,omitempty"`
	Model             Model         `json:"model"`
	ModelChoices      []ModelChoice `json:"modelChoices,omitempty"`
	ToolPolicies      []ToolPolicy  `json:"toolPolicies,omitempty"`
	DefaultToolEffect string        `json:"defaultToolEffect"`
	BuiltInTools      []string      `json:"builtInTools,omitempty"`
	PlanMode          *PlanMode     `json:"planMode,omitempty"`
	Compaction        *Compaction   `json:"compaction,omitempty"`
	Limits            Limits        `json:"limits"`
}

// Model selects the model client.
type Model struct {
	Provider        string     `json:"provider"`
	Name            string     `json:"name"`
	BaseURL         string     `json:"baseURL,omitempty"`
	APIKey          *SecretEnv `json:"apiKey,omitempty"`
	MaxOutputTokens *int32     `json:"maxOutputTokens,omitempty"`
	ReasoningEffort string     `json:"reasoningEffort,omitempty"`
}

// ModelChoice is a model a session chooses with its "model" setting.
type ModelChoice struct {
	Choice string `json:"choice"`
	Model  Model  `json:"model"`
}

// ToolPolicy sets the effect class and approval of one tool.
type ToolPolicy struct {
	Name             string `json:"name"`
	Effect           string `json:"effect"`
	RequiresApproval *bool  `json:"requiresApproval,omitempty"`
}

// PlanMode configures plan mode.
type PlanMode struct {
	PlanningToolChoice string `json:"planningToolChoice"`
}

// Compaction is the compaction policy.
type Compaction struct {
	ContextWindowTokens int64   `json:"contextWindowTokens"`
	TriggerRatio        float64 `json:"triggerRatio"`
	KeepRatio           float64 `json:"keepRatio"`
	// RetainedMessageLimit is how many newest messages retention keeps; 0
	// keeps every message.
	RetainedMessageLimit int32 `json:"retainedMessageLimit"`
}

// Limits bound one session.
type Limits struct {
	MaxModelCallsPerTurn int32 `json:"maxModelCallsPerTurn"`
	// InterruptDeadline is zero when interrupts never expire.
	InterruptDeadline        metav1.Duration `json:"interruptDeadline"`
	MaxDurableWait           metav1.Duration `json:"maxDurableWait"`
	EventStreamCapacityBytes int64           `json:"eventStreamCapacityBytes"`
}

// SpendLimit is an Agent's budget. Costs are in millionths of the currency
// the prices are in, so every sum is exact.
type SpendLimit struct {
	// Window is how long each budget window of the Agent lasts.
	Window metav1.Duration `json:"window"`
	// AgentTokens and AgentMicroCost bound what all the Agent's sessions
	// spend in one window; zero is no bound.
	AgentTokens    int64 `json:"agentTokens,omitempty"`
	AgentMicroCost int64 `json:"agentMicroCost,omitempty"`
	// SessionTokens bounds what one session spends over its life; zero is
	// no bound.
	SessionTokens int64 `json:"sessionTokens,omitempty"`
	// Prices are per model name.
	Prices []ModelPrice `json:"prices,omitempty"`
}

// ModelPrice is what one model charges per million tokens.
type ModelPrice struct {
	Model                      string `json:"model"`
	InputMicroPerMillion       int64  `json:"inputMicroPerMillion"`
	CachedInputMicroPerMillion int64  `json:"cachedInputMicroPerMillion,omitempty"`
	OutputMicroPerMillion      int64  `json:"outputMicroPerMillion"`
}

// ToolSource is one MCP server.
type ToolSource struct {
	// SourceName prefixes the source's tool names and names the source in
	// stored tool calls.
	SourceName           string          `json:"sourceName"`
	TrustToolAnnotations bool            `json:"trustToolAnnotations"`
	ListingTTL           metav1.Duration `json:"listingTTL"`
	ConnectionTimeout    metav1.Duration `json:"connectionTimeout"`
	RequestTimeout       metav1.Duration `json:"requestTimeout"`
	// TaskWaitTimeout bounds a stdio server's task polled inside its call.
	TaskWaitTimeout        metav1.Duration `json:"taskWaitTimeout"`
	ResourceAndPromptTools bool            `json:"resourceAndPromptTools,omitempty"`
	Stdio                  *Stdio          `json:"stdio,omitempty"`
	StreamableHTTP         *StreamableHTTP `json:"streamableHTTP,omitempty"`
}

// Value is a value given inline or carried by an environment variable.
type Value struct {
	Name    string     `json:"name"`
	Value   string     `json:"value,omitempty"`
	FromEnv *SecretEnv `json:"fromEnv,omitempty"`
}

// Resolve returns the value.
func (v Value) Resolve() (string, error) {
	if v.FromEnv != nil {
		return v.FromEnv.Lookup()
	}
	return v.Value, nil
}

// ResolveChecked returns the value, or an error when problem finds it
// unusable. The error names the Secret key the value came from, never the
// value.
func (v Value) ResolveChecked(problem func(string) string) (string, error) {
	value, err := v.Resolve()
	if err != nil {
		return "", err
	}
	if p := problem(value); p != "" {
		if v.FromEnv != nil {
			return "", fmt.Errorf("the value of Secret %s key %s %s", v.FromEnv.Secret, v.FromEnv.Key, p)
		}
		return "", fmt.Errorf("the value %s", p)
	}
	return value, nil
}

// HeaderValueProblem says why v can never be sent as an HTTP header value,
// or returns "": a field value holds no control characters other than tab.
// A Secret written from a file with a trailing newline is the usual cause.
func HeaderValueProblem(v string) string {
	for i := 0; i < len(v); i++ {
		if c := v[i]; c < 0x20 && c != '\t' || c == 0x7f {
			return "contains a control character, such as CR or LF, which an HTTP header value cannot carry"
		}
	}
	return ""
}

// EnvValueProblem says why v can never be the value of an environment
// variable, or returns "".
func EnvValueProblem(v string) string {
	if strings.IndexByte(v, 0) >= 0 {
		return "contains a NUL byte, which an environment variable cannot carry"
	}
	return ""
}

// Stdio runs an MCP server as a process.
type Stdio struct {
	Command string   `json:"command"`
	Args    []string `json:"args,omitempty"`
	Env     []Value  `json:"env,omitempty"`
}

// StreamableHTTP reaches an MCP server over Streamable HTTP.
type StreamableHTTP struct {
	URL     string  `json:"url"`
	Headers []Value `json:"headers,omitempty"`
}

// MediaStore is where image bytes live.
type MediaStore struct {
	// StoreURI is the location every image URI starts with.
	StoreURI       string                    `json:"storeURI"`
	S3             *S3MediaStore             `json:"s3,omitempty"`
	LocalDirectory *LocalDirectoryMediaStore `json:"localDirectory,omitempty"`
}

// S3MediaStore is a bucket and prefix.
type S3MediaStore struct {
	Bucket          string     `json:"bucket"`
	Prefix          string     `json:"prefix,omitempty"`
	Endpoint        string     `json:"endpoint,omitempty"`
	Region          string     `json:"region,omitempty"`
	ForcePathStyle  bool       `json:"forcePathStyle,omitempty"`
	AccessKeyID     *SecretEnv `json:"accessKeyID,omitempty"`
	SecretAccessKey *SecretEnv `json:"secretAccessKey,omitempty"`
	SessionToken    *SecretEnv `json:"sessionToken,omitempty"`
}

// LocalDirectoryMediaStore is a directory.
type LocalDirectoryMediaStore struct {
	Root string `json:"root"`
}

// Encode renders the document. The encoding is deterministic, so the same
// configuration always has the same bytes and digest.
func (c Config) Encode() ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetIndent("", "  ")
	enc.SetEscapeHTML(false)
	if err := enc.Encode(c); err != nil {
		return nil, fmt.Errorf("encoding worker config: %w", err)
	}
	return buf.Bytes(), nil
}

// Decode parses a document and checks that it is one this package
// understands. Unknown fields are ignored, so an operator may add fields
// before every worker reads them.
func Decode(data []byte) (Config, error) {
	var c Config
	if err := json.Unmarshal(data, &c); err != nil {
		return Config{}, fmt.Errorf("worker config is not valid JSON: %w", err)
	}
	if c.APIVersion != APIVersion || c.Kind != Kind {
		return Config{}, fmt.Errorf("worker config has apiVersion %q and kind %q; this worker reads apiVersion %q kind %q",
			c.APIVersion, c.Kind, APIVersion, Kind)
	}
	if err := c.Validate(); err != nil {
		return Config{}, err
	}
	return c, nil
}

// Load reads and decodes a document from a file.
func Load(path string) (Config, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return Config{}, fmt.Errorf("reading worker config: %w", err)
	}
	return Decode(data)
}

// Validate checks what a worker needs before it can start. The operator
// renders only valid documents; this guards hand-written ones.
func (c Config) Validate() error {
	var problems []string
	need := func(ok bool, field string) {
		if !ok {
			problems = append(problems, field+" is required")
		}
	}
	need(c.FlowType != "", "flowType")
	need(c.EngineVersion != "", "engineVersion")
	need(c.Engine.Address != "", "engine.address")
	need(c.Engine.Namespace != "", "engine.namespace")
	need(c.Engine.TaskQueue != "", "engine.taskQueue")
	need(c.Definition.Model.Provider != "", "definition.model.provider")
	need(c.Definition.Model.Name != "", "definition.model.name")
	choices := map[string]bool{}
	for i, mc := range c.Definition.ModelChoices {
		field := fmt.Sprintf("definition.modelChoices[%d]", i)
		need(mc.Choice != "", field+".choice")
		need(mc.Model.Provider != "", field+".model.provider")
		need(mc.Model.Name != "", field+".model.name")
		if choices[mc.Choice] {
			problems = append(problems, fmt.Sprintf("%s.choice %q repeats an earlier choice", field, mc.Choice))
		}
		choices[mc.Choice] = true
	}
	problems = append(problems, c.SpendLimit.problems(c.Definition)...)
	problems = append(problems, c.Tracing.problems()...)
	if c.TaskSlots < 1 {
		problems = append(problems, fmt.Sprintf("taskSlots must be at least 1, not %d", c.TaskSlots))
	}
	seen := map[string]bool{}
	for i, ts := range c.ToolSources {
		if ts.SourceName == "" {
			problems = append(problems, fmt.Sprintf("toolSources[%d].sourceName is required", i))
		} else if seen[ts.SourceName] {
			problems = append(problems, fmt.Sprintf("toolSources[%d].sourceName %q repeats an earlier source", i, ts.SourceName))
		}
		seen[ts.SourceName] = true
		if (ts.Stdio == nil) == (ts.StreamableHTTP == nil) {
			problems = append(problems, fmt.Sprintf("toolSources[%d] needs exactly one of stdio or streamableHTTP", i))
		}
		if s := ts.Stdio; s != nil {
			if strings.TrimSpace(s.Command) != s.Command || s.Command == "" {
				problems = append(problems, fmt.Sprintf("toolSources[%d].stdio.command must name an executable, without surrounding whitespace", i))
			}
			for _, v := range s.Env {
				if p := EnvValueProblem(v.Value); p != "" {
					problems = append(problems, fmt.Sprintf("toolSources[%d].stdio.env[%s]: the value %s", i, v.Name, p))
				}
			}
		}
		if h := ts.StreamableHTTP; h != nil {
			for _, v := range h.Headers {
				if p := HeaderValueProblem(v.Value); p != "" {
					problems = append(problems, fmt.Sprintf("toolSources[%d].streamableHTTP.headers[%s]: the value %s", i, v.Name, p))
				}
			}
		}
	}
	if c.MetricsAddress != "" && c.MetricsAddress == c.HealthAddress {
		problems = append(problems, fmt.Sprintf("metricsAddress: %s is healthAddress too; metrics listen on their own port", c.MetricsAddress))
	}
	if c.DebugAddress != "" {
		if err := CheckLoopback(c.DebugAddress); err != nil {
			problems = append(problems, "debugAddress: "+err.Error())
		}
	}
	if h := c.EventHub; h != nil {
		if err := CheckHubURL(h.URL); err != nil {
			problems = append(problems, "eventHub.url: "+err.Error())
		}
		need(h.Token.Env != "", "eventHub.token.env")
	}
	if m := c.MediaStore; m != nil && (m.S3 == nil) == (m.LocalDirectory == nil) {
		problems = append(problems, "mediaStore needs exactly one of s3 or localDirectory")
	}
	if len(problems) > 0 {
		return errors.New("invalid worker config: " + strings.Join(problems, "; "))
	}
	return nil
}

// parseHTTPURL parses an http or https URL with a host.
func parseHTTPURL(raw string) (*url.URL, error) {
	u, err := url.Parse(raw)
	switch {
	case err != nil:
		return nil, fmt.Errorf("%q is not a URL", raw)
	case u.Scheme != "http" && u.Scheme != "https":
		return nil, fmt.Errorf("%q: the scheme must be http or https", raw)
	case u.Hostname() == "":
		return nil, fmt.Errorf("%q has no host", raw)
	}
	return u, nil
}

// CheckHubURL accepts an event hub's base URL: http or https, a host, and
// nothing a request would carry elsewhere (credentials, a path, a query).
func CheckHubURL(raw string) error {
	u, err := parseHTTPURL(raw)
	switch {
	case err != nil:
		return err
	case u.User != nil || (u.Path != "" && u.Path != "/") || u.RawQuery != "" || u.Fragment != "" || u.Opaque != "":
		return fmt.Errorf("%q: only a scheme, host and port are allowed", raw)
	}
	return nil
}

// CheckLoopback accepts a host:port address whose host is localhost or a
// loopback IP, so that what listens there is unreachable from the pod
// network; an address without a host (":8081") listens on every interface
// and is refused.
func CheckLoopback(address string) error {
	host, port, err := net.SplitHostPort(address)
	if err != nil {
		return fmt.Errorf("%q is not host:port: %w", address, err)
	}
	if port == "" {
		return fmt.Errorf("%q has no port", address)
	}
	if host == "localhost" {
		return nil
	}
	if ip := net.ParseIP(host); ip != nil && ip.IsLoopback() {
		return nil
	}
	return fmt.Errorf("%q is not a loopback address: use 127.0.0.1, [::1] or localhost, so that only the pod and port-forwards reach it", address)
}

// problems says what keeps a spend limit from being kept: a cost bound
// needs a price for every model the Agent may call.
func (l *SpendLimit) problems(d Definition) []string {
	if l == nil {
		return nil
	}
	var out []string
	if l.Window.Duration < time.Minute {
		out = append(out, fmt.Sprintf("spendLimit.window must be at least one minute, not %s", l.Window.Duration))
	}
	if l.AgentTokens < 0 || l.AgentMicroCost < 0 || l.SessionTokens < 0 {
		out = append(out, "spendLimit bounds must not be negative")
	}
	priced := map[string]bool{}
	for i, p := range l.Prices {
		if p.Model == "" || priced[p.Model] {
			out = append(out, fmt.Sprintf("spendLimit.prices[%d].model must name a model once", i))
		}
		if p.InputMicroPerMillion < 0 || p.CachedInputMicroPerMillion < 0 || p.OutputMicroPerMillion < 0 {
			out = append(out, fmt.Sprintf("spendLimit.prices[%d] must not be negative", i))
		}
		priced[p.Model] = true
	}
	if l.AgentMicroCost > 0 {
		models := []Model{d.Model}
		for _, mc := range d.ModelChoices {
			models = append(models, mc.Model)
		}
		for _, m := range models {
			if !priced[m.Name] {
				out = append(out, fmt.Sprintf("spendLimit.prices has no price for model %q, which a cost bound needs", m.Name))
				priced[m.Name] = true
			}
		}
	}
	return out
}
