// Package mcpfront serves Toolbus to MCP clients: a stateless front that
// answers MCP over streamable HTTP or stdio and is one more client of the
// bus through pkg/client. tools/list is the agent's tools.list for the
// session's turn, in the mcp format; tools/call is a durable Toolbus call
// whose progress events become progress notifications and whose result's
// content blocks pass through unchanged.
//
// Nothing about a session is kept in the process: an HTTP session's ID
// carries its turn ("<random>.<turn>"), and the turn's state (discovery
// pages, activations, calls) is the coordinator's, in JetStream. So a
// session that lands on another front, or on a restarted one, carries on.
// docs/mcp.md describes the mapping.
package mcpfront
