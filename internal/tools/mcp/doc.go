// Package mcp turns the tools of MCP servers, an Agent's ToolSources, into
// tools of its sessions: their names, their effect classes and approvals,
// and the Dex MCP conventions that servers built for them carry in _meta.
package mcp
