// Package policy decides whether an agent's tool call is allowed, denied or
// held for approval, and prepares calls for approvals and the audit log.
//
// A [Policy] is an ordered list of [Rule]s and a required default [Effect].
// Each rule tests the tool (name pattern, namespace, tags, source kind), the
// agent and the call's argument values; the first rule whose conditions all
// hold decides, and the default decides when none does. A nil *Policy allows
// everything. Policies are written in YAML ([Parse], [Load]) or built in Go
// ([New]); both reject unknown effects, bad patterns, regular expressions
// and JSON pointers, unknown presets and unknown fields with an error that
// names the rule and the field. Everything is compiled at load, so
// [Policy.Evaluate] is cheap enough for every call; given the arguments
// read once ([ParseArguments], [Request].Parsed), as a coordinator reads
// them for everything else it does with them, it allocates nothing in the
// common case.
//
// [Policy.Visible] tells discovery and tools.list whether to show a tool to
// an agent at all: a tool is hidden only when a rule denies it regardless of
// the arguments. [Policy.Version] is a hash of the policy's meaning, which
// approvals record so that a change of policy voids them.
//
// [Policy.Check] holds a policy against a catalog's tools: a rule, tool
// pattern, namespace or tag that matches no tool (a typo fails open: the
// call it was written for runs as later rules say) and a rule that earlier
// rules shadow. [Policy.Explain] says which rule decides a call, and why
// each earlier rule did not.
//
// Built-in presets ([Presets]) are named rules for the built-in tags:
// allow_read_only, ask_destructive, deny_privileged, ask_network and
// ask_file_system.
//
// [ArgumentsDigest] hashes the canonical form of a call's arguments, so that
// an approval binds to exactly those arguments whatever their key order, and
// [Redact] blanks secrets out of arguments before they reach the audit log
// ([CompileRedaction] reads a tool's schema for it once, for many calls).
//
// The package is pure: it does no I/O and imports no NATS package.
package policy
