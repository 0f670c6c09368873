package toolschema

import (
	"errors"
	"strings"
	"testing"

	"github.com/toolbus/toolbus/pkg/messages"
)

// same marks an expectation equal to the input schema.
const same = "<same>"

func TestSanitize(t *testing.T) {
	cases := []struct {
		name   string
		schema string
		// want maps a format to its expected output; formats not listed
		// expect the input unchanged.
		want map[string]string
	}{
		{
			name:   "plain object schema",
			schema: `{"type":"object","properties":{"city":{"type":"string","description":"City name"},"days":{"type":"integer","minimum":1,"maximum":14}},"required":["city"]}`,
			want: map[string]string{
				Gemini: `{"type":"OBJECT","properties":{"city":{"type":"STRING","description":"City name"},"days":{"type":"INTEGER","minimum":1,"maximum":14}},"propertyOrdering":["city","days"],"required":["city"]}`,
			},
		},
		{
			name:   "empty schema",
			schema: `{}`,
			want: map[string]string{
				OpenAIChat: `{"type":"object","properties":{}}`,
				Anthropic:  `{"type":"object","properties":{}}`,
				MCP:        `{"type":"object"}`,
				Gemini:     `{"type":"OBJECT"}`,
			},
		},
		{
			name:   "properties without a root type",
			schema: `{"properties":{"a":{"type":"string"}},"required":["a"]}`,
			want: map[string]string{
				OpenAIChat: `{"type":"object","properties":{"a":{"type":"string"}},"required":["a"]}`,
				Anthropic:  `{"type":"object","properties":{"a":{"type":"string"}},"required":["a"]}`,
				MCP:        `{"type":"object","properties":{"a":{"type":"string"}},"required":["a"]}`,
				Gemini:     `{"type":"OBJECT","properties":{"a":{"type":"STRING"}},"required":["a"]}`,
			},
		},
		{
			name:   "$schema and $id",
			schema: `{"$schema":"https://json-schema.org/draft/2020-12/schema","$id":"urn:tool","type":"object","properties":{"a":{"type":"string"}}}`,
			want: map[string]string{
				OpenAIChat: `{"$id":"urn:tool","type":"object","properties":{"a":{"type":"string"}}}`,
				Anthropic:  `{"$id":"urn:tool","type":"object","properties":{"a":{"type":"string"}}}`,
				MCP:        same,
				Gemini:     `{"type":"OBJECT","properties":{"a":{"type":"STRING"}}}`,
			},
		},
		{
			name:   "union types",
			schema: `{"type":"object","properties":{"a":{"type":["string","null"]},"b":{"type":["string","integer"],"description":"B"},"c":{"type":"string","nullable":true}}}`,
			want: map[string]string{
				Gemini: `{"type":"OBJECT","properties":{"a":{"type":"STRING","nullable":true},"b":{"description":"B","anyOf":[{"type":"STRING"},{"type":"INTEGER"}]},"c":{"type":"STRING","nullable":true}},"propertyOrdering":["a","b","c"]}`,
			},
		},
		{
			name:   "const and enum",
			schema: `{"type":"object","properties":{"m":{"const":"fast"},"n":{"type":"integer","enum":[1,2],"description":"Level."},"o":{"enum":["x",null]},"p":{"const":true}}}`,
			want: map[string]string{
				Gemini: `{"type":"OBJECT","properties":{"m":{"type":"STRING","enum":["fast"]},"n":{"type":"INTEGER","description":"Level. Allowed values: 1, 2."},"o":{"type":"STRING","nullable":true,"enum":["x"]},"p":{"type":"BOOLEAN","description":"Allowed values: true."}},"propertyOrdering":["m","n","o","p"]}`,
			},
		},
		{
			name:   "local references",
			schema: `{"type":"object","properties":{"p":{"$ref":"#/$defs/Point","description":"Where."}},"$defs":{"Point":{"type":"object","properties":{"x":{"type":"number"},"y":{"type":"number"}},"required":["x","y"],"additionalProperties":false}}}`,
			want: map[string]string{
				Gemini: `{"type":"OBJECT","properties":{"p":{"type":"OBJECT","description":"Where.","properties":{"x":{"type":"NUMBER"},"y":{"type":"NUMBER"}},"propertyOrdering":["x","y"],"required":["x","y"]}}}`,
			},
		},
		{
			name:   "recursive reference",
			schema: `{"type":"object","properties":{"tree":{"$ref":"#/definitions/Node"}},"definitions":{"Node":{"type":"object","properties":{"kids":{"type":"array","items":{"$ref":"#/definitions/Node"}}}}}}`,
			want: map[string]string{
				Gemini: `{"type":"OBJECT","properties":{"tree":{"type":"OBJECT","properties":{"kids":{"type":"ARRAY","items":{"type":"OBJECT","properties":{"kids":{"type":"ARRAY","items":{"type":"OBJECT"}}}}}}}}}`,
			},
		},
		{
			name:   "dangling and remote references",
			schema: `{"type":"object","properties":{"a":{"$ref":"https://example.invalid/a.json","description":"A"},"b":{"$ref":"#/$defs/Missing"}}}`,
			want: map[string]string{
				OpenAIChat: `{"type":"object","properties":{"a":{"description":"A"},"b":{}}}`,
				Anthropic:  `{"type":"object","properties":{"a":{"description":"A"},"b":{}}}`,
				MCP:        `{"type":"object","properties":{"a":{"description":"A"},"b":{}}}`,
				Gemini:     `{"type":"OBJECT","properties":{"a":{"type":"STRING","description":"A"},"b":{"type":"STRING"}},"propertyOrdering":["a","b"]}`,
			},
		},
		{
			name:   "oneOf and anyOf",
			schema: `{"type":"object","properties":{"v":{"oneOf":[{"type":"string"},{"type":"null"}],"description":"V"},"w":{"anyOf":[{"type":"string"},{"type":"number"}]},"x":{"type":"string","anyOf":[{"format":"date"},{"format":"date-time"}]}}}`,
			want: map[string]string{
				Gemini: `{"type":"OBJECT","properties":{"v":{"type":"STRING","description":"V","nullable":true},"w":{"anyOf":[{"type":"STRING"},{"type":"NUMBER"}]},"x":{"type":"STRING"}},"propertyOrdering":["v","w","x"]}`,
			},
		},
		{
			name:   "allOf merges",
			schema: `{"type":"object","properties":{"a":{"allOf":[{"type":"object","properties":{"x":{"type":"string"}},"required":["x"]},{"$ref":"#/$defs/Y"}]}},"$defs":{"Y":{"properties":{"y":{"type":"boolean"}},"required":["y"]}}}`,
			want: map[string]string{
				Gemini: `{"type":"OBJECT","properties":{"a":{"type":"OBJECT","properties":{"x":{"type":"STRING"},"y":{"type":"BOOLEAN"}},"propertyOrdering":["x","y"],"required":["x","y"]}}}`,
			},
		},
		{
			name:   "root anyOf folds into properties",
			schema: `{"anyOf":[{"type":"object","properties":{"id":{"type":"string"},"kind":{"type":"string"}},"required":["id","kind"]},{"type":"object","properties":{"name":{"type":"string"},"kind":{"type":"string"}},"required":["name","kind"]}]}`,
			want: map[string]string{
				OpenAIChat: `{"type":"object","properties":{"id":{"type":"string"},"kind":{"type":"string"},"name":{"type":"string"}},"required":["kind"]}`,
				Anthropic:  `{"type":"object","properties":{"id":{"type":"string"},"kind":{"type":"string"},"name":{"type":"string"}},"required":["kind"]}`,
				MCP:        `{"type":"object","anyOf":[{"type":"object","properties":{"id":{"type":"string"},"kind":{"type":"string"}},"required":["id","kind"]},{"type":"object","properties":{"name":{"type":"string"},"kind":{"type":"string"}},"required":["name","kind"]}]}`,
				Gemini:     `{"type":"OBJECT","properties":{"id":{"type":"STRING"},"kind":{"type":"STRING"},"name":{"type":"STRING"}},"propertyOrdering":["id","kind","name"],"required":["kind"]}`,
			},
		},
		{
			name:   "root allOf unites required",
			schema: `{"type":"object","properties":{"a":{"type":"string"}},"allOf":[{"properties":{"b":{"type":"string"}},"required":["b"]},{"$ref":"#/$defs/C"}],"$defs":{"C":{"properties":{"c":{"type":"string"}},"required":["c"]}}}`,
			want: map[string]string{
				OpenAIChat: `{"type":"object","properties":{"a":{"type":"string"},"b":{"type":"string"},"c":{"type":"string"}},"$defs":{"C":{"properties":{"c":{"type":"string"}},"required":["c"]}},"required":["b","c"]}`,
				Anthropic:  `{"type":"object","properties":{"a":{"type":"string"},"b":{"type":"string"},"c":{"type":"string"}},"$defs":{"C":{"properties":{"c":{"type":"string"}},"required":["c"]}},"required":["b","c"]}`,
				Gemini:     `{"type":"OBJECT","properties":{"a":{"type":"STRING"},"b":{"type":"STRING"},"c":{"type":"STRING"}},"propertyOrdering":["a","b","c"],"required":["b","c"]}`,
			},
		},
		{
			name:   "root reference",
			schema: `{"$ref":"#/$defs/Args","$defs":{"Args":{"type":"object","properties":{"a":{"type":"string"}}}}}`,
			want: map[string]string{
				OpenAIChat: `{"type":"object","properties":{"a":{"type":"string"}},"$defs":{"Args":{"type":"object","properties":{"a":{"type":"string"}}}}}`,
				Anthropic:  `{"type":"object","properties":{"a":{"type":"string"}},"$defs":{"Args":{"type":"object","properties":{"a":{"type":"string"}}}}}`,
				MCP:        `{"type":"object","properties":{"a":{"type":"string"}},"$defs":{"Args":{"type":"object","properties":{"a":{"type":"string"}}}}}`,
				Gemini:     `{"type":"OBJECT","properties":{"a":{"type":"STRING"}}}`,
			},
		},
		{
			name:   "arrays without items and boolean subschemas",
			schema: `{"type":"object","properties":{"t":{"type":"array"},"u":true,"v":{"type":"array","items":false},"w":{"type":"object","additionalProperties":false,"properties":{}}}}`,
			want: map[string]string{
				OpenAIChat: `{"type":"object","properties":{"t":{"type":"array","items":{}},"u":{},"v":{"type":"array","items":{"not":{}}},"w":{"type":"object","additionalProperties":false,"properties":{}}}}`,
				Gemini:     `{"type":"OBJECT","properties":{"t":{"type":"ARRAY","items":{"type":"STRING"}},"u":{"type":"STRING"},"v":{"type":"ARRAY","items":{"type":"STRING"}},"w":{"type":"OBJECT"}},"propertyOrdering":["t","u","v","w"]}`,
			},
		},
		{
			name:   "keywords Gemini does not take",
			schema: `{"type":"object","properties":{"s":{"type":"string","format":"email","minLength":1,"maxLength":"x","pattern":"^a","title":"S","default":"a","examples":["a"]},"d":{"type":"string","format":"date-time"},"o":{"type":"object","additionalProperties":{"type":"string"},"minProperties":1},"n":{"type":"number","exclusiveMinimum":0,"multipleOf":2},"i":{"type":"integer","minimum":"1"},"odd":{"type":"string","properties":{"x":{}},"items":{},"required":["x"]},"l":{"type":"array","items":[{"type":"string"},{"type":"integer"}],"uniqueItems":true,"minItems":1}},"required":["s","ghost"],"additionalProperties":false}`,
			want: map[string]string{
				Gemini: `{"type":"OBJECT","properties":{"s":{"type":"STRING","minLength":1,"pattern":"^a"},"d":{"type":"STRING","format":"date-time"},"o":{"type":"OBJECT","minProperties":1},"n":{"type":"NUMBER","minimum":0},"i":{"type":"INTEGER"},"odd":{"type":"STRING"},"l":{"type":"ARRAY","items":{"anyOf":[{"type":"STRING"},{"type":"INTEGER"}]},"minItems":1}},"propertyOrdering":["s","d","o","n","i","odd","l"],"required":["s"]}`,
			},
		},
		{
			name:   "types inferred for Gemini",
			schema: `{"properties":{"a":{"properties":{"x":{"type":"string"}}},"b":{"items":{"type":"string"}},"c":{"minimum":0},"d":{"enum":[1,2]},"e":{"enum":["x","y"]},"f":{"description":"anything"}}}`,
			want: map[string]string{
				OpenAIChat: `{"type":"object","properties":{"a":{"properties":{"x":{"type":"string"}}},"b":{"items":{"type":"string"}},"c":{"minimum":0},"d":{"enum":[1,2]},"e":{"enum":["x","y"]},"f":{"description":"anything"}}}`,
				Anthropic:  `{"type":"object","properties":{"a":{"properties":{"x":{"type":"string"}}},"b":{"items":{"type":"string"}},"c":{"minimum":0},"d":{"enum":[1,2]},"e":{"enum":["x","y"]},"f":{"description":"anything"}}}`,
				MCP:        `{"type":"object","properties":{"a":{"properties":{"x":{"type":"string"}}},"b":{"items":{"type":"string"}},"c":{"minimum":0},"d":{"enum":[1,2]},"e":{"enum":["x","y"]},"f":{"description":"anything"}}}`,
				Gemini:     `{"type":"OBJECT","properties":{"a":{"type":"OBJECT","properties":{"x":{"type":"STRING"}}},"b":{"type":"ARRAY","items":{"type":"STRING"}},"c":{"type":"NUMBER","minimum":0},"d":{"type":"INTEGER","description":"Allowed values: 1, 2."},"e":{"type":"STRING","enum":["x","y"]},"f":{"type":"STRING","description":"anything"}},"propertyOrdering":["a","b","c","d","e","f"]}`,
			},
		},
		{
			name:   "strings keep their characters",
			schema: `{"type":"object","properties":{"q":{"type":"string","description":"Use <b> & \"quotes\"\n\u2028 é 日本"}}}`,
			want: map[string]string{
				OpenAIChat: `{"type":"object","properties":{"q":{"type":"string","description":"Use <b> & \"quotes\"\n\u2028 é 日本"}}}`,
				Gemini:     `{"type":"OBJECT","properties":{"q":{"type":"STRING","description":"Use <b> & \"quotes\"\n\u2028 é 日本"}}}`,
			},
		},
		{
			name:   "nullable root object",
			schema: `{"type":["object","null"],"properties":{"a":{"type":"string"}}}`,
			want: map[string]string{
				OpenAIChat: `{"type":"object","properties":{"a":{"type":"string"}}}`,
				Anthropic:  `{"type":"object","properties":{"a":{"type":"string"}}}`,
				MCP:        `{"type":"object","properties":{"a":{"type":"string"}}}`,
				Gemini:     `{"type":"OBJECT","properties":{"a":{"type":"STRING"}}}`,
			},
		},
	}
	for _, c := range cases {
		for _, format := range Formats() {
			want, ok := c.want[format]
			if format == OpenAIResponses {
				want, ok = c.want[OpenAIChat]
			}
			if !ok || want == same {
				want = c.schema
			}
			got, err := Sanitize([]byte(c.schema), format)
			if err != nil {
				t.Errorf("%s, %s: %v", c.name, format, err)
				continue
			}
			if string(got) != want {
				t.Errorf("%s, %s:\n got %s\nwant %s", c.name, format, got, want)
			}
		}
	}
}

