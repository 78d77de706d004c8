package workerconfig

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func validConfig() Config {
	return Config{
		APIVersion: APIVersion, Kind: Kind,
		Agent:    AgentRef{Namespace: "team", Name: "support"},
		FlowType: "SupportAgent", EngineVersion: "0.1.0", TaskSlots: 10, HealthAddress: ":8080",
		Engine:     Engine{Address: "temporal:7233", Namespace: "default", TaskQueue: "stepwise/SupportAgent"},
		Definition: Definition{Name: "support", Model: Model{Provider: "scripted", Name: "demo"}, DefaultToolEffect: "unclassified"},
	}
}

func TestRoundTrip(t *testing.T) {
	cfg := validConfig()
	cfg.ToolSources = []ToolSource{{SourceName: "files", Stdio: &Stdio{Command: "mcp-files"}}}
	doc, err := cfg.Encode()
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), FileName)
	if err := os.WriteFile(path, doc, 0o600); err != nil {
		t.Fatal(err)
	}
	got, err := Load(path)
	if err != nil {
		t.Fatalf("Load() = %v", err)
	}
	if got.FlowType != cfg.FlowType || got.ToolSources[0].Stdio.Command != "mcp-files" {
		t.Errorf("round trip lost fields: %+v", got)
	}
}

