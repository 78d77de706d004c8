package mcp

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"github.com/stepwise-run/stepwise/internal/media"

	"github.com/stepwise-run/stepwise/internal/session"
	"github.com/stepwise-run/stepwise/pkg/agent"
)

// Source is an agent's MCP tool source: its servers' tools, listed through
// a per-worker catalog and called over a new connection per request.
type Source struct {
	name          string
	servers       []Server
	catalog       *Catalog
	resourceTools bool
	log           *slog.Logger
}

var (
	_ agent.ToolSource         = (*Source)(nil)
	_ agent.DeclaredToolSource = (*Source)(nil)
	_ agent.SourceTaskPoller   = (*Source)(nil)
)

// SourceOptions configure a Source.
type SourceOptions struct {
	// Name is the stable source name stored with every call of its tools.
	Name string
	// Servers are listed and offered in this order.
	Servers []Server
	// ResourceAndPromptTools offers the three resource and prompt tools;
	// enable them on one source of an agent.
	ResourceAndPromptTools bool
	// Log gets the source's warnings: servers that cannot be listed, name
	// clashes, declarations it ignores.
	Log *slog.Logger
	// MediaStore keeps the image content of successful results, inside
	// the tool Step, and the result carries their references; give it the
	// store the agent's runner reads. Without one, a result's images show
	// only as "[image n]" in its text.
	MediaStore media.Store
}

// NewSource returns a source, refusing servers without a unique name or a
// transport.
func NewSource(opts SourceOptions) (*Source, error) {
	if opts.Name == "" {
		return nil, errors.New("an MCP tool source needs a source name")
	}
	seen := map[string]bool{}
	for i, s := range opts.Servers {
		switch {
		case s.Name == "":
			return nil, fmt.Errorf("MCP tool source %s: servers[%d] has no name", opts.Name, i)
		case seen[s.Name]:
			return nil, fmt.Errorf("MCP tool source %s: two servers are named %s", opts.Name, s.Name)
		case s.Connect == nil:
			return nil, fmt.Errorf("MCP tool source %s: server %s has no transport", opts.Name, s.Name)
		}
		seen[s.Name] = true
	}
	log := opts.Log
	if log == nil {
		log = slog.Default()
	}
	log = log.With("tool_source", opts.Name)
	servers := slices.Clone(opts.Servers)
	for i := range servers {
		servers[i].media = opts.MediaStore
	}
	return &Source{
		name: opts.Name, servers: servers, catalog: NewCatalog(servers, log),
		resourceTools: opts.ResourceAndPromptTools, log: log,
	}, nil
}

// SourceName is the stable source name.
func (s *Source) SourceName() string { return s.name }

// reference is what a stored call keeps to reach its tool without a
// listing: the server and the tool's MCP name, and whether it is a read,
// which decides how a lost task is recorded.
type reference struct {
	Server string `json:"server"`
	Tool   string `json:"tool"`
	// Builtin names a resource or prompt tool of the source itself.
	Builtin string `json:"builtin,omitempty"`
}

// ListTools offers every server's cached tools with their policies, then
// the resource and prompt tools when enabled.
func (s *Source) ListTools(ctx context.Context, policies agent.SourcePolicies) ([]agent.SourceTool, error) {
	if deadline, ok := ctx.Deadline(); ok {
		// Stop waiting for slow servers a little before the caller does,
		// so the others' tools reach it in time.
		margin := min(time.Until(deadline)/10, 500*time.Millisecond)
		var cancel context.CancelFunc
		ctx, cancel = context.WithDeadline(ctx, deadline.Add(-margin))
		defer cancel()
	}
	var out []agent.SourceTool
	for _, t := range s.catalog.Tools(ctx) {
		server, _ := s.server(t.Server)
		policy := ToolPolicy(t.Annotations, server.TrustAnnotations, policies.DefaultToolEffect, policies.Policy(t.Name))
		if server.TrustAnnotations && invalidDeclaration(t.Annotations.Meta) {
			s.log.Warn("an MCP tool declares an effect outside read, idempotent_write and non_idempotent_write; it gets the default effect",
				"tool", t.Name, "effect", t.Annotations.Meta[EffectMetaKey])
		}
		_, _, declared := declaration(t.Annotations.Meta)
		ref, _ := json.Marshal(reference{Server: t.Server, Tool: t.MCPName})
		out = append(out, agent.SourceTool{
			ToolDefinition: agent.ToolDefinition{Name: t.Name, Description: t.Description, Parameters: t.InputSchema},
			Policy:         policy,
			Reference:      string(ref),
			Ordered:        server.TrustAnnotations && declared && policy.Effect != agent.EffectRead,
		})
	}
	if s.resourceTools && len(s.servers) > 0 {
		out = append(out, s.resourceAndPromptTools(policies)...)
	}
	return out, nil
}

// invalidDeclaration reports an effect key with a value outside the
// declared effects.
func invalidDeclaration(meta map[string]any) bool {
	_, present := meta[EffectMetaKey]
	_, _, ok := declaration(meta)
	return present && !ok
}

func (s *Source) server(name string) (Server, bool) {
	for _, srv := range s.servers {
		if srv.Name == name {
			return srv, true
		}
	}
	return Server{}, false
}

// CallTool runs one call of a listed tool on its server.
func (s *Source) CallTool(ctx context.Context, call agent.ToolContext, tool agent.SourceCall) (agent.ToolOutput, error) {
	var ref reference
	if err := json.Unmarshal([]byte(tool.Reference), &ref); err != nil {
		return agent.ToolOutput{}, fmt.Errorf("MCP tool %s: the stored reference is not JSON: %w", tool.Name, err)
	}
	if ref.Builtin != "" {
		text, err := s.callResourceTool(ctx, ref.Builtin, tool)
		return agent.ToolOutput{Output: text}, err
	}
	server, ok := s.server(ref.Server)
	if !ok {
		return agent.ToolOutput{}, agent.Failed("%s: MCP server %s is not configured on this worker", session.ToolCallNotRunPrefix, ref.Server)
	}
	return callTool(ctx, server, call, ref.Tool, tool)
}

// ConnectionAttempts is how many times a request tries to connect before
// it is recorded as never sent.
const ConnectionAttempts = 3

// DefaultRequestTimeout bounds one tools/call.
const DefaultRequestTimeout = 10 * time.Minute
