package gateway

import (
	"encoding/json"
	"fmt"
	"net/http"
	"reflect"
	"regexp"
	"strings"

	"github.com/google/jsonschema-go/jsonschema"

	"github.com/stepwise-run/stepwise/internal/gatewayapi"
	"github.com/stepwise-run/stepwise/internal/grants"
	"github.com/stepwise-run/stepwise/internal/session"
	"github.com/stepwise-run/stepwise/internal/version"
	sessions "github.com/stepwise-run/stepwise/pkg/client"
)

// parameter is a path, query or header parameter of a route.
type parameter struct {
	Name        string             `json:"name"`
	In          string             `json:"in"`
	Description string             `json:"description,omitempty"`
	Required    bool               `json:"required,omitempty"`
	Schema      *jsonschema.Schema `json:"schema"`
}

var (
	messagesQuery = []parameter{
		{Name: "beforeSequence", In: "query", Description: "Continue to messages older than this sequence, from a page's nextBeforeSequence.",
			Schema: &jsonschema.Schema{Type: "integer", Minimum: jsonschema.Ptr(0.0)}},
		{Name: "limit", In: "query", Description: "Messages per page.",
			Schema: &jsonschema.Schema{Type: "integer", Minimum: jsonschema.Ptr(1.0), Maximum: jsonschema.Ptr(200.0)}},
	}
	waitingQuery = []parameter{
		{Name: "step", In: "query", Description: "A Step to search, repeated for several; AwaitToolApproval and AwaitQuestionAnswer when absent.",
			Schema: &jsonschema.Schema{Type: "array", Items: &jsonschema.Schema{Type: "string"}}},
		{Name: "limit", In: "query", Description: "Sessions in the answer; truncated says when more wait.",
			Schema: &jsonschema.Schema{Type: "integer", Minimum: jsonschema.Ptr(1.0), Maximum: jsonschema.Ptr(float64(MaxWaitingLimit)), Default: json.RawMessage(fmt.Sprint(DefaultWaitingLimit))}},
	}
	eventsParameters = []parameter{
		{Name: "Last-Event-ID", In: "header", Description: "The id of the last event received; a reconnecting EventSource sends it.",
			Schema: &jsonschema.Schema{Type: "string"}},
		{Name: "resumeToken", In: "query", Description: "The snapshot's resume token, for the first connection; Last-Event-ID wins when both are given.",
			Schema: &jsonschema.Schema{Type: "string"}},
	}
)

// pathParameters describes the wildcards of a route pattern.
func pathParameters(path string) []parameter {
	descriptions := map[string]string{
		"namespace": "The Agent's namespace.",
		"agent":     "The Agent's name.",
		"session":   "The session ID: 1 to 256 letters, digits and ._:@=+-, starting with a letter or digit.",
		"message":   "The queued message's ID.",
		"turn":      "The turn's ID.",
		"interrupt": "The interrupt's ID, from the snapshot's pendingInterrupts.",
	}
	patterns := map[string]*regexp.Regexp{"namespace": namespacePattern, "agent": agentPattern, "session": sessionPattern}
	var out []parameter
	for _, m := range regexp.MustCompile(`\{([a-z]+)\}`).FindAllStringSubmatch(path, -1) {
		schema := &jsonschema.Schema{Type: "string"}
		if p, ok := patterns[m[1]]; ok {
			schema.Pattern = p.String()
		} else {
			schema.Pattern = idPattern.String()
		}
		out = append(out, parameter{Name: m[1], In: "path", Required: true, Description: descriptions[m[1]], Schema: schema})
	}
	return out
}

type openAPIDocument struct {
	OpenAPI    string                                  `json:"openapi"`
	Info       openAPIInfo                             `json:"info"`
	Security   []map[string][]string                   `json:"security"`
	Paths      map[string]map[string]*openAPIOperation `json:"paths"`
	Components openAPIComponents                       `json:"components"`
}

type openAPIInfo struct {
	Title       string `json:"title"`
	Version     string `json:"version"`
	Description string `json:"description"`
}

type openAPIComponents struct {
	Schemas         map[string]*jsonschema.Schema `json:"schemas"`
	SecuritySchemes map[string]any                `json:"securitySchemes"`
}

type openAPIOperation struct {
	OperationID string                      `json:"operationId"`
	Summary     string                      `json:"summary"`
	Parameters  []parameter                 `json:"parameters,omitempty"`
	RequestBody *openAPIBody                `json:"requestBody,omitempty"`
	Responses   map[string]*openAPIResponse `json:"responses"`
	Security    []map[string][]string       `json:"security,omitempty"`
	// Verb is the verb on agents/sessions the route asks for.
	Verb grants.Verb `json:"x-stepwise-verb,omitempty"`
}

type openAPIBody struct {
	Required bool                        `json:"required,omitempty"`
	Content  map[string]openAPIMediaType `json:"content"`
}

type openAPIResponse struct {
	Description string                      `json:"description"`
	Content     map[string]openAPIMediaType `json:"content,omitempty"`
}

type openAPIMediaType struct {
	Schema *jsonschema.Schema `json:"schema"`
}

// schemaOptions infers schemas as encoding/json writes values: raw JSON
// and settings are any JSON object.
var schemaOptions = &jsonschema.ForOptions{TypeSchemas: map[reflect.Type]*jsonschema.Schema{
	reflect.TypeFor[json.RawMessage]():          {},
	reflect.TypeFor[sessions.SessionSettings](): {Type: "object"},
}}

