package toolschema

import (
	"encoding/json"
	"strings"
)

// Limits of $ref inlining for Gemini, which has no references: a reference
// is expanded at most geminiRefRepeats times along one path (recursive
// schemas are cut there), and the whole converted schema holds at most
// geminiNodeBudget nodes and about geminiByteBudget bytes of descriptions
// and enum values (shared definitions cannot blow it up exponentially).
// Where a limit cuts, the schema becomes a bare node of the target's type.
const (
	geminiRefRepeats = 2
	geminiRefDepth   = 16
	geminiNodeBudget = 4000
	geminiByteBudget = 512 << 10
)

// geminiFormats are the only "format" values kept. The Gemini Developer API
// rejects others on strings; "enum" is implied by "enum" itself.
var geminiFormats = map[string]map[string]bool{
	"STRING": {"date-time": true},
}

// geminiConverter rewrites a JSON Schema into Gemini's Schema object, an
// OpenAPI 3.0 subset:
//
//   - types are upper case (STRING, NUMBER, INTEGER, BOOLEAN, ARRAY,
//     OBJECT); a union with "null" becomes "nullable": true, and a union of
//     several types an anyOf of one schema per type;
//   - local "$ref"s are inlined (see the limits above); allOf branches are
//     merged into one schema; oneOf becomes anyOf (looser: more than one
//     branch may match); null branches of anyOf become "nullable";
//   - "const" becomes a one-value "enum"; "enum" is kept only for strings
//     (Gemini's enum holds strings), other values are listed in the
//     description instead;
//   - kept keywords: type, format (date-time on strings), description,
//     nullable, enum, properties, propertyOrdering (the source order of
//     properties, which Gemini otherwise does not keep), required (only
//     names that are properties), min/maxProperties, items, min/maxItems,
//     min/maxLength, pattern, minimum, maximum, anyOf; each only on the
//     types it applies to, since Gemini rejects e.g. "properties" on a
//     non-object; exclusiveMinimum/Maximum become minimum/maximum when
//     those are absent;
//   - dropped: $schema, $id, $defs, title, default, examples, example,
//     additionalProperties, patternProperties, not, if/then/else,
//     dependencies, multipleOf, uniqueItems, readOnly, writeOnly and any
//     other keyword;
//   - an object without properties keeps no "properties" (Gemini rejects
//     an empty one); an array without items gets STRING items, and a schema
//     without a type that nothing else types is a STRING, since Gemini
//     requires types. These narrow the schema; the model's arguments then
//     still satisfy the source schema.
type geminiConverter struct {
	doc    *object
	budget int // nodes left
	bytes  int // bytes of text emitted so far
	refs   []string
}

func (g *geminiConverter) convert(v any, depth int) *object {
	g.budget--
	if g.budget < 0 || g.bytes > geminiByteBudget || depth > maxDepth {
		return cut(v)
	}
	o, ok := v.(*object)
	if !ok {
		return typed("STRING")
	}
	if ref, ok := o.get("$ref"); ok {
		return g.convertRef(o, ref, depth)
	}
	if o.has("allOf") {
		return g.convert(g.mergeAllOf(o), depth+1)
	}

	types, nullable := schemaTypes(o)
	var alts []any
	if l, ok := o.list("anyOf"); ok {
		alts = append(alts, l...)
	}
	if l, ok := o.list("oneOf"); ok {
		alts = append(alts, l...)
	}
	if len(alts) > 0 && len(types) == 0 {
		var branches []*object
		for _, alt := range alts {
			if isNullSchema(alt) {
				nullable = true
				continue
			}
			branches = append(branches, g.convert(alt, depth+1))
		}
		desc, _ := o.str("description")
		switch len(branches) {
		case 0:
			types = []string{"string"}
		case 1:
			out := branches[0]
			if desc != "" {
				out.set("description", desc)
			}
			if nullable {
				out.set("nullable", true)
			}
			return inGeminiOrder(out)
		default:
			out := &object{}
			if desc != "" {
				out.set("description", desc)
			}
			if nullable {
				out.set("nullable", true)
			}
			out.set("anyOf", objectsToAny(branches))
			return out
		}
	}
	if len(types) == 0 {
		types = []string{inferType(o)}
	}
	if len(types) == 1 {
		return g.convertTyped(o, types[0], nullable, true, depth)
	}
	out := &object{}
	if desc, ok := o.str("description"); ok && desc != "" {
		out.set("description", desc)
	}
	if nullable {
		out.set("nullable", true)
	}
	var branches []*object
	for _, t := range types {
		branches = append(branches, g.convertTyped(o, t, false, false, depth))
	}
	out.set("anyOf", objectsToAny(branches))
	return out
}

