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
// reads, from what it prints, a JSON-RPC response per tools/call request,
// with the request's ID and the CallToolResult of the demo tool, or the
// refusal, marked isError, of the call whose arguments do not match.
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
		JSONRPC string          `json:"jsonrpc"`
		ID      json.RawMessage `json:"id"`
		Result  struct {
			Content []struct {
				Type string `json:"type"`
				Text string `json:"text"`
			} `json:"content"`
			IsError bool `json:"isError"`
		} `json:"result"`
	}
	if err := json.Unmarshal(out.Bytes(), &next); err != nil {
		t.Fatalf("the output is not a list of responses: %v\n%s", err, out.String())
	}
	ids := []string{"21", "22", `"wc-3"`}
	texts := []string{wordCount, digest, refusal}
	if len(next) != len(ids) {
		t.Fatalf("%d responses, want %d:\n%s", len(next), len(ids), out.String())
	}
	for i, id := range ids {
		r := next[i]
		if r.JSONRPC != "2.0" || string(r.ID) != id || r.Result.IsError != (i == 2) || len(r.Result.Content) != 1 || r.Result.Content[0].Text != texts[i] {
			t.Errorf("response %d is %+v, want id %s, isError %v, text %q", i, r, id, i == 2, texts[i])
		}
	}
}
