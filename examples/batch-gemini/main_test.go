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
// reads, from what it prints, the model's content and a user content of a
// functionResponse part per functionCall part, in order, with the demo
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
		Role  string `json:"role"`
		Parts []struct {
			FunctionCall *struct {
				Name string `json:"name"`
			} `json:"functionCall"`
			FunctionResponse *struct {
				Name     string `json:"name"`
				Response struct {
					Output json.RawMessage `json:"output"`
					Error  string          `json:"error"`
				} `json:"response"`
			} `json:"functionResponse"`
		} `json:"parts"`
	}
	if err := json.Unmarshal(out.Bytes(), &next); err != nil {
		t.Fatalf("the output is not a list of contents: %v\n%s", err, out.String())
	}
	if len(next) != 2 || next[0].Role != "model" || next[1].Role != "user" || len(next[0].Parts) != 3 || len(next[1].Parts) != 3 {
		t.Fatalf("want the model content and a user content, 3 parts each:\n%s", out.String())
	}
	names := []string{"demo-word_count", "demo-sha256", "demo-word_count"}
	outputs := []string{wordCount, `"` + digest + `"`, ""}
	for i, name := range names {
		if call := next[0].Parts[i].FunctionCall; call == nil || call.Name != name {
			t.Errorf("model part %d is not a functionCall of %s", i, name)
		}
		res := next[1].Parts[i].FunctionResponse
		if res == nil || res.Name != name {
			t.Errorf("user part %d is not a functionResponse of %s", i, name)
			continue
		}
		if i == 2 {
			if res.Response.Error != refusal {
				t.Errorf("response %d error = %q, want %q", i, res.Response.Error, refusal)
			}
			continue
		}
		var got, want any
		_ = json.Unmarshal(res.Response.Output, &got)
		_ = json.Unmarshal([]byte(outputs[i]), &want)
		if gotJSON, wantJSON := mustJSON(t, got), mustJSON(t, want); gotJSON != wantJSON {
			t.Errorf("response %d output = %s, want %s", i, gotJSON, wantJSON)
		}
	}
}

func mustJSON(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
