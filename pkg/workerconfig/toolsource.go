package workerconfig

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

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
