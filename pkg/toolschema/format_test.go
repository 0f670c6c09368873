package toolschema

import (
	"bytes"
	"encoding/json"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/toolbus/toolbus/pkg/messages"
)

func weatherTool() messages.ToolDefinition {
	return messages.ToolDefinition{
		Name:         "weather-forecast",
		Namespace:    "weather",
		Method:       "forecast",
		Title:        "Forecast",
		Description:  "Forecast for a city.",
		InputSchema:  messages.JSON(`{"$schema":"https://json-schema.org/draft/2020-12/schema","type":"object","properties":{"city":{"type":"string"},"days":{"type":"integer","default":3}},"required":["city"]}`),
		OutputSchema: messages.JSON(`{"type":"object","properties":{"summary":{"type":"string"}}}`),
		Metadata:     messages.ToolMetadata{Tags: []string{messages.TagReadOnly, messages.TagNetwork}},
	}
}

func TestFormatWrappers(t *testing.T) {
	cases := []struct {
		format string
		opts   Options
		want   string
	}{
		{OpenAIChat, Options{}, `{"type":"function","function":{"name":"weather-forecast","description":"Forecast for a city.","parameters":{"type":"object","properties":{"city":{"type":"string"},"days":{"type":"integer","default":3}},"required":["city"]}}}`},
		{OpenAIResponses, Options{}, `{"type":"function","name":"weather-forecast","description":"Forecast for a city.","parameters":{"type":"object","properties":{"city":{"type":"string"},"days":{"type":"integer","default":3}},"required":["city"]},"strict":false}`},
		{Anthropic, Options{}, `{"name":"weather-forecast","description":"Forecast for a city.","input_schema":{"type":"object","properties":{"city":{"type":"string"},"days":{"type":"integer","default":3}},"required":["city"]}}`},
		{Gemini, Options{}, `{"name":"weather-forecast","description":"Forecast for a city.","parameters":{"type":"OBJECT","properties":{"city":{"type":"STRING"},"days":{"type":"INTEGER"}},"propertyOrdering":["city","days"],"required":["city"]}}`},
		{MCP, Options{}, `{"name":"weather-forecast","title":"Forecast","description":"Forecast for a city.","inputSchema":{"$schema":"https://json-schema.org/draft/2020-12/schema","type":"object","properties":{"city":{"type":"string"},"days":{"type":"integer","default":3}},"required":["city"]},"outputSchema":{"type":"object","properties":{"summary":{"type":"string"}}},"annotations":{"readOnlyHint":true,"openWorldHint":true}}`},
		// "days" is optional, so strict mode would change the schema's meaning.
		{OpenAIChat, Options{Strict: true}, `{"type":"function","function":{"name":"weather-forecast","description":"Forecast for a city.","parameters":{"type":"object","properties":{"city":{"type":"string"},"days":{"type":"integer","default":3}},"required":["city"]}}}`},
		{Anthropic, Options{Think: true}, `{"name":"weather-forecast","description":"Forecast for a city.","input_schema":{"type":"object","properties":{"thought":{"type":"string","description":"Step-by-step reasoning for this call."},"city":{"type":"string"},"days":{"type":"integer","default":3}},"required":["thought","city"]}}`},
		{Gemini, Options{Think: true}, `{"name":"weather-forecast","description":"Forecast for a city.","parameters":{"type":"OBJECT","properties":{"thought":{"type":"STRING","description":"Step-by-step reasoning for this call."},"city":{"type":"STRING"},"days":{"type":"INTEGER"}},"propertyOrdering":["thought","city","days"],"required":["thought","city"]}}`},
	}
	for _, c := range cases {
		got, err := Format([]messages.ToolDefinition{weatherTool()}, c.format, c.opts)
		if err != nil {
			t.Errorf("%s %+v: %v", c.format, c.opts, err)
			continue
		}
		if len(got) != 1 || string(got[0]) != c.want {
			t.Errorf("%s %+v:\n got %s\nwant %s", c.format, c.opts, got, c.want)
		}
	}
}