// OpenAPIDocument describes every route of the gateway, built from the
// route table and the Go types the routes read and write, so it cannot
// drift from them.
func (s *Server) OpenAPIDocument() ([]byte, error) {
	doc := openAPIDocument{
		OpenAPI: "3.1.0",
		Info: openAPIInfo{Title: "Stepwise gateway", Version: version.Operator,
			Description: "Sessions of Agents, addressed by namespace and Agent name. Every route but this document's and the health check's takes a " +
				"Kubernetes bearer token or an application token; the verb on the agents/sessions subresource each asks for is its x-stepwise-verb."},
		Security: []map[string][]string{{"bearer": {}}},
		Paths:    map[string]map[string]*openAPIOperation{},
		Components: openAPIComponents{Schemas: map[string]*jsonschema.Schema{},
			SecuritySchemes: map[string]any{"bearer": map[string]string{"type": "http", "scheme": "bearer"}}},
	}
	ref := func(v any) (*jsonschema.Schema, error) {
		t := reflect.TypeOf(v)
		if _, ok := doc.Components.Schemas[t.Name()]; !ok {
			schema, err := jsonschema.ForType(t, schemaOptions)
			if err != nil {
				return nil, err
			}
			doc.Components.Schemas[t.Name()] = schema
		}
		return &jsonschema.Schema{Ref: "#/components/schemas/" + t.Name()}, nil
	}
	errorBody, err := ref(gatewayapi.ErrorBody{})
	if err != nil {
		return nil, err
	}
	add := func(method, path string, op *openAPIOperation, response any, contentType string) error {
		ok := &openAPIResponse{Description: "OK"}
		if response != nil {
			schema, err := ref(response)
			if err != nil {
				return err
			}
			ok.Content = map[string]openAPIMediaType{contentType: {Schema: schema}}
		}
		op.Responses = map[string]*openAPIResponse{"200": ok}
		if op.Verb != "" || path == gatewayapi.WaitingPath || path == gatewayapi.NamespaceWaitingPath {
			refusal := map[string]openAPIMediaType{"application/json": {Schema: errorBody}}
			op.Responses["4XX"] = &openAPIResponse{Description: "Refused; reason says why.", Content: refusal}
			op.Responses["5XX"] = &openAPIResponse{Description: "The gateway could not reach what the request needs; reason says what.", Content: refusal}
		}
		op.Parameters = append(pathParameters(path), op.Parameters...)
		if doc.Paths[path] == nil {
			doc.Paths[path] = map[string]*openAPIOperation{}
		}
		doc.Paths[path][strings.ToLower(method)] = op
		return nil
	}
	for _, rt := range s.sessionRoutes() {
		op := &openAPIOperation{OperationID: rt.operationID, Summary: rt.summary, Verb: rt.verb, Parameters: rt.query}
		if rt.request != nil {
			schema, err := ref(rt.request)
			if err != nil {
				return nil, err
			}
			op.RequestBody = &openAPIBody{Required: !rt.optionalBody, Content: map[string]openAPIMediaType{"application/json": {Schema: schema}}}
		}
		if err := add(rt.method, gatewayapi.SessionPath+rt.path, op, rt.response, "application/json"); err != nil {
			return nil, err
		}
		if rt.response == (gatewayapi.Accepted{}) {
			pending, err := ref(gatewayapi.Pending{})
			if err != nil {
				return nil, err
			}
			op.Responses["202"] = &openAPIResponse{Description: "No worker ran the request in time; send it again with its requestId to learn the outcome.",
				Content: map[string]openAPIMediaType{"application/json": {Schema: pending}}}
		}
	}
	others := []struct {
		path        string
		op          *openAPIOperation
		response    any
		contentType string
	}{
		{gatewayapi.SessionPath + "/events", &openAPIOperation{OperationID: "streamEvents", Verb: grants.VerbGet, Parameters: eventsParameters,
			Summary: "Stream the session's events as Server-Sent Events; each frame's id is a resume token and its data an Event. " +
				"Idle streams send keep-alive comments. A token of another session, or one whose events are no longer kept, is 400: load the snapshot again."},
			Event{}, "text/event-stream"},
		{gatewayapi.WaitingPath, &openAPIOperation{OperationID: "listWaitingSessions", Parameters: waitingQuery,
			Summary: "List the sessions waiting for a person, newest first, across every Agent whose sessions the caller may get."},
			gatewayapi.WaitingResponse{}, "application/json"},
		{gatewayapi.NamespaceWaitingPath, &openAPIOperation{OperationID: "listNamespaceWaitingSessions", Parameters: waitingQuery,
			Summary: "List the sessions waiting for a person, newest first, across the Agents of one namespace whose sessions the caller may get."},
			gatewayapi.WaitingResponse{}, "application/json"},
		{gatewayapi.GraphPath, &openAPIOperation{OperationID: "getFlowGraph", Verb: grants.VerbGet,
			Summary: "Read the session Flow graph the operator published for the Agent: its Steps, transitions and actions; a snapshot's activeSteps name the Steps a session is in."},
			session.FlowGraph{}, "application/json"},
		{gatewayapi.OpenAPIPath, &openAPIOperation{OperationID: "getOpenAPIDocument", Summary: "This document.", Security: []map[string][]string{{}}},
			nil, ""},
	}
	for _, o := range others {
		if err := add(http.MethodGet, o.path, o.op, o.response, o.contentType); err != nil {
			return nil, err
		}
	}
	return json.MarshalIndent(doc, "", "  ")
}

func (s *Server) openAPI(w http.ResponseWriter, r *http.Request) {
	doc, err := s.openAPIDoc()
	if err != nil {
		s.opts.Logger.Error("building the OpenAPI document", "error", err)
		http.Error(w, "the OpenAPI document could not be built; see the gateway's log", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(doc)
}
