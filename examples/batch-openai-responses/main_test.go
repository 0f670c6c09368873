package main

import (
	"bytes"
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/toolbus/toolbus/internal/dev/testenv"
	"github.com/toolbus/toolbus/internal/service/devstack"
)

const (
	wordCount = `{"words":3,"lines":1,"characters":14}`
	digest    = "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
	refusal   = "The call was refused (invalid_arguments): arguments of demo-word_count do not match its input schema: /text: got number, want string"
)

// TestExample runs the example against the stack toolbus dev starts and
// reads, from what it prints, the response's three function_call items
// and then a function_call_output item per call, in order, with the demo
// tools' results and the refusal of the call whose arguments do not match.
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
		Type   string `json:"type"`
		CallID string `json:"call_id"`
		Output string `json:"output"`
	}
	if err := json.Unmarshal(out.Bytes(), &next); err != nil {
		t.Fatalf("the output is not a list of items: %v\n%s", err, out.String())
	}
	ids := []string{"call_K4mP7qR1sT5uV9wX3yZ6aB2c", "call_D8eF1gH4iJ7kL0mN3oP6qR9s", "call_T2uV5wX8yZ1aB4cD7eF0gH3i"}
	outputs := []string{wordCount, digest, refusal}
	if len(next) != 6 {
		t.Fatalf("%d items, want 6:\n%s", len(next), out.String())
	}
	for i, id := range ids {
		if call := next[i]; call.Type != "function_call" || call.CallID != id {
			t.Errorf("item %d is %s %q, want the function_call %q", i, call.Type, call.CallID, id)
		}
		if res := next[3+i]; res.Type != "function_call_output" || res.CallID != id || res.Output != outputs[i] {
			t.Errorf("item %d is %s %q %q, want function_call_output %q %q", 3+i, res.Type, res.CallID, res.Output, id, outputs[i])
		}
	}
}