func (g *geminiConverter) convertRef(o *object, ref any, depth int) *object {
	s, _ := ref.(string)
	target, ok := pointer(g.doc, s)
	if !ok {
		rest := o.clone()
		rest.del("$ref")
		return g.convert(rest, depth+1)
	}
	repeats := 0
	for _, r := range g.refs {
		if r == s {
			repeats++
		}
	}
	if repeats >= geminiRefRepeats || len(g.refs) >= geminiRefDepth {
		return cut(target)
	}
	merged := o.clone()
	merged.del("$ref")
	if t, ok := target.(*object); ok {
		merged = mergeRef(t, merged)
	}
	g.refs = append(g.refs, s)
	out := g.convert(merged, depth+1)
	g.refs = g.refs[:len(g.refs)-1]
	return out
}

// mergeAllOf folds allOf branches into o: properties are united (the first
// definition of a name wins), required names are united, other keywords
// are taken from the first schema that has them.
func (g *geminiConverter) mergeAllOf(o *object) *object {
	out := o.clone()
	out.del("allOf")
	props, _ := out.obj("properties")
	if props != nil {
		props = props.clone()
	}
	required := stringList(out, "required")
	queue, _ := o.list("allOf")
	queue = append([]any(nil), queue...)
	for n := 0; len(queue) > 0 && n < 64; n++ {
		b := resolveBranch(g.doc, queue[0])
		queue = queue[1:]
		if b == nil {
			continue
		}
		for i, k := range b.keys {
			switch k {
			case "allOf":
				if l, ok := b.vals[i].([]any); ok {
					queue = append(queue, l...)
				}
			case "$ref":
			case "properties":
				p, ok := b.vals[i].(*object)
				if !ok {
					continue
				}
				if props == nil {
					props = &object{}
				}
				for j, pk := range p.keys {
					if !props.has(pk) {
						props.set(pk, p.vals[j])
					}
				}
			case "required":
				required = appendNew(required, stringList(b, "required")...)
			default:
				if !out.has(k) {
					out.set(k, b.vals[i])
				}
			}
		}
	}
	if props != nil {
		out.set("properties", props)
	}
	if len(required) > 0 {
		out.set("required", toAny(required))
	}
	return out
}

func (g *geminiConverter) convertTyped(o *object, t string, nullable, withDescription bool, depth int) *object {
	gt := strings.ToUpper(t)
	out := typed(gt)
	if f, ok := o.str("format"); ok && geminiFormats[gt][f] {
		out.set("format", f)
	}
	desc := ""
	if withDescription {
		desc, _ = o.str("description")
	}
	var values []any
	if l, ok := o.list("enum"); ok {
		values = l
	} else if c, ok := o.get("const"); ok {
		values = []any{c}
	}
	var enum []any
	var listed []string
	for _, v := range values {
		switch s := v.(type) {
		case nil:
			nullable = true
		case string:
			if gt == "STRING" {
				enum = append(enum, s)
				continue
			}
			listed = append(listed, encodeToString(v))
		default:
			listed = append(listed, encodeToString(v))
		}
	}
	if len(listed) > 0 && withDescription {
		// Gemini's enum holds strings only; say the allowed values instead.
		for _, e := range enum {
			listed = append(listed, encodeToString(e))
		}
		enum = nil
		note := "Allowed values: " + strings.Join(listed, ", ") + "."
		if desc != "" {
			desc = strings.TrimRight(desc, " ") + " " + note
		} else {
			desc = note
		}
	}
	if desc != "" {
		out.set("description", desc)
		g.bytes += len(desc)
	}
	if nullable {
		out.set("nullable", true)
	}
	if len(enum) > 0 {
		out.set("enum", enum)
		for _, e := range enum {
			g.bytes += len(e.(string))
		}
	}
	switch gt {
	case "OBJECT":
		props, _ := o.obj("properties")
		if props != nil && props.len() > 0 {
			cp := &object{}
			order := make([]any, 0, props.len())
			for i, k := range props.keys {
				cp.set(k, g.convert(props.vals[i], depth+1))
				order = append(order, k)
			}
			out.set("properties", cp)
			if len(order) > 1 {
				out.set("propertyOrdering", order)
			}
			var req []string
			for _, r := range stringList(o, "required") {
				if cp.has(r) {
					req = append(req, r)
				}
			}
			if len(req) > 0 {
				out.set("required", toAny(req))
			}
		}
		copyInts(out, o, "minProperties", "maxProperties")
	case "ARRAY":
		var items *object
		switch it, _ := o.get("items"); iv := it.(type) {
		case *object, bool:
			items = g.convert(iv, depth+1)
		case []any:
			items = g.convertTuple(iv, depth)
		}
		if items == nil {
			if l, ok := o.list("prefixItems"); ok {
				items = g.convertTuple(l, depth)
			}
		}
		if items == nil {
			items = typed("STRING")
		}
		out.set("items", items)
		copyInts(out, o, "minItems", "maxItems")
	case "STRING":
		copyInts(out, o, "minLength", "maxLength")
		if p, ok := o.str("pattern"); ok {
			out.set("pattern", p)
		}
	case "NUMBER", "INTEGER":
		for _, k := range [][2]string{{"minimum", "exclusiveMinimum"}, {"maximum", "exclusiveMaximum"}} {
			if v, ok := o.get(k[0]); ok && isNumber(v) {
				out.set(k[0], v)
			} else if v, ok := o.get(k[1]); ok && isNumber(v) {
				out.set(k[0], v)
			}
		}
	}
	return out
}