func TestStrict(t *testing.T) {
	cases := []struct {
		name, schema string
		strict       bool
		want         string
	}{
		{
			name:   "all required",
			schema: `{"type":"object","properties":{"a":{"type":"string","default":"x"},"b":{"type":["integer","null"]},"c":{"type":"object","properties":{"d":{"type":"string","format":"date"}},"required":["d"]}},"required":["a","b","c"]}`,
			strict: true,
			want:   `{"type":"object","properties":{"a":{"type":"string"},"b":{"type":["integer","null"]},"c":{"type":"object","properties":{"d":{"type":"string","format":"date"}},"required":["d"],"additionalProperties":false}},"required":["a","b","c"],"additionalProperties":false}`,
		},
		{
			name:   "no parameters",
			schema: `{"type":"object"}`,
			strict: true,
			want:   `{"type":"object","properties":{},"additionalProperties":false}`,
		},
		{
			name:   "recursive definitions",
			schema: `{"type":"object","properties":{"n":{"$ref":"#/$defs/N"}},"required":["n"],"$defs":{"N":{"type":"object","properties":{"k":{"type":"array","items":{"$ref":"#/$defs/N"}}},"required":["k"]}}}`,
			strict: true,
			want:   `{"type":"object","properties":{"n":{"$ref":"#/$defs/N"}},"required":["n"],"$defs":{"N":{"type":"object","properties":{"k":{"type":"array","items":{"$ref":"#/$defs/N"}}},"required":["k"],"additionalProperties":false}},"additionalProperties":false}`,
		},
		{name: "optional property", schema: `{"type":"object","properties":{"a":{"type":"string"}}}`},
		{name: "unsupported keyword", schema: `{"type":"object","properties":{"a":{"type":"string","minLength":1}},"required":["a"]}`},
		{name: "unsupported format", schema: `{"type":"object","properties":{"a":{"type":"string","format":"uri"}},"required":["a"]}`},
		{name: "free-form object", schema: `{"type":"object","properties":{"a":{"type":"object"}},"required":["a"]}`},
		{name: "open object", schema: `{"type":"object","properties":{"a":{"type":"string"}},"required":["a"],"additionalProperties":true}`},
		{name: "oneOf", schema: `{"type":"object","properties":{"a":{"oneOf":[{"type":"string"},{"type":"integer"}]}},"required":["a"]}`},
		{name: "too deep", schema: nest(6)},
	}
	for _, c := range cases {
		def := messages.ToolDefinition{Name: "t-x", Namespace: "t", Method: "x", InputSchema: messages.JSON(c.schema)}
		got, err := Format([]messages.ToolDefinition{def}, OpenAIResponses, Options{Strict: true})
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		var tool struct {
			Strict     bool            `json:"strict"`
			Parameters json.RawMessage `json:"parameters"`
		}
		if err := json.Unmarshal(got[0], &tool); err != nil {
			t.Fatal(err)
		}
		if tool.Strict != c.strict {
			t.Errorf("%s: strict = %v, want %v", c.name, tool.Strict, c.strict)
		}
		want := c.want
		if !c.strict {
			plain, _ := Sanitize([]byte(c.schema), OpenAIResponses)
			want = string(plain)
		}
		if string(tool.Parameters) != want {
			t.Errorf("%s: parameters\n got %s\nwant %s", c.name, tool.Parameters, want)
		}
	}
	if nest(5) == nest(6) {
		t.Fatal("nest is broken")
	}
	got, _ := Format([]messages.ToolDefinition{{Name: "t-x", InputSchema: messages.JSON(nest(5))}}, OpenAIChat, Options{Strict: true})
	if !bytes.Contains(got[0], []byte(`"strict":true`)) {
		t.Errorf("five levels of objects are not strict: %s", got[0])
	}
}

// nest returns an object schema with depth levels of nested objects.
func nest(depth int) string {
	s := `{"type":"string"}`
	for i := 0; i < depth; i++ {
		s = `{"type":"object","properties":{"a":` + s + `},"required":["a"]}`
	}
	return s
}

func TestFormatSortsAndIsDeterministic(t *testing.T) {
	var defs []messages.ToolDefinition
	for _, n := range []string{"b-two", "a-one", "c-three", "a-zero", "b_b-x"} {
		defs = append(defs, messages.ToolDefinition{
			Name:        n,
			Description: "Tool " + n,
			InputSchema: messages.JSON(`{"type":"object","properties":{"zeta":{"type":"string"},"alpha":{"type":"integer"},"mid":{"type":"object","properties":{"y":{"type":"string"},"x":{"type":"string"}}}}}`),
		})
	}
	for _, format := range Formats() {
		first, err := Tools(defs, format, Options{Think: true})
		if err != nil {
			t.Fatal(err)
		}
		for i := 0; i < 20; i++ {
			shuffled := append([]messages.ToolDefinition(nil), defs...)
			rand.Shuffle(len(shuffled), func(i, j int) { shuffled[i], shuffled[j] = shuffled[j], shuffled[i] })
			again, _ := Tools(shuffled, format, Options{Think: true})
			if !bytes.Equal(first, again) {
				t.Fatalf("%s: output depends on input order:\n%s\n%s", format, first, again)
			}
		}
		s := string(first)
		if a, b, c := strings.Index(s, `"a-one"`), strings.Index(s, `"a-zero"`), strings.Index(s, `"b-two"`); !(a < b && b < c) {
			t.Errorf("%s: tools not sorted by name: %s", format, s)
		}
		if z, a := strings.Index(s, `"zeta"`), strings.Index(s, `"alpha"`); z > a {
			t.Errorf("%s: property order not kept: %s", format, s)
		}
		if y, x := strings.Index(s, `"y"`), strings.Index(s, `"x"`); y > x {
			t.Errorf("%s: nested property order not kept: %s", format, s)
		}
		if !json.Valid(first) {
			t.Errorf("%s: invalid JSON", format)
		}
	}
}

