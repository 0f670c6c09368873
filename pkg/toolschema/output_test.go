package toolschema

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/toolbus/toolbus/pkg/messages"
)

// mcpOutput is the outputSchema Format gives a tool with the output
// schema, "" for none.
func mcpOutput(t *testing.T, schema string) string {
	t.Helper()
	got, err := Format([]messages.ToolDefinition{{Name: "a-x", OutputSchema: messages.JSON(schema)}}, MCP, Options{})
	if err != nil {
		t.Fatal(err)
	}
	var tool struct {
		OutputSchema json.RawMessage `json:"outputSchema"`
	}
	if err := json.Unmarshal(got[0], &tool); err != nil {
		t.Fatal(err)
	}
	return string(tool.OutputSchema)
}

// validates reports whether instance is valid against schema, by a JSON
// Schema validator of its own (draft 2020-12 unless "$schema" says).
func validates(t *testing.T, schema, instance string) error {
	t.Helper()
	doc, err := jsonschema.UnmarshalJSON(strings.NewReader(schema))
	if err != nil {
		t.Fatalf("schema %s: %v", schema, err)
	}
	c := jsonschema.NewCompiler()
	if err := c.AddResource("output.json", doc); err != nil {
		t.Fatal(err)
	}
	sch, err := c.Compile("output.json")
	if err != nil {
		t.Fatalf("the declared schema %s does not compile: %v", schema, err)
	}
	inst, err := jsonschema.UnmarshalJSON(strings.NewReader(instance))
	if err != nil {
		t.Fatal(err)
	}
	return sch.Validate(inst)
}

// TestMCPOutputSchema: an output schema that admits only objects is
// declared as it is; one that admits no object is declared as the object
// ForMCP wraps such values in; one that admits both, or that is not a
// schema, is not declared. Each declared schema is an object schema that
// the value the tool returns, as ForMCP carries it, conforms to, and that
// a value of another shape does not.
func TestMCPOutputSchema(t *testing.T) {
	t.Parallel()
	const pet = `{"type":"object","properties":{"name":{"type":"string"}},"required":["name"]}`
	cases := []struct {
		name, schema, want string
		// good is a value the schema admits, bad one it refuses.
		good, bad string
	}{
		{"object", pet, pet, `{"name":"Rex"}`, `{"age":3}`},
		{"object without type", `{"properties":{"a":{"type":"string"}}}`, `{"type":"object","properties":{"a":{"type":"string"}}}`, `{"a":"x"}`, `{"a":1}`},
		{"objects of a composition", `{"allOf":[` + pet + `,{"properties":{"age":{"type":"integer"}}}]}`,
			`{"type":"object","allOf":[` + pet + `,{"properties":{"age":{"type":"integer"}}}]}`, `{"name":"Rex","age":3}`, `{"name":"Rex","age":"x"}`},
		{"array", `{"type":"array","items":` + pet + `}`,
			`{"type":"object","properties":{"result":{"type":"array","items":` + pet + `}},"required":["result"],"additionalProperties":false}`,
			`[{"name":"Rex"}]`, `[{"age":3}]`},
		{"string", `{"type":"string"}`,
			`{"type":"object","properties":{"result":{"type":"string"}},"required":["result"],"additionalProperties":false}`, `"x"`, `3`},
		{"number or null", `{"type":["number","null"]}`,
			`{"type":"object","properties":{"result":{"type":["number","null"]}},"required":["result"],"additionalProperties":false}`, `null`, `"x"`},
		{"enum", `{"enum":["a","b"]}`,
			`{"type":"object","properties":{"result":{"enum":["a","b"]}},"required":["result"],"additionalProperties":false}`, `"a"`, `"c"`},
		{"array with definitions", `{"$schema":"https://json-schema.org/draft/2020-12/schema","type":"array","items":{"$ref":"#/$defs/Pet"},"$defs":{"Pet":` + pet + `}}`,
			`{"type":"object","$schema":"https://json-schema.org/draft/2020-12/schema","$defs":{"Pet":` + pet + `},"properties":{"result":{"type":"array","items":{"$ref":"#/$defs/Pet"}}},"required":["result"],"additionalProperties":false}`,
			`[{"name":"Rex"}]`, `[{"age":3}]`},
		{"recursive array", `{"type":"array","items":{"anyOf":[{"type":"string"},{"$ref":"#"}]}}`,
			`{"type":"object","properties":{"result":{"type":"array","items":{"anyOf":[{"type":"string"},{"$ref":"#/properties/result"}]}}},"required":["result"],"additionalProperties":false}`,
			`["a",["b",[]]]`, `["a",[1]]`},
		{"a definition that refers to the root", `{"type":"array","items":{"$ref":"#/definitions/node"},"definitions":{"node":{"anyOf":[{"type":"integer"},{"$ref":"#"}]}}}`,
			`{"type":"object","definitions":{"node":{"anyOf":[{"type":"integer"},{"$ref":"#/properties/result"}]}},"properties":{"result":{"type":"array","items":{"$ref":"#/definitions/node"}}},"required":["result"],"additionalProperties":false}`,
			`[1,[2,[]]]`, `[1,["x"]]`},
		{"objects or arrays", `{"type":["object","array"]}`, "", "", ""},
		{"any value", `{}`, "", "", ""},
		{"true", `true`, "", "", ""},
		{"not a schema", `[1]`, "", "", ""},
		{"not JSON", `not json`, "", "", ""},
	}
	for _, c := range cases {
		got := mcpOutput(t, c.schema)
		if got != c.want {
			t.Errorf("%s: outputSchema\n%s\nwant\n%s", c.name, got, c.want)
			continue
		}
		if c.want == "" {
			continue
		}
		var root struct {
			Type string `json:"type"`
		}
		if json.Unmarshal([]byte(got), &root) != nil || root.Type != "object" {
			t.Errorf("%s: the outputSchema is not an object schema: %s", c.name, got)
		}
		good := ForMCP(messages.JSON(c.good), false, nil)
		if err := validates(t, got, string(good.Content)); err != nil {
			t.Errorf("%s: the result %s, carried as %s, does not conform to the declared schema: %v", c.name, c.good, good.Content, err)
		}
		bad := ForMCP(messages.JSON(c.bad), false, nil)
		if validates(t, got, string(bad.Content)) == nil {
			t.Errorf("%s: the result %s, carried as %s, conforms to the declared schema", c.name, c.bad, bad.Content)
		}
	}
}

