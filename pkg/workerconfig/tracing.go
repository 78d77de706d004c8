package workerconfig

import (
	"fmt"
	"strings"
)

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
