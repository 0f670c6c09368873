// Package toolschema renders tool definitions as the tool schemas that LLM
// providers take: OpenAI Chat Completions and Responses, Anthropic
// Messages, Gemini function declarations and MCP tools.
//
// Each provider accepts a different subset of JSON Schema, so every input
// schema is sanitised for its target (see Format); the coordinator still
// validates the model's arguments against the source schema, so a
// sanitised schema may be looser than its source but never means
// something else. Output is deterministic — tools sorted by name, object
// keys in a fixed or source order, properties in source order — so that
// the same tool set yields the same bytes and provider prompt caches hit.
//
// Think augmentation (Options.Think, or a tool's Metadata.ThinkAugment)
// adds a required "thought" string property, first among the properties,
// in which the model reasons step by step before it fills in the
// arguments. Its name never collides with a real parameter ("thought_",
// "thought__"… when needed; see ThoughtProperty), and StripThought removes
// it from the arguments before they are validated and executed.
//
// The package is pure: it works on messages.ToolDefinition values and
// imports no NATS package.
package toolschema
