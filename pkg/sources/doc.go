// Package sources holds what the tool sources of a worker share — today the
// mapping of the names that MCP servers and OpenAPI specs give their tools
// to method names that Toolbus can serve.
//
// The sources themselves are in the subpackages: [github.com/toolbus/toolbus/pkg/sources/mcp]
// serves the tools of an MCP server, [github.com/toolbus/toolbus/pkg/sources/openapi]
// the operations of an HTTP API described by an OpenAPI 3 document. Both
// implement worker.Source and are plugged into a worker through
// worker.Namespace.Sources.
package sources