func TestSanitizeErrors(t *testing.T) {
	cases := []struct{ schema, want string }{
		{`[]`, "is a JSON array; want an object"},
		{`"x"`, "is a JSON string"},
		{`false`, "input schema is false"},
		{`{"type":"string"}`, `has type "string"; want "object"`},
		{`{"type":["string","integer"]}`, `has type ["string","integer"]`},
		{`{"type":null}`, "has type null"},
		{`{"type":"object"`, "not valid JSON"},
		{`{} {}`, "trailing data"},
		{nestedObjects(messages.MaxJSONDepth + 1), "nested deeper"},
	}
	for _, c := range cases {
		for _, format := range Formats() {
			_, err := Sanitize([]byte(c.schema), format)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("%s, %s: error %v, want one about %q", c.schema, format, err, c.want)
			}
		}
	}
	_, err := Sanitize([]byte(`{}`), "openai")
	if !errors.Is(err, ErrUnknownFormat) || !strings.Contains(err.Error(), "anthropic, gemini, mcp, openai-chat, openai-responses") {
		t.Errorf("unknown format: %v", err)
	}
}

// nestedObjects returns a schema of depth objects, each in the one before.
func nestedObjects(depth int) string {
	return strings.Repeat(`{"a":`, depth-1) + `{}` + strings.Repeat(`}`, depth-1)
}

