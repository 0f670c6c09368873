package toolschema

import (
	"bytes"
	"strings"

	"github.com/toolbus/toolbus/pkg/messages"
)

// MCPResultKey is the one property of the object in which MCP carries a
// structured result that is not a JSON object (an array, a string, a
// number, a boolean, null): MCP's structuredContent is an object, and its
// outputSchema an object schema.
const MCPResultKey = "result"

// MCPStructured is how an MCP CallToolResult carries a call result's
// structured content.
type MCPStructured struct {
	// Content is the result's structuredContent, nil for none: the
	// structured content itself when it is a JSON object, else
	// {"result": <value>}.
	Content messages.JSON
	// Wrapped reports that Content wraps a value that is not an object.
	Wrapped bool
	// Text, when not nil, is JSON that the result's content gains as a
	// last text block: the structured content of an error result, which
	// is not carried as structuredContent.
	Text messages.JSON
}

// ForMCP says how MCP carries the structured content of a result (see
// MCPStructured). A successful result's object passes as it is and any
// other value is wrapped under MCPResultKey, as the tool's MCP
// outputSchema declares it (see Format). An error result has no
// structuredContent: what it holds (an HTTP error's status and body, say)
// is not what the tool's outputSchema describes, and MCP clients validate
// structuredContent against that schema whatever isError says. Its JSON
// goes in a text block instead, unless one of the result's blocks holds
// JSON already.
//
// A null structured result does not cross the wire (messages.JSON holds
// null as nothing): a successful result that has none but a json block
// holding null (a block without JSON, see BlockJSON) is taken for a null
// structured result, and wrapped.
func ForMCP(structured messages.JSON, isError bool, blocks []messages.ContentBlock) MCPStructured {
	value := bytes.TrimSpace(structured)
	if len(value) == 0 && !isError && holdsNull(blocks) {
		value = null
	}
	if len(value) == 0 {
		return MCPStructured{}
	}
	if isError {
		for _, b := range blocks {
			if b.Type == messages.ContentJSON {
				return MCPStructured{}
			}
		}
		return MCPStructured{Text: messages.JSON(value)}
	}
	if value[0] == '{' {
		return MCPStructured{Content: messages.JSON(value)}
	}
	wrapped := make([]byte, 0, len(value)+len(MCPResultKey)+5)
	wrapped = append(wrapped, `{"`+MCPResultKey+`":`...)
	wrapped = append(wrapped, value...)
	wrapped = append(wrapped, '}')
	return MCPStructured{Content: wrapped, Wrapped: true}
}

var null = messages.JSON("null")

// BlockJSON is the JSON of a json block: null for one without JSON, as a
// json block holding null reads back from the wire.
func BlockJSON(b messages.ContentBlock) messages.JSON {
	if len(b.JSON) == 0 {
		return null
	}
	return b.JSON
}

// holdsNull reports whether a json block of blocks holds null.
func holdsNull(blocks []messages.ContentBlock) bool {
	for _, b := range blocks {
		if b.Type == messages.ContentJSON && len(bytes.TrimSpace(b.JSON)) == 0 {
			return true
		}
	}
	return false
}

// Keywords that constrain one kind of JSON value only. A schema without
// "type" that uses those of objects, and no other kind's, is taken for an
// object schema, as its author meant it.
var (
	objectKeywords = []string{"properties", "required", "additionalProperties", "patternProperties", "minProperties",
		"maxProperties", "propertyNames", "dependentRequired", "dependentSchemas", "unevaluatedProperties"}
	otherKeywords = []string{"items", "prefixItems", "additionalItems", "contains", "minContains", "maxContains", "minItems",
		"maxItems", "uniqueItems", "unevaluatedItems", "minLength", "maxLength", "pattern", "format", "minimum", "maximum",
		"exclusiveMinimum", "exclusiveMaximum", "multipleOf"}
)

// kindsBudget bounds the subschemas valueKinds reads in one schema, so
// that references that fan out at every level cost no more than that.
const kindsBudget = 10_000

// kinds reads what values the subschemas of one schema admit.
type kinds struct {
	root   *object
	budget int
}

