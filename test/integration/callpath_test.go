package integration

import (
	"encoding/json"
	"errors"
	"testing"

	"github.com/toolbus/toolbus/internal/dev/testenv"
	"github.com/toolbus/toolbus/internal/service/demo"
	"github.com/toolbus/toolbus/pkg/client"
	"github.com/toolbus/toolbus/pkg/messages"
	"github.com/toolbus/toolbus/pkg/worker"
)

func TestCallRoundTrip(t *testing.T) {
	t.Parallel()
	srv := testenv.Server(t)
	testenv.Coordinator(t, srv.URL())
	testenv.Worker(t, srv.URL(), worker.Config{}, worker.Namespace{Name: demo.Name, Tools: demo.Tools()})
	for _, codec := range []messages.Codec{messages.Msgpack, messages.JSONCodec} {
		t.Run(codec.String(), func(t *testing.T) {
			c := testenv.Client(t, srv.URL(), client.Options{Codec: codec, Agent: "tester"})
			ctx := testenv.Context(t)
			res, err := c.Call(ctx, "demo-word_count", map[string]any{"text": "one two three\nfour"})
			if err != nil {
				t.Fatalf("call: %v", err)
			}
			if res.Status != messages.StateCompleted || res.IsError {
				t.Fatalf("result %+v, want completed", res)
			}
			var wc demo.WordCount
			if err := json.Unmarshal(res.StructuredContent, &wc); err != nil {
				t.Fatalf("structured content %s: %v", res.StructuredContent, err)
			}
			if wc != (demo.WordCount{Words: 4, Lines: 2, Characters: 18}) {
				t.Fatalf("word count %+v", wc)
			}
			if res.Attempt != 1 || res.Worker == "" {
				t.Fatalf("attempt %d worker %q", res.Attempt, res.Worker)
			}
			_, err = c.Call(ctx, "demo-nope", map[string]any{})
			if !errors.Is(err, messages.ErrToolNotFound) {
				t.Fatalf("unknown tool: %v", err)
			}
		})
	}
}
