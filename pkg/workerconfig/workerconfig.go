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
	"fmt"
	"os"

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
