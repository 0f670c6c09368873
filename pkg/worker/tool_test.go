package worker_test

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/toolbus/toolbus/pkg/messages"
	"github.com/toolbus/toolbus/pkg/worker"
)

// TestFuncOutputSchemas: a Go tool whose result is a struct, a slice, a map
// or a number declares the schema of that value, which the structured
// content it answers with conforms to (a nil slice is empty, not null); a
// string, a *Result and raw JSON declare none.
func TestFuncOutputSchemas(t *testing.T) {
	t.Parallel()
	type pet struct {
		Name string `json:"name"`
	}
	cases := []struct {
		tool       worker.Tool
		schema     string
		structured string
	}{
		{worker.Func("one", "", func(context.Context, struct{}) (pet, error) { return pet{"Rex"}, nil }),
			`{"properties":{"name":{"type":"string"}},"additionalProperties":false,"type":"object","required":["name"]}`, `{"name":"Rex"}`},
		{worker.Func("list", "", func(context.Context, struct{}) ([]pet, error) { return []pet{{"Rex"}}, nil }),
			`{"items":{"properties":{"name":{"type":"string"}},"additionalProperties":false,"type":"object","required":["name"]},"type":"array"}`, `[{"name":"Rex"}]`},
		{worker.Func("none", "", func(context.Context, struct{}) ([]pet, error) { return nil, nil }),
			`{"items":{"properties":{"name":{"type":"string"}},"additionalProperties":false,"type":"object","required":["name"]},"type":"array"}`, `[]`},
		{worker.Func("counts", "", func(context.Context, struct{}) (map[string]int, error) { return nil, nil }),
			`{"additionalProperties":{"type":"integer"},"type":"object"}`, `{}`},
		{worker.Func("count", "", func(context.Context, struct{}) (int, error) { return 2, nil }), `{"type":"integer"}`, `2`},
		{worker.Func("ok", "", func(context.Context, struct{}) (bool, error) { return true, nil }), `{"type":"boolean"}`, `true`},
		{worker.Func("text", "", func(context.Context, struct{}) (string, error) { return "hi", nil }), ``, ``},
		{worker.Func("raw", "", func(context.Context, struct{}) (messages.JSON, error) { return messages.JSON(`[1]`), nil }), ``, `[1]`},
		{worker.Func("result", "", func(context.Context, struct{}) (*worker.Result, error) { return worker.Text("hi"), nil }), ``, ``},
	}
	for _, c := range cases {
		def := c.tool.Definition
		if string(def.OutputSchema) != c.schema {
			t.Errorf("%s: output schema %s, want %s", def.Method, def.OutputSchema, c.schema)
		}
		res, err := c.tool.Handler.Handle(context.Background(), &worker.Call{Arguments: messages.JSON(`{}`)})
		if err != nil {
			t.Fatal(err)
		}
		if string(res.StructuredContent) != c.structured {
			t.Errorf("%s: structured content %s, want %s", def.Method, res.StructuredContent, c.structured)
		}
		if c.structured != "" && !json.Valid(res.StructuredContent) {
			t.Errorf("%s: %s is not JSON", def.Method, res.StructuredContent)
		}
	}
}
