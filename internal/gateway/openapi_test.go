package gateway_test

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/google/jsonschema-go/jsonschema"

	"github.com/stepwise-run/stepwise/internal/gatewayapi"
)

// document is the part of the OpenAPI document the tests read.
type document struct {
	OpenAPI    string                                `json:"openapi"`
	Paths      map[string]map[string]json.RawMessage `json:"paths"`
	Components struct {
		Schemas map[string]*jsonschema.Schema `json:"schemas"`
	} `json:"components"`
}

func openAPI(t *testing.T, f *fixture) document {
	t.Helper()
	resp, err := http.Get(f.gateway + gatewayapi.OpenAPIPath)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = resp.Body.Close() }()
	var doc document
	if err := json.NewDecoder(resp.Body).Decode(&doc); err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("the OpenAPI document without a token = %d, %v", resp.StatusCode, err)
	}
	return doc
}

// conforms checks a JSON answer against the document's schema of a type.
func conforms(t *testing.T, doc document, name string, raw []byte) {
	t.Helper()
	schema, ok := doc.Components.Schemas[name]
	if !ok {
		t.Fatalf("the document has no schema %s", name)
	}
	resolved, err := schema.Resolve(nil)
	if err != nil {
		t.Fatalf("schema %s: %v", name, err)
	}
	var instance any
	if err := json.Unmarshal(raw, &instance); err != nil {
		t.Fatalf("%s answer %q: %v", name, raw, err)
	}
	if err := resolved.Validate(instance); err != nil {
		t.Errorf("an answer does not conform to schema %s: %v\n%s", name, err, raw)
	}
}

func TestTheOpenAPIDocumentDescribesTheRoutesTheGatewayServes(t *testing.T) {
	f := start(t)
	doc := openAPI(t, f)
	if doc.OpenAPI != "3.1.0" {
		t.Errorf("openapi = %q", doc.OpenAPI)
	}
	// Every documented operation is served: without a token it is refused
	// as unauthenticated, never 404 or 405.
	fill := strings.NewReplacer("{namespace}", "team-a", "{agent}", "support", "{session}", "s-1",
		"{message}", "m-1", "{turn}", "turn-1", "{interrupt}", "i-1")
	operations := 0
	for path, methods := range doc.Paths {
		for method := range methods {
			operations++
			req, _ := http.NewRequest(strings.ToUpper(method), f.gateway+fill.Replace(path), nil)
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			_ = resp.Body.Close()
			want := http.StatusUnauthorized
			if path == gatewayapi.OpenAPIPath {
				want = http.StatusOK
			}
			if resp.StatusCode != want {
				t.Errorf("%s %s without a token = %d, want %d", method, path, resp.StatusCode, want)
			}
		}
	}
	if operations != 17 {
		t.Errorf("the document has %d operations, want the 17 routes", operations)
	}

	// Real answers conform to the schemas the document gives them.
	get := func(url, token string) []byte {
		t.Helper()
		req, _ := http.NewRequest(http.MethodGet, url, nil)
		req.Header.Set("Authorization", "Bearer "+token)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = resp.Body.Close() }()
		raw, _ := io.ReadAll(resp.Body)
		return raw
	}
	mustAccept(t, http.MethodPost, sessionURL(f, support, "s-doc"), gatewayapi.StartRequest{Message: "tools: write_approved"})
	waitSnapshot(t, f, "s-doc", "an approval", func(s gatewayapi.SnapshotResponse) bool { return len(s.Snapshot.PendingInterrupts) == 1 })
	conforms(t, doc, "SnapshotResponse", get(sessionURL(f, support, "s-doc")+"/snapshot", readerToken))
	conforms(t, doc, "MessagesPage", get(sessionURL(f, support, "s-doc")+"/messages", readerToken))
	conforms(t, doc, "WaitingResponse", get(f.gateway+gatewayapi.WaitingPath, operatorToken))
	conforms(t, doc, "FlowGraph", get(f.gateway+"/api/v1/namespaces/team-a/agents/support/graph", readerToken))
	conforms(t, doc, "ErrorBody", get(sessionURL(f, support, "s-none")+"/snapshot", readerToken))
	raw, _ := json.Marshal(gatewayapi.Accepted{Accepted: true})
	conforms(t, doc, "Accepted", raw)
	// The schemas are strict: a field the type does not have is refused.
	resolved, err := doc.Components.Schemas["Accepted"].Resolve(nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := resolved.Validate(map[string]any{"accepted": true, "acceptd": true}); err == nil {
		t.Error("the Accepted schema takes a field Accepted does not have")
	}
}
