// Package toolformat reads the tool calls of an LLM provider's response
// and renders the calls' results as that provider's next input, in the
// five formats whose tool schemas pkg/toolschema renders: OpenAI Chat
// Completions and Responses, Anthropic Messages, Gemini and MCP.
//
// Read takes the calls from the JSON an agent has (the calls themselves,
// or the message or response that holds them) and checks them as a
// batch of one model iteration; Render turns each call's outcome (its
// result, its refusal, the approval it waits for, or that it is still
// running) into the messages the provider takes: tool messages, tool
// result blocks, function responses or CallToolResults, with the media
// each provider reads where it reads them. Fit renders them within a
// size.
//
// The coordinator's calls.submit_batch and calls.results use this
// package (docs/protocol.md, "One model iteration in one request"), so a
// Go agent that runs the calls itself, with client.Call, renders the
// same bytes as those endpoints do.
//
// The package is pure: plain values in, plain values out; it imports no
// NATS package.
package toolformat
