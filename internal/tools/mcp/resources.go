package mcp

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/stepwise-run/stepwise/pkg/agent"
)

// The resource and prompt tools, offered after the servers' tools when a
// source enables them.
const (
	ListResourcesAndPromptsTool = "mcp_list_resources_and_prompts"
	ReadResourceTool            = "mcp_read_resource"
	GetPromptTool               = "mcp_get_prompt"
)

// DeclaredToolNames are the names the source always lists, checked when an
// agent is built.
func (s *Source) DeclaredToolNames() []string {
	if !s.resourceTools {
		return nil
	}
	return []string{ListResourcesAndPromptsTool, ReadResourceTool, GetPromptTool}
}

// resourceAndPromptTools are the three read tools, each taking a
// configured server's name.
func (s *Source) resourceAndPromptTools(policies agent.SourcePolicies) []agent.SourceTool {
	names := make([]any, 0, len(s.servers))
	for _, srv := range s.servers {
		names = append(names, srv.Name)
	}
	server := map[string]any{"type": "string", "enum": names, "description": "The MCP server to ask."}
	tools := []struct {
		name, description string
		properties        map[string]any
		required          []string
	}{
		{ListResourcesAndPromptsTool, "List the resources, resource templates and prompts of an MCP server.",
			map[string]any{"server": server}, []string{"server"}},
		{ReadResourceTool, "Read one resource of an MCP server by its URI.",
			map[string]any{"server": server, "uri": map[string]any{"type": "string", "description": "The resource URI."}},
			[]string{"server", "uri"}},
		{GetPromptTool, "Get one prompt of an MCP server, filled in with its arguments.",
			map[string]any{
				"server": server, "name": map[string]any{"type": "string", "description": "The prompt's name."},
				"arguments": map[string]any{"type": "object", "additionalProperties": map[string]any{"type": "string"},
					"description": "The prompt's arguments, strings by name."},
			}, []string{"server", "name"}},
	}
	out := make([]agent.SourceTool, 0, len(tools))
	for _, t := range tools {
		schema, _ := json.Marshal(map[string]any{
			"type": "object", "properties": t.properties, "required": t.required, "additionalProperties": false,
		})
		ref, _ := json.Marshal(reference{Builtin: t.name})
		policy := agent.Policy{Effect: agent.EffectRead}
		if p := policies.Policy(t.name); p != nil {
			policy = *p
		}
		out = append(out, agent.SourceTool{
			ToolDefinition: agent.ToolDefinition{Name: t.name, Description: t.description, Parameters: schema},
			Policy:         policy, Reference: string(ref),
		})
	}
	return out
}

// resourceArguments are the arguments of the resource and prompt tools.
type resourceArguments struct {
	Server    string            `json:"server"`
	URI       string            `json:"uri"`
	Name      string            `json:"name"`
	Arguments map[string]string `json:"arguments"`
}

// callResourceTool runs one resource or prompt tool on a new connection.
// An MCP error answer, a server that stays unreachable, and an
// unconfigured server fail the call.
func (s *Source) callResourceTool(ctx context.Context, builtin string, tool agent.SourceCall) (string, error) {
	var args resourceArguments
	if err := json.Unmarshal([]byte(tool.Arguments), &args); err != nil {
		return "", agent.Failed("invalid arguments for %s: %v", builtin, err)
	}
	server, ok := s.server(args.Server)
	if !ok {
		return "", agent.Failed("invalid arguments for %s: %q is not a configured MCP server", builtin, args.Server)
	}
	cs, err := connectAttempts(ctx, server, nil)
	if err != nil {
		return "", err
	}
	defer func() { _ = cs.Close() }()
	ctx, cancel := context.WithTimeout(ctx, orDuration(server.RequestTimeout, DefaultRequestTimeout))
	defer cancel()
	var result any
	switch builtin {
	case ListResourcesAndPromptsTool:
		result, err = listResourcesAndPrompts(ctx, cs)
	case ReadResourceTool:
		if args.URI == "" {
			return "", agent.Failed("invalid arguments for %s: uri is required", builtin)
		}
		var res *mcp.ReadResourceResult
		if res, err = cs.ReadResource(ctx, &mcp.ReadResourceParams{URI: args.URI}); err == nil {
			result = map[string]any{"contents": res.Contents}
		}
	case GetPromptTool:
		if args.Name == "" {
			return "", agent.Failed("invalid arguments for %s: name is required", builtin)
		}
		var res *mcp.GetPromptResult
		if res, err = cs.GetPrompt(ctx, &mcp.GetPromptParams{Name: args.Name, Arguments: args.Arguments}); err == nil {
			result = map[string]any{"description": res.Description, "messages": res.Messages}
		}
	default:
		return "", agent.Failed("%s is not a tool of MCP tool source %s", builtin, s.name)
	}
	if err != nil {
		return "", agent.Failed("%s on MCP server %s: %v", builtin, server.Name, err)
	}
	return sortedJSON(result)
}

// listResourcesAndPrompts reads every page of what the server offers; a
// server without resources or prompts lists none of them.
func listResourcesAndPrompts(ctx context.Context, cs *mcp.ClientSession) (any, error) {
	out := map[string]any{"prompts": []any{}, "resource_templates": []any{}, "resources": []any{}}
	caps := &mcp.ServerCapabilities{}
	if init := cs.InitializeResult(); init != nil && init.Capabilities != nil {
		caps = init.Capabilities
	}
	if caps.Prompts != nil {
		var items []any
		for p, err := range cs.Prompts(ctx, nil) {
			if err != nil {
				return nil, err
			}
			items = append(items, p)
		}
		out["prompts"] = orEmpty(items)
	}
	if caps.Resources != nil {
		var items []any
		for r, err := range cs.Resources(ctx, nil) {
			if err != nil {
				return nil, err
			}
			items = append(items, r)
		}
		out["resources"] = orEmpty(items)
		items = nil
		for r, err := range cs.ResourceTemplates(ctx, nil) {
			if err != nil {
				return nil, err
			}
			items = append(items, r)
		}
		out["resource_templates"] = orEmpty(items)
	}
	return out, nil
}

func orEmpty(items []any) []any {
	if items == nil {
		return []any{}
	}
	return items
}

// sortedJSON encodes a value with every object's keys sorted, by decoding
// the SDK's encoding into maps and encoding again.
func sortedJSON(v any) (string, error) {
	raw, err := json.Marshal(v)
	if err != nil {
		return "", fmt.Errorf("encoding the MCP answer: %w", err)
	}
	var generic any
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	if err := dec.Decode(&generic); err != nil {
		return "", fmt.Errorf("decoding the MCP answer: %w", err)
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(generic); err != nil {
		return "", fmt.Errorf("encoding the MCP answer: %w", err)
	}
	return strings.TrimSuffix(buf.String(), "\n"), nil
}
