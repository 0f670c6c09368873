package policy

import (
	"bytes"
	"encoding/json"
	"reflect"
	"testing"

	"github.com/toolbus/toolbus/pkg/messages"
)

func FuzzParse(f *testing.F) {
	for _, s := range []string{
		"default: deny\nrules:\n  - preset: ask_network\n  - {id: a, tool: \"fs:*\", agent: \"ci-*\", tags: {any: [x], none: [y]}, arguments: [{pointer: /a/0, regex: \"^x\"}, {pointer: /b, one_of: [1, a, null, {k: [1]}]}], effect: allow}\n",
		"default: allow\nrules: []\n",
		"default: ask\nrules:\n  - {source: mcp, namespace: [a, b], effect: deny, reason: r}\n  - {arguments: [{pointer: '', exists: false}], effect: ask}\n",
		"default: deny\nrules: [{effect: allow, arguments: [{pointer: /x, equals: &a [1, *a]}]}]",
		"a: &a [x]\nb: *a\n",
		"",
	} {
		f.Add([]byte(s), []byte(`{"a": ["xy"], "b": 1}`))
	}
	f.Fuzz(func(t *testing.T, src, args []byte) {
		p, err := Parse(src, "fuzz.yaml")
		if err != nil {
			if p != nil {
				t.Fatal("Parse returned a policy and an error")
			}
			return
		}
		again, err := New(p.Default(), p.Rules())
		if err != nil {
			t.Fatalf("rebuilding from Rules: %v", err)
		}
		if again.Version() != p.Version() {
			t.Fatal("rebuilding from Rules changed the version")
		}
		tool := messages.ToolDefinition{Namespace: "fs", Method: "read", Metadata: messages.ToolMetadata{Tags: []string{"x"}}, Source: messages.ToolSource{Kind: "mcp"}}
		d := p.Evaluate(Request{Tool: tool, Agent: "ci-1", Arguments: args})
		if !d.Effect.Valid() || d.Version != p.Version() {
			t.Fatalf("bad decision %+v", d)
		}
		p.Visible("ci-1", tool)
	})
}

func FuzzArgumentsDigest(f *testing.F) {
	for _, s := range []string{`{}`, `{"b": [1.50, -0, 1e400, "\u00e9"], "a": {"c": null}}`, `[1,`, `"\ud800"`, `{"a":1,"a":2}`, "123456789012345678901234567890e-999999999999999999999"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		d, err := ArgumentsDigest(raw)
		if err != nil {
			return
		}
		c, err := canonicalize(orEmptyObject(raw))
		if err != nil {
			t.Fatalf("digest succeeded, canonical form failed: %v", err)
		}
		if !json.Valid(c) {
			t.Fatalf("canonical form %q is not JSON", c)
		}
		// The canonical form is a fixed point and has the same digest.
		if c2, err := canonicalize(c); err != nil || string(c2) != string(c) {
			t.Fatalf("canonical form %q canonicalizes to %q, %v", c, c2, err)
		}
		if d2, _ := ArgumentsDigest(c); d2 != d {
			t.Fatalf("digest of the canonical form differs")
		}
	})
}

func orEmptyObject(raw []byte) []byte {
	if t := bytes.TrimSpace(raw); len(t) == 0 || string(t) == "null" {
		return emptyObject
	}
	return raw
}

func FuzzRedact(f *testing.F) {
	f.Add([]byte(`{"properties": {"a": {"writeOnly": true}, "b": {"$ref": "#/properties/b"}}, "items": [{}]}`), []byte(`{"a": 1, "b": {"token": 2}, "c": [1, {"password": 3}]}`))
	f.Add([]byte(`{"patternProperties": {"(": {}}, "additionalProperties": {"format": "password"}}`), []byte(`{"x": 1}`))
	f.Add([]byte(`true`), []byte(`[`))
	f.Fuzz(func(t *testing.T, schema, args []byte) {
		out := Redact(schema, args)
		if len(out) == 0 {
			return
		}
		if !json.Valid(out) {
			t.Fatalf("Redact gave invalid JSON %q", out)
		}
		if again := Redact(schema, args); string(again) != string(out) {
			t.Fatalf("Redact is not deterministic: %q then %q", out, again)
		}
	})
}

// FuzzLookup checks the pointer lookup in decoded arguments against a
// decode with encoding/json.
func FuzzLookup(f *testing.F) {
	f.Add([]byte(`{"a": [1, {"b": "x\"y"}], "a~/": 2, "dup": 1, "dup": 2}`), "/a/1/b")
	f.Add([]byte(`[[], {}, ""]`), "/1")
	f.Add([]byte(`{"\u0061": {"": null}}`), "/a/")
	f.Fuzz(func(t *testing.T, doc []byte, pointer string) {
		tokens, err := parsePointer(pointer)
		if err != nil || !json.Valid(doc) {
			return
		}
		var want any
		dec := json.NewDecoder(bytes.NewReader(doc))
		dec.UseNumber()
		if err := dec.Decode(&want); err != nil {
			return
		}
		value, err := decodeJSON(doc)
		if err != nil {
			return // nested beyond messages.MaxJSONDepth
		}
		found := true
		for _, tok := range tokens {
			switch x := want.(type) {
			case map[string]any:
				want, found = x[tok]
			case []any:
				n, ok := arrayIndex(tok)
				if found = ok && n < len(x); found {
					want = x[n]
				}
			default:
				found = false
			}
			if !found {
				break
			}
		}
		got, ok := lookup(value, tokens)
		if ok != found {
			t.Fatalf("lookup(%q) found=%v, want %v", pointer, ok, found)
		}
		if !ok {
			return
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("lookup(%q) = %v, want %v", pointer, got, want)
		}
	})
}