// convertTuple turns positional item schemas into one items schema that
// accepts each of them.
func (g *geminiConverter) convertTuple(list []any, depth int) *object {
	switch len(list) {
	case 0:
		return nil
	case 1:
		return g.convert(list[0], depth+1)
	}
	var branches []*object
	for _, e := range list {
		branches = append(branches, g.convert(e, depth+1))
	}
	return &object{keys: []string{"anyOf"}, vals: []any{objectsToAny(branches)}}
}

func copyInts(out, src *object, keys ...string) {
	for _, k := range keys {
		if v, ok := src.get(k); ok && nonNegativeInt(v) {
			out.set(k, v)
		}
	}
}

func typed(t string) *object { return &object{keys: []string{"type"}, vals: []any{t}} }

// cut is what a schema becomes where a limit stops conversion: its own
// type if it has exactly one, else STRING.
func cut(v any) *object {
	o, ok := v.(*object)
	if !ok {
		return typed("STRING")
	}
	types, _ := schemaTypes(o)
	t := "STRING"
	if len(types) == 1 {
		t = strings.ToUpper(types[0])
	}
	out := typed(t)
	if t == "ARRAY" {
		out.set("items", typed("STRING"))
	}
	return out
}

var jsonTypes = map[string]bool{"string": true, "number": true, "integer": true, "boolean": true, "array": true, "object": true}

// schemaTypes returns the non-null types of o, deduplicated, and whether
// null is allowed ("type" lists "null", or OpenAPI's "nullable": true).
func schemaTypes(o *object) ([]string, bool) {
	var types []string
	nullable := false
	if n, ok := o.get("nullable"); ok && n == true {
		nullable = true
	}
	add := func(t any) {
		s, ok := t.(string)
		if !ok {
			return
		}
		s = strings.ToLower(s)
		if s == "null" {
			nullable = true
		} else if jsonTypes[s] {
			types = appendNew(types, s)
		}
	}
	switch t, _ := o.get("type"); tt := t.(type) {
	case string:
		add(tt)
	case []any:
		for _, e := range tt {
			add(e)
		}
	}
	return types, nullable
}

// inferType guesses the type of a schema that states none, from the
// keywords it uses.
func inferType(o *object) string {
	switch {
	case o.has("properties") || o.has("required") || o.has("additionalProperties"):
		return "object"
	case o.has("items") || o.has("prefixItems") || o.has("minItems") || o.has("maxItems"):
		return "array"
	case o.has("minimum") || o.has("maximum") || o.has("exclusiveMinimum") || o.has("exclusiveMaximum") || o.has("multipleOf"):
		return "number"
	}
	values, _ := o.list("enum")
	if c, ok := o.get("const"); ok {
		values = []any{c}
	}
	t := ""
	for _, v := range values {
		var vt string
		switch x := v.(type) {
		case nil:
			continue
		case string:
			vt = "string"
		case bool:
			vt = "boolean"
		case json.Number:
			vt = "number"
			if nonNegativeInt(x) || (len(x) > 1 && x[0] == '-' && nonNegativeInt(x[1:])) {
				vt = "integer"
			}
		default:
			return "string"
		}
		if t != "" && t != vt {
			if (t == "integer" && vt == "number") || (t == "number" && vt == "integer") {
				t = "number"
				continue
			}
			return "string"
		}
		t = vt
	}
	if t != "" {
		return t
	}
	return "string"
}

// isNullSchema reports whether v accepts only null.
func isNullSchema(v any) bool {
	o, ok := v.(*object)
	if !ok {
		return false
	}
	if t, ok := o.str("type"); ok {
		return t == "null"
	}
	if l, ok := o.list("type"); ok {
		return len(l) == 1 && l[0] == "null"
	}
	if c, ok := o.get("const"); ok {
		return c == nil
	}
	if l, ok := o.list("enum"); ok {
		return len(l) == 1 && l[0] == nil
	}
	return false
}

// inGeminiOrder puts a converted schema's keys in the converter's order after
// a branch was adopted and given a description or nullable.
func inGeminiOrder(o *object) *object {
	order := []string{"type", "format", "description", "nullable", "enum", "properties", "propertyOrdering", "required",
		"minProperties", "maxProperties", "items", "minItems", "maxItems", "minLength", "maxLength", "pattern", "minimum", "maximum", "anyOf"}
	out := &object{}
	for _, k := range order {
		if v, ok := o.get(k); ok {
			out.set(k, v)
		}
	}
	return out
}

func objectsToAny(list []*object) []any {
	out := make([]any, len(list))
	for i, o := range list {
		out[i] = o
	}
	return out
}
