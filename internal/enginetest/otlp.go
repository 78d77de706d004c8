package enginetest

import (
	"context"
	"encoding/hex"
	"encoding/pem"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"testing"

	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
)

// OTLPReceiver is an OTLP/gRPC trace receiver built with the OTLP protocol
// packages: what a worker exports reaches it over the real wire format.
type OTLPReceiver struct {
	coltracepb.UnimplementedTraceServiceServer
	// Address is where it listens, host:port.
	Address string
	mu      sync.Mutex
	spans   []ReceivedSpan
}

// ReceivedSpan is one span as the receiver decoded it.
type ReceivedSpan struct {
	Name         string
	TraceID      string
	SpanID       string
	ParentSpanID string
	Scope        string
	SchemaURL    string
	Attributes   map[string]string
	Links        []string
}

// StartOTLPReceiver listens on a free loopback port until the test ends.
func StartOTLPReceiver(t testing.TB) *OTLPReceiver {
	t.Helper()
	return startOTLPReceiver(t)
}

// StartTLSOTLPReceiver listens with TLS, with a certificate for 127.0.0.1
// that only the returned PEM CA certificate verifies.
func StartTLSOTLPReceiver(t testing.TB) (r *OTLPReceiver, caPEM []byte) {
	t.Helper()
	// The test TLS server's certificate, valid for 127.0.0.1.
	borrowed := httptest.NewUnstartedServer(http.NotFoundHandler())
	borrowed.StartTLS()
	cert := borrowed.TLS.Certificates[0]
	caPEM = pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: borrowed.Certificate().Raw})
	borrowed.Close()
	return startOTLPReceiver(t, grpc.Creds(credentials.NewServerTLSFromCert(&cert))), caPEM
}

func startOTLPReceiver(t testing.TB, opts ...grpc.ServerOption) *OTLPReceiver {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	r := &OTLPReceiver{Address: l.Addr().String()}
	server := grpc.NewServer(opts...)
	coltracepb.RegisterTraceServiceServer(server, r)
	go func() { _ = server.Serve(l) }()
	t.Cleanup(server.Stop)
	return r
}

// Export receives one export request.
func (r *OTLPReceiver) Export(_ context.Context, req *coltracepb.ExportTraceServiceRequest) (*coltracepb.ExportTraceServiceResponse, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, rs := range req.GetResourceSpans() {
		for _, ss := range rs.GetScopeSpans() {
			for _, s := range ss.GetSpans() {
				span := ReceivedSpan{
					Name: s.GetName(), TraceID: hex.EncodeToString(s.GetTraceId()), SpanID: hex.EncodeToString(s.GetSpanId()),
					ParentSpanID: hex.EncodeToString(s.GetParentSpanId()), Scope: ss.GetScope().GetName(), SchemaURL: ss.GetSchemaUrl(),
					Attributes: map[string]string{},
				}
				for _, kv := range s.GetAttributes() {
					span.Attributes[kv.GetKey()] = anyValueText(kv.GetValue())
				}
				for _, l := range s.GetLinks() {
					span.Links = append(span.Links, hex.EncodeToString(l.GetTraceId())+"/"+hex.EncodeToString(l.GetSpanId()))
				}
				r.spans = append(r.spans, span)
			}
		}
	}
	return &coltracepb.ExportTraceServiceResponse{}, nil
}

// Spans are the spans received so far.
func (r *OTLPReceiver) Spans() []ReceivedSpan {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]ReceivedSpan(nil), r.spans...)
}

func anyValueText(v *commonpb.AnyValue) string {
	switch x := v.GetValue().(type) {
	case *commonpb.AnyValue_StringValue:
		return x.StringValue
	case *commonpb.AnyValue_IntValue:
		return strconv.FormatInt(x.IntValue, 10)
	case *commonpb.AnyValue_BoolValue:
		if x.BoolValue {
			return "true"
		}
		return "false"
	}
	return v.String()
}
