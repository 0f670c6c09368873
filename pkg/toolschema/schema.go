package toolschema

import (
	"encoding/json"
	"errors"
	"fmt"
	"strconv"

	"github.com/toolbus/toolbus/pkg/messages"
)

// dialect is the JSON Schema subset one provider accepts.
type dialect int

const (
	dialectOpenAI dialect = iota
	dialectAnthropic
	dialectGemini
	dialectMCP
)

// Keywords whose values are subschemas, keyed by shape.
var (
	schemaMaps = map[string]bool{"properties": true, "patternProperties": true, "$defs": true, "definitions": true, "dependentSchemas": true}
	schemaOne  = map[string]bool{"items": true, "additionalProperties": true, "additionalItems": true, "contains": true, "not": true,
		"if": true, "then": true, "else": true, "propertyNames": true, "unevaluatedProperties": true, "unevaluatedItems": true}
	schemaLists = map[string]bool{"allOf": true, "anyOf": true, "oneOf": true, "prefixItems": true, "items": true}
	// Positions where a boolean is a constraint on extra members rather
	// than a whole schema; they keep their booleans.
	booleanSlots = map[string]bool{"additionalProperties": true, "additionalItems": true, "unevaluatedProperties": true, "unevaluatedItems": true}
)

// eachSubschema calls fn for every subschema position of o, replacing the
// value with what fn returns. key is the keyword that holds the position.
func eachSubschema(o *object, fn func(key string, v any) any) {
	for i, k := range o.keys {
		switch v := o.vals[i].(type) {
		case *object:
			if schemaMaps[k] {
				for j := range v.vals {
					v.vals[j] = fn(k, v.vals[j])
				}
			} else if schemaOne[k] {
				o.vals[i] = fn(k, v)
			}
		case []any:
			if schemaLists[k] {
				for j := range v {
					v[j] = fn(k, v[j])
				}
			}
		case bool:
			if schemaOne[k] {
				o.vals[i] = fn(k, v)
			}
		}
	}
}

// walk visits every schema object under v, parents first. Aliased
// subschemas may be visited more than once; visitors must be idempotent.
func walk(v any, depth int, visit func(o *object, depth int)) {
	o, ok := v.(*object)
	if !ok || depth > maxDepth {
		return
	}
	visit(o, depth)
	eachSubschema(o, func(_ string, c any) any {
		walk(c, depth+1, visit)
		return c
	})
}

// Sanitize rewrites an input schema for what the format's provider accepts;
// see Format for the rules of each. The result is an object schema.
func Sanitize(schema messages.JSON, format string) (messages.JSON, error) {
	f, ok := formats[format]
	if !ok {
		return nil, unknownFormat(format)
	}
	root, err := inputSchema(schema, f.dialect)
	if err != nil {
		return nil, err
	}
	return messages.JSON(encodeToString(root)), nil
}

// inputSchema parses and sanitises a tool's input schema. The root is
// always an object schema with "type": "object" (Gemini: "OBJECT").
func inputSchema(raw []byte, d dialect) (*object, error) {
	root, err := parseRoot(raw)
	if err != nil {
		return nil, err
	}
	return sanitizeRoot(root, d)
}

// sanitizeRoot is inputSchema on a parsed root, which it may modify.
func sanitizeRoot(root *object, d dialect) (*object, error) {
	if d != dialectMCP {
		root = flattenRoot(root)
	}
	if err := rootType(root); err != nil {
		return nil, err
	}
	switch d {
	case dialectGemini:
		g := &geminiConverter{doc: root, budget: geminiNodeBudget}
		out := g.convert(root, 0)
		out.del("nullable")
		return out, nil
	case dialectOpenAI:
		root.del("$schema")
		fixForOpenAI(root)
	case dialectAnthropic:
		root.del("$schema")
		dropDanglingRefs(root)
	case dialectMCP:
		dropDanglingRefs(root)
	}
	if !root.has("properties") && d != dialectMCP {
		root.set("properties", &object{})
	}
	return root, nil
}

// parseRoot parses a schema and resolves a root "$ref", so that the root
// holds the object schema's own keywords.
func parseRoot(raw []byte) (*object, error) {
	if len(raw) == 0 {
		return &object{keys: []string{"type"}, vals: []any{"object"}}, nil
	}
	v, err := parse(raw)
	if err != nil {
		return nil, fmt.Errorf("input schema is not valid JSON: %w", err)
	}
	switch t := v.(type) {
	case bool:
		if !t {
			return nil, errors.New("input schema is false: no arguments are valid")
		}
		return &object{keys: []string{"type"}, vals: []any{"object"}}, nil
	case *object:
		root := t
		for hops := 0; hops < 8; hops++ {
			ref, ok := root.str("$ref")
			if !ok {
				break
			}
			target, ok := pointer(t, ref)
			tobj, isObj := target.(*object)
			if !ok || !isObj || tobj == root {
				break
			}
			root = mergeRef(tobj, root)
		}
		return root, nil
	}
	return nil, fmt.Errorf("input schema is a JSON %s; want an object", kindOf(v))
}

func kindOf(v any) string {
	switch v.(type) {
	case nil:
		return "null"
	case bool:
		return "boolean"
	case json.Number:
		return "number"
	case string:
		return "string"
	case []any:
		return "array"
	}
	return "object"
}

// mergeRef returns the target of a "$ref" with the referring schema's
// other keywords laid over it.
func mergeRef(target, referrer *object) *object {
	out := target.clone()
	for i, k := range referrer.keys {
		if k != "$ref" {
			out.set(k, referrer.vals[i])
		}
	}
	return out
}