// TestMCPOutputSchemaBoundsReferences: references that fan out at every
// level are read within a bound.
func TestMCPOutputSchemaBoundsReferences(t *testing.T) {
	t.Parallel()
	schema := `{"type":"array","$defs":{"n0":{"type":"string"}`
	for i := 1; i < 60; i++ {
		schema += `,"n` + itoa(i) + `":{"anyOf":[{"$ref":"#/$defs/n` + itoa(i-1) + `"},{"$ref":"#/$defs/n` + itoa(i-1) + `"}]}`
	}
	schema += `},"items":{"$ref":"#/$defs/n59"}}`
	if got := mcpOutput(t, schema); !strings.HasPrefix(got, `{"type":"object"`) {
		t.Errorf("outputSchema %.200s", got)
	}
	schema = `{"anyOf":[{"$ref":"#"},{"$ref":"#"}]}`
	if got := mcpOutput(t, schema); got != "" {
		t.Errorf("a schema that is only references to itself is declared: %s", got)
	}
}

// TestForMCP: an object passes as it is, any other value is wrapped under
// "result"; an error result's structured content becomes a text block
// unless the result holds a JSON block.
func TestForMCP(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		in, want string
		wrapped  bool
	}{
		{`{"a":1}`, `{"a":1}`, false},
		{` {"a":1}`, `{"a":1}`, false},
		{`[1,2]`, `{"result":[1,2]}`, true},
		{`"text"`, `{"result":"text"}`, true},
		{`3.5`, `{"result":3.5}`, true},
		{`true`, `{"result":true}`, true},
		{`null`, `{"result":null}`, true},
		{``, ``, false},
	} {
		got := ForMCP(messages.JSON(c.in), false, nil)
		if string(got.Content) != c.want || got.Wrapped != c.wrapped || got.Text != nil {
			t.Errorf("%s: %+v", c.in, got)
		}
	}
	text := []messages.ContentBlock{messages.TextBlock("HTTP 404 Not Found: {}")}
	if got := ForMCP(messages.JSON(`{"status":404,"body":{}}`), true, text); got.Content != nil || !bytes.Equal(got.Text, []byte(`{"status":404,"body":{}}`)) {
		t.Errorf("an error's structured content: %+v", got)
	}
	withJSON := []messages.ContentBlock{messages.JSONBlock(messages.JSON(`[1]`))}
	if got := ForMCP(messages.JSON(`[1]`), true, withJSON); got.Content != nil || got.Text != nil {
		t.Errorf("an error's structured content beside a JSON block: %+v", got)
	}
	// A null structured result, read back from the wire: none, beside a
	// json block that has no JSON.
	null := []messages.ContentBlock{messages.JSONBlock(nil)}
	if got := ForMCP(nil, false, null); string(got.Content) != `{"result":null}` || !got.Wrapped {
		t.Errorf("a json block holding null: %+v", got)
	}
	if got := string(BlockJSON(null[0])); got != "null" {
		t.Errorf("the JSON of a json block holding null: %s", got)
	}
	if got := ForMCP(nil, true, null); got.Content != nil || got.Text != nil {
		t.Errorf("an error with a json block holding null: %+v", got)
	}
	if got := ForMCP(nil, false, text); got.Content != nil || got.Text != nil {
		t.Errorf("no structured content beside a text: %+v", got)
	}
}
