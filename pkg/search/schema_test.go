package search

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"

	"github.com/toolbus/toolbus/pkg/messages"
)

// walkBoth returns the parameter tokens that the scanner and the
// encoding/json reference find in schema.
func walkBoth(t *testing.T, schema string) (got, want [2][]string) {
	t.Helper()
	a := newAnalyzer()
	a.walkSchema([]byte(schema))
	got = [2][]string{slices.Clone(a.fields[FieldParamName]), slices.Clone(a.fields[FieldParamDescription])}
	ref := newAnalyzer()
	var root schemaNode
	if json.Unmarshal([]byte(schema), &root) == nil {
		ref.walkSchemaReference(&root, 0, false)
	}
	want = [2][]string{ref.fields[FieldParamName], ref.fields[FieldParamDescription]}
	for i := range got {
		slices.Sort(got[i])
		slices.Sort(want[i])
	}
	return got, want
}

func TestWalkSchemaMatchesReference(t *testing.T) {
	schemas := []string{
		`{}`,
		`null`,
		`{"type": "object", "description": "The tool itself.", "properties": {"cityName": {"type": "string", "description": "City, e.g. \"Paris\" \u00e9t\u00e9 \ud83d\ude00 \/ \\n"}}}`,
		`{"properties": {"unit": {"enum": ["celsius", "fahrenheit", 3, null, true]}, "n": {"type": "integer", "minimum": -1.5e+3}}}`,
		`{"properties": {"filter": {"type": "object", "title": "Filter", "properties": {"label": {"description": "Issue label."}, "deep": {"properties": {"deeper": {"properties": {"deepest": {"properties": {"abyss": {"description": "too deep"}}}}}}}}}}}`,
		`{"properties": {"tags": {"type": "array", "items": {"type": "string", "description": "One tag."}}, "pair": {"items": [{"description": "first"}, {"description": "second"}]}}}`,
		`{"properties": {"target": {"anyOf": [{"description": "A user ID."}, {"properties": {"email": {"description": "An email address."}}}]}, "x": {"oneOf": [{"title": "One"}], "allOf": [{"title": "All"}]}}}`,
		`{"properties": {"odd": {"description": "lone \ud800 surrogate and \udc00 low"}}}`,
		` { "properties" : { "spaced" : { "description" : "white space" } } } `,
	}
	for _, d := range cachedCatalog(1000)[:200] {
		schemas = append(schemas, string(d.InputSchema))
	}
	for _, schema := range schemas {
		got, want := walkBoth(t, schema)
		for i, field := range []string{"names", "descriptions"} {
			if !slices.Equal(got[i], want[i]) {
				t.Errorf("%s of %s:\ngot  %q\nwant %q", field, schema, got[i], want[i])
			}
		}
	}
}

func TestWalkSchemaRejectsInvalidJSON(t *testing.T) {
	for _, schema := range []string{
		`{"properties": {"a": {"description": "x"}}`,
		`{"properties": {"a": {"description": "x"}}} trailing`,
		`{"properties": {"a": {"description": "bad \x escape"}}}`,
		`{"properties": {"a": {"default": 01}}}`,
		`{"properties": {"a": {"default": tru}}}`,
		`{"properties": {"a" {"description": "x"}}}`,
		`{"properties": {"a": {"description": "x",}}}`,
		`[{"properties": {"a": {}}}]`,
	} {
		a := newAnalyzer()
		a.walkSchema([]byte(schema))
		if len(a.fields[FieldParamName])+len(a.fields[FieldParamDescription]) > 0 {
			t.Errorf("invalid schema %s gave tokens %q %q", schema, a.fields[FieldParamName], a.fields[FieldParamDescription])
		}
	}
}

// A schema nested messages.MaxJSONDepth levels deep is read; one level
// deeper is refused and adds nothing.
func TestWalkSchemaDepthLimit(t *testing.T) {
	schemaNesting := func(levels int) string {
		// The schema is one level; its default holds the rest.
		inner := levels - 1
		return `{"properties": {"probe": {}}, "default": ` + strings.Repeat("[", inner) + strings.Repeat("]", inner) + `}`
	}
	a := newAnalyzer()
	a.walkSchema([]byte(schemaNesting(messages.MaxJSONDepth)))
	if !slices.Contains(a.fields[FieldParamName], "probe") {
		t.Fatalf("a schema of %d levels was not read", messages.MaxJSONDepth)
	}
	b := newAnalyzer()
	b.walkSchema([]byte(schemaNesting(messages.MaxJSONDepth + 1)))
	if len(b.fields[FieldParamName]) > 0 {
		t.Fatalf("a schema of %d levels gave tokens %q", messages.MaxJSONDepth+1, b.fields[FieldParamName])
	}
}

// jsonDepth counts the arrays and objects nested in v, v included.
func jsonDepth(v any) int {
	deepest := 0
	switch x := v.(type) {
	case []any:
		for _, e := range x {
			deepest = max(deepest, jsonDepth(e))
		}
	case map[string]any:
		for _, e := range x {
			deepest = max(deepest, jsonDepth(e))
		}
	default:
		return 0
	}
	return deepest + 1
}

func FuzzWalkSchema(f *testing.F) {
	f.Add(`{"properties": {"a": {"description": "x \u00e9", "enum": ["b"], "items": [{"title": "t"}]}}}`)
	f.Add(`{"anyOf": [{"properties": {"q": {}}}], "x": [1, -2.5e3, true, null, {"y": "z"}]}`)
	f.Fuzz(func(t *testing.T, schema string) {
		a := newAnalyzer()
		a.walkSchema([]byte(schema))
		found := len(a.fields[FieldParamName]) + len(a.fields[FieldParamDescription])
		var top any
		valid := json.Unmarshal([]byte(schema), &top) == nil
		if _, object := top.(map[string]any); !valid || !object {
			if found > 0 {
				t.Fatalf("%q is not a JSON object, yet gave tokens", schema)
			}
			return
		}
		if jsonDepth(top) >= messages.MaxJSONDepth {
			return // too deep once wrapped: refused, as TestWalkSchemaDepthLimit shows
		}
		// A valid schema: the scanner must have read it to the end, so a
		// property name at the top is found.
		b := newAnalyzer()
		b.walkSchema([]byte(`{"properties": {"probe": {}}, "x": ` + schema + `}`))
		if !slices.Contains(b.fields[FieldParamName], "probe") {
			t.Fatalf("valid JSON %q inside a schema made the scan fail", schema)
		}
	})
}