// of says whether a schema admits JSON objects (objects) and values of
// other kinds (others), as far as "type", "enum", "const", "allOf",
// "anyOf", "oneOf" and local "$ref"s tell; what they leave open, or what
// lies past the budget, counts as admitted.
func (k *kinds) of(v any, depth int) (objects, others bool) {
	if k.budget--; k.budget < 0 || depth > maxDepth {
		return true, true
	}
	switch s := v.(type) {
	case bool:
		return s, s
	case *object:
		objects, others = true, true
		narrow := func(o, n bool) { objects, others = objects && o, others && n }
		switch t, _ := s.get("type"); tt := t.(type) {
		case string:
			narrow(tt == "object", tt != "object")
		case []any:
			o, n := false, false
			for _, e := range tt {
				o, n = o || e == "object", n || e != "object"
			}
			narrow(o, n)
		}
		values := func(list []any) {
			o, n := false, false
			for _, e := range list {
				_, isObject := e.(*object)
				o, n = o || isObject, n || !isObject
			}
			narrow(o, n)
		}
		if list, ok := s.list("enum"); ok {
			values(list)
		}
		if c, ok := s.get("const"); ok {
			values([]any{c})
		}
		if list, ok := s.list("allOf"); ok {
			for _, b := range list {
				narrow(k.of(b, depth+1))
			}
		}
		for _, key := range []string{"anyOf", "oneOf"} {
			if list, ok := s.list(key); ok {
				o, n := false, false
				for _, b := range list {
					bo, bn := k.of(b, depth+1)
					o, n = o || bo, n || bn
				}
				narrow(o, n)
			}
		}
		if ref, ok := s.str("$ref"); ok {
			if target, ok := pointer(k.root, ref); ok {
				narrow(k.of(target, depth+1))
			}
		}
		return objects, others
	}
	return true, true
}

// hasAny reports whether o holds one of keys.
func hasAny(o *object, keys []string) bool {
	for _, k := range keys {
		if o.has(k) {
			return true
		}
	}
	return false
}

// mcpOutputSchema is the outputSchema of an MCP tool whose output schema
// is raw, or nil for none. MCP's outputSchema is an object schema that
// structuredContent conforms to:
//
//   - a schema that admits only objects is declared as it is, "type":
//     "object" first (added to a schema without "type" that constrains
//     objects only);
//   - a schema that admits no object (an array's, a string's) is declared
//     wrapped, as ForMCP wraps the values: {"type": "object",
//     "properties": {"result": <schema>}, "required": ["result"],
//     "additionalProperties": false};
//   - a schema that admits both, or neither, or that is not valid JSON,
//     is not declared: no one object schema describes what ForMCP sends.
func mcpOutputSchema(raw messages.JSON) *object {
	v, err := parse(raw)
	if err != nil {
		return nil
	}
	o, ok := v.(*object)
	if !ok {
		return nil
	}
	k := &kinds{root: o, budget: kindsBudget}
	objects, others := k.of(o, 0)
	if objects && others && !o.has("type") && hasAny(o, objectKeywords) && !hasAny(o, otherKeywords) {
		objects, others = true, false
	}
	switch {
	case objects && !others:
		if t, _ := o.str("type"); t != "object" {
			o.setFirst("type", "object")
		}
		dropDanglingRefs(o)
		return o
	case others && !objects:
		wrapped := wrapSchema(o)
		dropDanglingRefs(wrapped)
		return wrapped
	}
	return nil
}

// wrapSchema is the object schema of {"result": <a value of s>}. The
// definitions of s ("$defs", "definitions") and its "$schema" move to the
// new root, and its local references are rewritten to point where their
// targets now are, unless s has an "$id" of its own, against which its
// references resolve wherever it sits.
func wrapSchema(s *object) *object {
	root := &object{}
	root.set("type", "object")
	if !s.has("$id") {
		for _, key := range []string{"$schema", "$defs", "definitions"} {
			if v, ok := s.get(key); ok {
				root.set(key, v)
				s.del(key)
			}
		}
		prefix := "#/properties/" + MCPResultKey
		rewritten := map[*object]bool{}
		rewrite := func(o *object, _ int) {
			if rewritten[o] {
				return
			}
			rewritten[o] = true
			ref, ok := o.str("$ref")
			if !ok || !strings.HasPrefix(ref, "#") || (ref != "#" && !strings.HasPrefix(ref, "#/")) ||
				strings.HasPrefix(ref, "#/$defs/") || strings.HasPrefix(ref, "#/definitions/") {
				return
			}
			o.set("$ref", prefix+ref[1:])
		}
		walk(s, 0, rewrite)
		for _, key := range []string{"$defs", "definitions"} {
			if defs, ok := root.obj(key); ok {
				for _, d := range defs.vals {
					walk(d, 1, rewrite)
				}
			}
		}
	}
	props := &object{}
	props.set(MCPResultKey, s)
	root.set("properties", props)
	root.set("required", []any{MCPResultKey})
	root.set("additionalProperties", false)
	return root
}