// A schema nested as deeply as a JSON value may be is formatted.
func TestSanitizeAtTheDepthLimit(t *testing.T) {
	for _, format := range Formats() {
		if _, err := Sanitize([]byte(nestedObjects(messages.MaxJSONDepth)), format); err != nil {
			t.Errorf("%s, %d levels: %v", format, messages.MaxJSONDepth, err)
		}
	}
}

// A schema whose shared definitions would grow exponentially when inlined
// stays within the node budget.
func TestGeminiInliningIsBounded(t *testing.T) {
	var b strings.Builder
	b.WriteString(`{"type":"object","properties":{"root":{"$ref":"#/$defs/d0"}},"$defs":{`)
	const levels = 30
	for i := 0; i < levels; i++ {
		if i > 0 {
			b.WriteString(",")
		}
		if i == levels-1 {
			b.WriteString(`"d29":{"type":"string"}`)
			continue
		}
		next := `{"$ref":"#/$defs/d` + itoa(i+1) + `"}`
		b.WriteString(`"d` + itoa(i) + `":{"type":"object","properties":{"l":` + next + `,"r":` + next + `}}`)
	}
	b.WriteString(`}}`)
	out, err := Sanitize([]byte(b.String()), Gemini)
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(string(out), `"type"`); n > geminiNodeBudget+10 {
		t.Errorf("%d nodes; budget %d", n, geminiNodeBudget)
	}
	if strings.Contains(string(out), "$ref") {
		t.Error("a reference survived")
	}
}

func itoa(i int) string {
	if i < 10 {
		return string(rune('0' + i))
	}
	return itoa(i/10) + string(rune('0'+i%10))
}

// Inlining shared definitions with long descriptions stays within the
// byte budget.
func TestGeminiInliningBoundsText(t *testing.T) {
	long := strings.Repeat("x", 4<<10)
	var b strings.Builder
	b.WriteString(`{"type":"object","properties":{"root":{"$ref":"#/$defs/d0"}},"$defs":{`)
	const levels = 20
	for i := 0; i < levels; i++ {
		next := `{"$ref":"#/$defs/d` + itoa(i+1) + `"}`
		if i == levels-1 {
			next = `{"type":"string","enum":["` + long + `"]}`
		}
		if i > 0 {
			b.WriteString(",")
		}
		b.WriteString(`"d` + itoa(i) + `":{"type":"object","description":"` + long + `","properties":{"l":` + next + `,"r":` + next + `}}`)
	}
	b.WriteString(`}}`)
	out, err := Sanitize([]byte(b.String()), Gemini)
	if err != nil {
		t.Fatal(err)
	}
	if len(out) > geminiByteBudget+64<<10 {
		t.Errorf("output is %d bytes; budget %d", len(out), geminiByteBudget)
	}
}
