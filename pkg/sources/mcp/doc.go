// Package mcp serves the tools of an MCP server through a Toolbus worker.
//
// A [Source] is a worker.Source: plug it into worker.Namespace.Sources and
// the worker registers the server's tools in the catalog and routes their
// calls to the server.
//
//	src, err := mcp.New(mcp.Config{
//		Name:      "everything",
//		Namespace: "everything",
//		Command:   "mcp-server-everything",
//		Args:      []string{"stdio"},
//	})
//	w.Serve(worker.Namespace{Name: "everything", Sources: []worker.Source{src}})
//
// Three transports are supported: stdio (the worker runs the server as a
// child process), SSE and streamable HTTP (the worker connects to a URL,
// sending the configured headers).
//
// # Processes
//
// A stdio server does not inherit the worker's environment, which holds the
// worker's own secrets (TOOLBUS_PASSWORD, tokens of other sources). As the
// official MCP SDKs do, it gets only the variables [InheritedEnv] lists —
// HOME, LOGNAME, PATH, SHELL, TERM and USER (on Windows APPDATA, HOMEDRIVE,
// HOMEPATH, LOCALAPPDATA, PATH, PATHEXT, PROCESSOR_ARCHITECTURE,
// PROGRAMFILES, SYSTEMDRIVE, SYSTEMROOT, TEMP, USERNAME and USERPROFILE) —
// where the worker has them, those named in Config.InheritEnv, and
// Config.Env's entries, which win.
//
// A stdio server runs in a process group of its own, exactly one process
// per source and worker. When it exits, its group is killed — so that no
// child it started outlives it — and it is started again after a backoff
// that doubles while it keeps dying within a minute of its start. Stop
// closes the server's standard input, gives it two seconds to exit, then
// terminates its group and, two seconds later, kills it; Stop returns once
// the server is gone. On Linux the server is also killed when the worker
// dies. A process that leaves its group (setsid, a daemon) is beyond this
// reach.
//
// A network server that cannot be reached, or does not initialize, when
// the source starts does not fail the start: Start returns no tools and
// the source keeps connecting in the background with the same backoff
// (MinBackoff 250ms doubling to MaxBackoff 30s), so that the worker serves
// its other sources meanwhile; the server's tools are reported through
// update once it answers. A stdio server that cannot start fails Start, as
// its command is the worker's own configuration.
//
// Network transports are reconnected with the same backoff when a request
// fails at the transport level, a ping goes unanswered, or the server no
// longer knows the session (it restarted). Calls that arrive while the
// server is away wait for it, UnavailableWait at most, and are then handed
// back for another attempt.
//
// What a server sends is bounded: one message (a line over stdio, an SSE
// event, a JSON response body) may hold 32 MiB. A larger one is not read
// and the session goes on: the request it answers fails at once — a call
// with a tool error that names the bound, not retried, since the same call
// would get the same result — and a larger request or notification of the
// server is dropped; only one whose request cannot be told (a response
// without an ID) ends the session as a broken connection does. A tool list
// may hold 10,000 tools across its pages. Connecting, initializing and listing are bounded by
// ConnectTimeout.
//
// # Tools
//
// The tools of the server are listed, following every page, when the
// source connects and whenever the server sends
// notifications/tools/list_changed; a list that differs from the last
// replaces the source's tools in the catalog. A tool's name becomes its method through
// [sources.Methods] and is kept in ToolDefinition.OriginalName when the two
// differ. Annotations the server sets to true become tags: readOnlyHint is
// read_only, destructiveHint destructive (unless the tool is also read-only),
// openWorldHint network. Hints the server leaves out add no tag.
// The hints also set ToolDefinition.Delivery: at most once for
// idempotentHint false, or destructiveHint true without idempotentHint;
// at least once for readOnlyHint true, idempotentHint true, and a tool
// without hints (MCP's defaults, by which such a tool is destructive, are
// not applied).
//
// # Calls
//
// A call carries a progress token; the server's notifications/progress for
// it reach the call's watchers through worker.ReportProgress. When the
// call's context ends — cancelled, past its deadline, or the worker
// stopping — the server is sent notifications/cancelled for the request.
// Result content maps to content blocks one for one (text, image, audio,
// embedded text or blob resource, resource link), each with its
// annotations (audience, priority, lastModified) in
// messages.ContentBlock.Annotations; structuredContent maps to the
// structured content, isError to Result.IsError. An error answer of the
// server is the tool's failure; a failure of the transport (the server died
// mid-call, the connection broke) hands the call back with worker.Retry
// while the source reconnects.
//
// # Client capabilities
//
// The worker declares no client capabilities in its initialize request
// but roots, and that only when Config.Roots lists directories: then it
// answers roots/list with them, as file:// URIs. It never declares sampling
// (a server cannot ask the agent's model for a completion) nor elicitation
// (it cannot ask the user a question mid-call). A server that needs one of
// them may leave out the tools that use it, or fail their calls; such
// tools are not served through Toolbus.
//
// The source speaks MCP protocol version 2025-11-25, the last with the
// initialize handshake, on every transport, so that explicit cancellation
// and tool-list notifications work the same everywhere.
package mcp
