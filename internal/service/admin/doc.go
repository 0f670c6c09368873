// Package admin is the operators' web console (toolbus console, and the one
// toolbus dev starts): the catalog with its workers, the execution log, a
// call's timeline, approvals, the audit log, turns, and discovery's
// learning from use (its switch, what was learned of a tool, its reset).
// It is one more client of the bus, through pkg/client with an operator's
// rights, and keeps no state of its own beyond its login sessions, which
// live in memory.
//
// Pages are rendered on the server with html/template, which escapes what
// tools, workers and agents wrote (all of it hostile input); a little
// JavaScript follows a call's events over server-sent events and refreshes
// the execution log. Every asset is embedded: the console reaches nothing
// but the bus.
//
// Security: an operator logs in with a token (Config.Tokens) and gets a
// session cookie (HttpOnly, SameSite=Strict). Every POST must carry the
// session's CSRF token and, when the browser sends one, an Origin of the
// console itself. Without tokens the console serves loopback clients
// only, and only when Config.LoopbackWithoutTokens says so (toolbus dev).
package admin