func TestDecodeRefuses(t *testing.T) {
	tests := []struct {
		name   string
		doc    string
		mutate func(*Config)
		want   string
	}{
		{name: "not JSON", doc: "{", want: "not valid JSON"},
		{name: "another version", mutate: func(c *Config) { c.APIVersion = "worker.stepwise.run/v2" },
			want: `apiVersion "worker.stepwise.run/v2"`},
		{name: "no flow type", mutate: func(c *Config) { c.FlowType = "" }, want: "flowType is required"},
		{name: "no task slots", mutate: func(c *Config) { c.TaskSlots = 0 }, want: "taskSlots must be at least 1"},
		{name: "a short spend window", mutate: func(c *Config) {
			c.SpendLimit = &SpendLimit{Window: metav1.Duration{Duration: time.Second}, AgentTokens: 1}
		}, want: "spendLimit.window must be at least one minute, not 1s"},
		{name: "a cost bound without prices", mutate: func(c *Config) {
			c.SpendLimit = &SpendLimit{Window: metav1.Duration{Duration: time.Hour}, AgentMicroCost: 1}
		}, want: "spendLimit.prices has no price for model"},
		{name: "a model priced twice", mutate: func(c *Config) {
			c.SpendLimit = &SpendLimit{Window: metav1.Duration{Duration: time.Hour}, Prices: []ModelPrice{{Model: "m"}, {Model: "m"}}}
		}, want: "spendLimit.prices[1].model must name a model once"},
		{name: "a tracing endpoint with credentials", mutate: func(c *Config) {
			c.Tracing = &Tracing{Endpoint: "http://user:pw@collector:4317"}
		}, want: "tracing.endpoint: \"http://user:pw@collector:4317\" may not carry credentials"},
		{name: "a tracing endpoint of another scheme", mutate: func(c *Config) {
			c.Tracing = &Tracing{Endpoint: "unix:///run/otel.sock"}
		}, want: "tracing.endpoint: \"unix:///run/otel.sock\": the scheme must be http or https"},
		{name: "a gRPC tracing endpoint with a path", mutate: func(c *Config) {
			c.Tracing = &Tracing{Endpoint: "http://collector:4317/v1/traces"}
		}, want: "may carry a path only with protocol http/protobuf"},
		{name: "an unknown OTLP protocol", mutate: func(c *Config) {
			c.Tracing = &Tracing{Endpoint: "http://collector:4317", Protocol: "http/json"}
		}, want: `tracing.protocol "http/json" is not grpc or http/protobuf`},
		{name: "a tracing CA for a plain HTTP endpoint", mutate: func(c *Config) {
			c.Tracing = &Tracing{Endpoint: "http://collector:4317", CAFile: "/etc/ca.crt"}
		}, want: "tracing.caFile needs an https:// endpoint"},
		{name: "a sample percent over 100", mutate: func(c *Config) {
			c.Tracing = &Tracing{Endpoint: "http://collector:4317", SamplePercent: new(int32(150))}
		}, want: "tracing.samplePercent must be from 0 to 100, not 150"},
		{name: "unknown semantic conventions", mutate: func(c *Config) {
			c.Tracing = &Tracing{Endpoint: "http://collector:4317", SemanticConventions: "2.0"}
		}, want: `tracing.semanticConventions "2.0" is not 1.42.0-dev or 1.36.0`},
		{name: "a tracing header value with a line break", mutate: func(c *Config) {
			c.Tracing = &Tracing{Endpoint: "http://collector:4317", Headers: []Value{{Name: "X-Key", Value: "a\r\nInjected: 1"}}}
		}, want: "tracing.headers[X-Key]: the value"},
		{name: "a repeated source name", mutate: func(c *Config) {
			c.ToolSources = []ToolSource{{SourceName: "a", Stdio: &Stdio{Command: "x"}}, {SourceName: "a", Stdio: &Stdio{Command: "y"}}}
		}, want: `toolSources[1].sourceName "a" repeats`},
		{name: "a stdio command of spaces", mutate: func(c *Config) {
			c.ToolSources = []ToolSource{{SourceName: "a", Stdio: &Stdio{Command: "  "}}}
		}, want: "toolSources[0].stdio.command must name an executable"},
		{name: "a header value with a line break", mutate: func(c *Config) {
			c.ToolSources = []ToolSource{{SourceName: "a", StreamableHTTP: &StreamableHTTP{URL: "http://x",
				Headers: []Value{{Name: "X-Team", Value: "a\r\nX-Injected: b"}}}}}
		}, want: "toolSources[0].streamableHTTP.headers[X-Team]: the value contains a control character"},
		{name: "an environment value with a NUL byte", mutate: func(c *Config) {
			c.ToolSources = []ToolSource{{SourceName: "a", Stdio: &Stdio{Command: "x", Env: []Value{{Name: "TOKEN", Value: "a\x00b"}}}}}
		}, want: "toolSources[0].stdio.env[TOKEN]: the value contains a NUL byte"},
		{name: "a source with two transports", mutate: func(c *Config) {
			c.ToolSources = []ToolSource{{SourceName: "a", Stdio: &Stdio{Command: "x"}, StreamableHTTP: &StreamableHTTP{URL: "http://x"}}}
		}, want: "exactly one of stdio or streamableHTTP"},
		{name: "a debug address on every interface", mutate: func(c *Config) { c.DebugAddress = ":8081" },
			want: `debugAddress: ":8081" is not a loopback address`},
		{name: "a debug address on the pod network", mutate: func(c *Config) { c.DebugAddress = "10.0.0.7:8081" },
			want: `debugAddress: "10.0.0.7:8081" is not a loopback address`},
		{name: "a debug address without a port", mutate: func(c *Config) { c.DebugAddress = "127.0.0.1" },
			want: `debugAddress: "127.0.0.1" is not host:port`},
		{name: "an event hub URL with credentials", mutate: func(c *Config) {
			c.EventHub = &EventHub{URL: "http://user:pw@hub:8090", Token: SecretEnv{Env: "T"}}
		}, want: `eventHub.url: "http://user:pw@hub:8090": only a scheme, host and port are allowed`},
		{name: "an event hub URL with a path", mutate: func(c *Config) {
			c.EventHub = &EventHub{URL: "http://hub:8090/elsewhere", Token: SecretEnv{Env: "T"}}
		}, want: "eventHub.url: \"http://hub:8090/elsewhere\": only a scheme"},
		{name: "an event hub URL of another scheme", mutate: func(c *Config) {
			c.EventHub = &EventHub{URL: "file:///etc/passwd", Token: SecretEnv{Env: "T"}}
		}, want: "eventHub.url: \"file:///etc/passwd\": the scheme must be http or https"},
		{name: "an event hub URL without a host", mutate: func(c *Config) {
			c.EventHub = &EventHub{URL: "http://:8090", Token: SecretEnv{Env: "T"}}
		}, want: "eventHub.url: \"http://:8090\" has no host"},
		{name: "an event hub without a token", mutate: func(c *Config) {
			c.EventHub = &EventHub{URL: "http://hub:8090"}
		}, want: "eventHub.token.env is required"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			doc := []byte(tt.doc)
			if tt.mutate != nil {
				cfg := validConfig()
				tt.mutate(&cfg)
				var err error
				if doc, err = cfg.Encode(); err != nil {
					t.Fatal(err)
				}
			}
			_, err := Decode(doc)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("Decode() = %v, want an error containing %q", err, tt.want)
			}
		})
	}
}

func TestDecodeIgnoresFieldsItDoesNotKnow(t *testing.T) {
	doc, _ := validConfig().Encode()
	doc = []byte(strings.Replace(string(doc), `"flowType"`, `"addedLater": {"x": 1}, "flowType"`, 1))
	if _, err := Decode(doc); err != nil {
		t.Errorf("Decode() = %v, want fields added by a newer operator ignored", err)
	}
}
