package mcpfront_test

import (
	"testing"

	"github.com/toolbus/toolbus/internal/testenv"
	"github.com/toolbus/toolbus/pkg/client"
	"github.com/toolbus/toolbus/pkg/messages"
)

// BenchmarkCallThroughTheFront measures one tools/call of a demo tool
// through the MCP front over streamable HTTP against the same call made
// with pkg/client, on the same stack, one call at a time.
//
//	go test -run x -bench CallThroughTheFront -count 5 ./internal/mcpfront
func BenchmarkCallThroughTheFront(b *testing.B) {
	s := startStack(b)
	_, url := s.front(b)
	ctx := testenv.Context(b)
	b.Run("mcp", func(b *testing.B) {
		c, _ := connect(b, url, bearer(), legacySessions())
		args := map[string]any{"text": "x"}
		for b.Loop() {
			res, err := callTool(ctx, c, "demo-echo", args, nil)
			if err != nil || res.IsError {
				b.Fatalf("call: %+v %v", res, err)
			}
		}
	})
	b.Run("sdk", func(b *testing.B) {
		c := testenv.Client(b, s.url, client.Options{Agent: "analyst"})
		args := messages.JSON(`{"text":"x"}`)
		for b.Loop() {
			res, err := c.Call(ctx, "demo-echo", args, client.WithTurn("bench-sdk"))
			if err != nil || res.IsError {
				b.Fatalf("call: %+v %v", res, err)
			}
		}
	})
}