// rootType makes sure the root is an object schema.
func rootType(root *object) error {
	t, ok := root.get("type")
	switch tt := t.(type) {
	case nil:
		if ok {
			return errors.New(`input schema has type null; want "object"`)
		}
		root.setFirst("type", "object")
		return nil
	case string:
		if tt == "object" {
			return nil
		}
	case []any:
		for _, e := range tt {
			if e == "object" {
				root.set("type", "object")
				return nil
			}
		}
	}
	return fmt.Errorf(`input schema has type %s; want "object"`, encodeToString(t))
}

// flattenRoot folds root-level allOf, anyOf and oneOf of object schemas
// into the root's own properties: providers want a plain object at the top
// (Anthropic rejects these keywords there, OpenAI wants "type": "object").
// allOf adds every branch's required properties; anyOf and oneOf only those
// that every branch requires. The result accepts at least what the source
// accepted; the coordinator still validates arguments against the source.
func flattenRoot(root *object) *object {
	if !root.has("allOf") && !root.has("anyOf") && !root.has("oneOf") {
		return root
	}
	out := root.clone()
	props := &object{}
	if p, ok := root.obj("properties"); ok {
		props = p.clone()
	}
	required := stringList(root, "required")
	for _, kw := range []string{"allOf", "anyOf", "oneOf"} {
		branches, ok := root.list(kw)
		out.del(kw)
		if !ok {
			continue
		}
		var common []string
		for i, b := range branches {
			bo := resolveBranch(root, b)
			if bo == nil {
				common = nil
				continue
			}
			if p, ok := bo.obj("properties"); ok {
				for j, k := range p.keys {
					if !props.has(k) {
						props.set(k, p.vals[j])
					}
				}
			}
			req := stringList(bo, "required")
			switch {
			case kw == "allOf":
				required = appendNew(required, req...)
			case i == 0:
				common = req
			default:
				common = intersect(common, req)
			}
		}
		required = appendNew(required, common...)
	}
	if props.len() > 0 {
		out.set("properties", props)
	}
	if len(required) > 0 {
		out.set("required", toAny(required))
	}
	return out
}

// resolveBranch follows "$ref"s of a combinator branch, returning nil when
// it is not an object schema.
func resolveBranch(doc *object, b any) *object {
	for hops := 0; hops < 8; hops++ {
		o, ok := b.(*object)
		if !ok {
			return nil
		}
		ref, ok := o.str("$ref")
		if !ok {
			return o
		}
		target, ok := pointer(doc, ref)
		if !ok {
			return nil
		}
		b = target
	}
	return nil
}

func stringList(o *object, key string) []string {
	l, _ := o.list(key)
	var out []string
	for _, e := range l {
		if s, ok := e.(string); ok {
			out = appendNew(out, s)
		}
	}
	return out
}

func appendNew(list []string, items ...string) []string {
	for _, s := range items {
		found := false
		for _, x := range list {
			if x == s {
				found = true
				break
			}
		}
		if !found {
			list = append(list, s)
		}
	}
	return list
}

func intersect(a, b []string) []string {
	var out []string
	for _, s := range a {
		for _, t := range b {
			if s == t {
				out = append(out, s)
				break
			}
		}
	}
	return out
}

func toAny(list []string) []any {
	out := make([]any, len(list))
	for i, s := range list {
		out[i] = s
	}
	return out
}

// fixForOpenAI applies what OpenAI's validator insists on beyond JSON
// Schema: every array names its items ("array schema missing items"), and
// subschemas are objects rather than booleans.
func fixForOpenAI(root *object) {
	dropDanglingRefs(root)
	walk(root, 0, func(o *object, _ int) {
		eachSubschema(o, func(key string, v any) any {
			if b, ok := v.(bool); ok && !booleanSlots[key] {
				if b {
					return &object{}
				}
				return &object{keys: []string{"not"}, vals: []any{&object{}}}
			}
			return v
		})
		if hasType(o, "array") && !o.has("items") && !o.has("prefixItems") {
			o.set("items", &object{})
		}
	})
}

// dropDanglingRefs removes "$ref"s that do not resolve inside the schema:
// providers do not fetch remote schemas, and a reference into nowhere
// fails the whole request. The referring schema's other keywords stay.
func dropDanglingRefs(root *object) {
	walk(root, 0, func(o *object, _ int) {
		if ref, ok := o.get("$ref"); ok {
			s, isString := ref.(string)
			if !isString {
				o.del("$ref")
				return
			}
			if _, ok := pointer(root, s); !ok {
				o.del("$ref")
			}
		}
	})
}

// hasType reports whether o's "type" is or includes t.
func hasType(o *object, t string) bool {
	switch v, _ := o.get("type"); tt := v.(type) {
	case string:
		return tt == t
	case []any:
		for _, e := range tt {
			if e == t {
				return true
			}
		}
	}
	return false
}

// nonNegativeInt reports whether v is a JSON number holding an integer ≥ 0.
func nonNegativeInt(v any) bool {
	n, ok := v.(json.Number)
	if !ok {
		return false
	}
	i, err := strconv.ParseInt(string(n), 10, 64)
	return err == nil && i >= 0
}

func isNumber(v any) bool {
	n, ok := v.(json.Number)
	if !ok {
		return false
	}
	_, err := strconv.ParseFloat(string(n), 64)
	return err == nil
}
