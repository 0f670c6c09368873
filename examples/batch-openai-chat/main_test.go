package main

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/toolbus/toolbus/internal/dev/testenv"
	"github.com/toolbus/toolbus/internal/service/devstack"
)

// TestExample runs the example against the stack toolbus dev starts and
// reads, from what it prints, the assistant message and a tool message
// per tool call, in order, with the demo tools' results and the refusal
// of the call whose arguments were cut short.
func TestExample(t *testing.T) {
	ctx := testenv.Context(t)
	stack, err := devstack.Start(ctx, devstack.Config{DataDir: t.TempDir(), Logger: testenv.Logger(t)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		stopCtx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = stack.Stop(stopCtx)
	})
	var out bytes.Buffer
	if err := run(ctx, stack.URL(), "dev", "", &out); err != nil {
		t.Fatal(err)
	}
	var next []struct {
		Role       string `json:"role"`
		ToolCallID string `json:"tool_call_id"`
		Content    any    `json:"content"`
	}
	if err := json.Unmarshal(out.Bytes(), &next); err != nil {
		t.Fatalf("the output is not a list of messages: %v\n%s", err, out.String())
	}
	want := []struct{ role, id, content string }{
		{"assistant", "", ""},
		{"tool", "call_W1nT4kq8ZcLm2Rv7YdHe3PaX", `{"words":3,"lines":1,"characters":14}`},
		{"tool", "call_S2hA5bN9XyQw4Ez6TgUj8KoM", "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"},
		{"tool", "call_B3dF6cV0RtYu7Io1PaSd4FgH", "The call was refused (invalid_arguments): arguments of demo-word_count are not JSON"},
	}
	if len(next) != len(want) {
		t.Fatalf("%d messages, want %d:\n%s", len(next), len(want), out.String())
	}
	for i, w := range want {
		m := next[i]
		content, _ := m.Content.(string)
		if m.Role != w.role || m.ToolCallID != w.id || !strings.HasPrefix(content, w.content) {
			t.Errorf("message %d is %s %q %q, want %s %q %q…", i, m.Role, m.ToolCallID, content, w.role, w.id, w.content)
		}
	}
}
