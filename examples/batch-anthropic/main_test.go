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
// reads, from what it prints, the assistant message and a user message of
// a tool_result block per tool_use block, in order, with the demo tools'
// results and the refusal, marked is_error, of the call whose input does
// not match.
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
		Role    string `json:"role"`
		Content []struct {
			Type      string `json:"type"`
			ID        string `json:"id"`
			ToolUseID string `json:"tool_use_id"`
			IsError   bool   `json:"is_error"`
			Content   []struct {
				Type string `json:"type"`
				Text string `json:"text"`
			} `json:"content"`
		} `json:"content"`
	}
	if err := json.Unmarshal(out.Bytes(), &next); err != nil {
		t.Fatalf("the output is not a list of messages: %v\n%s", err, out.String())
	}
	if len(next) != 2 || next[0].Role != "assistant" || next[1].Role != "user" || len(next[0].Content) != 4 || len(next[1].Content) != 3 {
		t.Fatalf("want the assistant message with 4 blocks and a user message with 3:\n%s", out.String())
	}
	ids := []string{"toolu_01G63w36wc36rw371279rw3", "toolu_01H72x27xd27sx280168sx2", "toolu_01J81y18ye18ty199057ty1"}
	texts := []string{wordCount, digest, refusal}
	for i, id := range ids {
		if use := next[0].Content[1+i]; use.Type != "tool_use" || use.ID != id {
			t.Errorf("assistant block %d is %s %q, want the tool_use %q", 1+i, use.Type, use.ID, id)
		}
		res := next[1].Content[i]
		if res.Type != "tool_result" || res.ToolUseID != id || res.IsError != (i == 2) || len(res.Content) != 1 || res.Content[0].Type != "text" || res.Content[0].Text != texts[i] {
			t.Errorf("result %d is %+v, want tool_result %q, is_error %v, text %q", i, res, id, i == 2, texts[i])
		}
	}
}
