package toolschema

import (
	"bytes"
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/toolbus/toolbus/pkg/messages"
)

var fuzzSeeds = []string{
	`{}`, `true`, `false`, `null`, `[]`, `"x"`, `1`,
	`{"type":"object","properties":{"a":{"type":["string","null"]},"b":{"$ref":"#/$defs/B"}},"$defs":{"B":{"type":"array"}}}`,
	`{"$ref":"#"}`,
	`{"properties":{"a":{"$ref":"#/properties/a"}}}`,
	`{"anyOf":[{"$ref":"#"},{"properties":{"x":true}}]}`,
	`{"allOf":[{"allOf":[{"properties":{"a":{"allOf":[{"$ref":"#"}]}}}]}]}`,
	`{"properties":{"e":{"enum":[1,"a",null,{"x":[]}]},"c":{"const":{"k":1}},"t":{"type":["object","array","null"],"items":[true,{}],"properties":{}}}}`,
	`{"properties":{"x":{"$ref":"#/$defs/a~1b%25"}},"$defs":{"a/b%":{"type":"integer","minimum":-1e400}}}`,
	`{"type":"object","required":[1,null,"a"],"properties":{"a":{"type":"strin"}}}`,
}

// FuzzSanitize checks that the sanitiser never panics, that what it
// returns is valid JSON with an object root, that it is deterministic, and
// that Gemini output stays inside Gemini's subset.
func FuzzSanitize(f *testing.F) {
	for _, s := range fuzzSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, schema []byte) {
		for _, format := range Formats() {
			out, err := Sanitize(schema, format)
			if err != nil {
				continue
			}
			if !json.Valid(out) {
				t.Fatalf("%s: invalid JSON %q from %q", format, out, schema)
			}
			again, _ := Sanitize(schema, format)
			if string(again) != string(out) {
				t.Fatalf("%s: not deterministic for %q", format, schema)
			}
			var root map[string]any
			dec := json.NewDecoder(bytes.NewReader(out))
			dec.UseNumber()
			if err := dec.Decode(&root); err != nil {
				t.Fatalf("%s: root is not an object: %s", format, out)
			}
			want := "object"
			if format == Gemini {
				want = "OBJECT"
				checkGemini(t, root, string(schema))
			}
			if root["type"] != want {
				t.Fatalf("%s: root type %v in %s", format, root["type"], out)
			}
		}
	})
}

var geminiKeys = map[string]bool{
	"type": true, "format": true, "description": true, "nullable": true, "enum": true, "properties": true, "propertyOrdering": true,
	"required": true, "minProperties": true, "maxProperties": true, "items": true, "minItems": true, "maxItems": true,
	"minLength": true, "maxLength": true, "pattern": true, "minimum": true, "maximum": true, "anyOf": true,
}

func checkGemini(t *testing.T, v any, src string) {
	t.Helper()
	o, ok := v.(map[string]any)
	if !ok {
		t.Fatalf("gemini: schema %v is not an object (source %q)", v, src)
	}
	for k := range o {
		if !geminiKeys[k] {
			t.Fatalf("gemini: keyword %q kept (source %q)", k, src)
		}
	}
	typ, _ := o["type"].(string)
	if typ == "" && o["anyOf"] == nil {
		t.Fatalf("gemini: schema without type or anyOf: %v (source %q)", o, src)
	}
	if _, ok := o["properties"]; ok && typ != "OBJECT" {
		t.Fatalf("gemini: properties on %s (source %q)", typ, src)
	}
	if typ == "ARRAY" && o["items"] == nil {
		t.Fatalf("gemini: array without items (source %q)", src)
	}
	if props, ok := o["properties"].(map[string]any); ok {
		if len(props) == 0 {
			t.Fatalf("gemini: empty properties (source %q)", src)
		}
		for _, p := range props {
			checkGemini(t, p, src)
		}
	}
	if items, ok := o["items"]; ok {
		checkGemini(t, items, src)
	}
	if alts, ok := o["anyOf"].([]any); ok {
		for _, a := range alts {
			checkGemini(t, a, src)
		}
	}
	if enum, ok := o["enum"].([]any); ok {
		for _, e := range enum {
			if _, isString := e.(string); !isString {
				t.Fatalf("gemini: enum value %v is not a string (source %q)", e, src)
			}
		}
	}
}

// FuzzStripThought checks that stripping never panics and, when it
// succeeds on an object, leaves valid JSON without the thought.
func FuzzStripThought(f *testing.F) {
	f.Add([]byte(`{"type":"object","properties":{"thought":{}}}`), []byte(`{"thought_":"x","a":[1,2]}`))
	f.Add([]byte(`{}`), []byte(`{"thought":"x"}`))
	f.Add([]byte(`{}`), []byte(`[1]`))
	f.Add([]byte(`{}`), []byte(`{"\u0074hought":1,"\ud800":2}`))
	f.Fuzz(func(t *testing.T, schema, args []byte) {
		def := &messages.ToolDefinition{Name: "a-x", InputSchema: schema}
		out, _, err := StripThought(def, Options{Think: true}, args)
		if err != nil || len(bytes.TrimSpace(out)) == 0 {
			return
		}
		if !json.Valid(out) {
			t.Fatalf("invalid JSON %q from %q", out, args)
		}
		var m map[string]json.RawMessage
		if json.Unmarshal(out, &m) == nil {
			name := ThoughtProperty(schema)
			if _, ok := m[name]; ok && strings.Contains(string(args), name) {
				// Go's decoder folds keys case-insensitively into the map
				// only for structs, so a present key means it was kept.
				t.Fatalf("thought %q kept in %s", name, out)
			}
		}
	})
}

// FuzzParse checks the schema parser against encoding/json: it accepts
// exactly the valid JSON documents (within its depth limit), and what it
// encodes back means the same.
func FuzzParse(f *testing.F) {
	for _, s := range fuzzSeeds {
		f.Add([]byte(s))
	}
	for _, s := range []string{`"\ud83d\ude00 \u00e9\n"`, `"\ud800"`, `-0.5e+10`, `01`, `1.`, `[1,]`, `{"a":1,"a":2}`, " \t[\r\n] ", `"\x01"`, "\"\xff\""} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		v, err := parse(data)
		valid := json.Valid(data)
		if err != nil {
			if valid && !strings.Contains(err.Error(), "nested deeper") {
				t.Fatalf("parse rejects valid JSON %q: %v", data, err)
			}
			return
		}
		if !valid {
			t.Fatalf("parse accepts invalid JSON %q", data)
		}
		out := encodeToString(v)
		if !json.Valid([]byte(out)) {
			t.Fatalf("encode wrote invalid JSON %q for %q", out, data)
		}
		if !utf8.Valid(data) {
			return // encoding/json replaces each invalid byte, parse each run
		}
		var want, got any
		if err := json.Unmarshal(data, &want); err != nil {
			return // numbers out of float64 range
		}
		if err := json.Unmarshal([]byte(out), &got); err != nil {
			t.Fatalf("re-read %q: %v", out, err)
		}
		if !reflect.DeepEqual(want, got) {
			t.Fatalf("%q read back as %q", data, out)
		}
	})
}