func TestTools(t *testing.T) {
	defs := []messages.ToolDefinition{{Name: "b-x", Description: "B"}, {Name: "a-x"}}
	cases := map[string]string{
		Gemini:     `[{"functionDeclarations":[{"name":"a-x","description":"a-x"},{"name":"b-x","description":"B"}]}]`,
		Anthropic:  `[{"name":"a-x","input_schema":{"type":"object","properties":{}}},{"name":"b-x","description":"B","input_schema":{"type":"object","properties":{}}}]`,
		OpenAIChat: `[{"type":"function","function":{"name":"a-x","parameters":{"type":"object","properties":{}}}},{"type":"function","function":{"name":"b-x","description":"B","parameters":{"type":"object","properties":{}}}}]`,
		MCP:        `[{"name":"a-x","inputSchema":{"type":"object"}},{"name":"b-x","description":"B","inputSchema":{"type":"object"}}]`,
	}
	for format, want := range cases {
		got, err := Tools(defs, format, Options{})
		if err != nil || string(got) != want {
			t.Errorf("%s: %s, %v\nwant %s", format, got, err, want)
		}
	}
	got, err := Tools(nil, Gemini, Options{})
	if err != nil || string(got) != `[{"functionDeclarations":[]}]` {
		t.Errorf("no tools: %s, %v", got, err)
	}
}

func TestGeminiDescriptionFallback(t *testing.T) {
	got, err := Format([]messages.ToolDefinition{{Name: "a-x", Title: "The X"}}, Gemini, Options{})
	if err != nil || string(got[0]) != `{"name":"a-x","description":"The X"}` {
		t.Errorf("%s, %v", got, err)
	}
}

func TestFormatErrors(t *testing.T) {
	cases := []struct {
		name string
		defs []messages.ToolDefinition
		want string
	}{
		{"name with a dot", []messages.ToolDefinition{{Name: "a.b"}}, `tool "a.b": name must match`},
		{"name too long", []messages.ToolDefinition{{Name: strings.Repeat("a", 65)}}, "name must match"},
		{"no name", []messages.ToolDefinition{{}}, "name must match"},
		{"duplicate", []messages.ToolDefinition{{Name: "a-x"}, {Name: "a-x"}}, `tool "a-x": defined twice`},
		{"bad schema", []messages.ToolDefinition{{Name: "a-x", InputSchema: messages.JSON(`{"type":"array"}`)}}, `tool "a-x": input schema has type "array"`},
	}
	for _, c := range cases {
		for _, format := range Formats() {
			if _, err := Format(c.defs, format, Options{}); err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("%s, %s: %v, want an error about %q", c.name, format, err, c.want)
			}
		}
	}
	if _, err := Format(nil, "claude", Options{}); err == nil || !strings.Contains(err.Error(), `unknown tool schema format "claude"; known formats: anthropic, gemini, mcp, openai-chat, openai-responses`) {
		t.Errorf("unknown format: %v", err)
	}
	if _, err := Tools(nil, "claude", Options{}); err == nil {
		t.Error("Tools accepts an unknown format")
	}
	// The name falls back to the canonical one.
	got, err := Format([]messages.ToolDefinition{{Namespace: "a", Method: "x"}}, Anthropic, Options{})
	if err != nil || !strings.Contains(string(got[0]), `"name":"a-x"`) {
		t.Errorf("canonical name fallback: %s, %v", got, err)
	}
}

// Format reads definitions without changing them.
func TestFormatLeavesDefinitionsAlone(t *testing.T) {
	defs := []messages.ToolDefinition{weatherTool(), {Name: "a-x", InputSchema: messages.JSON(`{"anyOf":[{"properties":{"b":{}}}]}`)}}
	before, _ := json.Marshal(defs)
	for _, format := range Formats() {
		if _, err := Format(defs, format, Options{Think: true, Strict: true}); err != nil {
			t.Fatal(err)
		}
	}
	after, _ := json.Marshal(defs)
	if !bytes.Equal(before, after) {
		t.Errorf("definitions changed:\n%s\n%s", before, after)
	}
}
