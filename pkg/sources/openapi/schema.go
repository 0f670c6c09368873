package openapi

import (
	"bytes"
	"encoding/json"
	"errors"
	"maps"
	"slices"
	"strings"
	"sync"

	"github.com/getkin/kin-openapi/openapi3"
	"go.yaml.in/yaml/v3"
)

// jsonSchema turns an OpenAPI schema into a self-contained JSON Schema
// (draft 2020-12): references are inlined, OpenAPI 3.0's nullable and
// boolean exclusive bounds are rewritten, and keywords that only OpenAPI
// knows (discriminator, xml, externalDocs) are dropped. A schema that
// contains itself is cut at the repetition, where any value is accepted.
// Properties keep their declaration order when order knows it.
//
// A schema that refers to another several times is copied as many times;
// budget, when not nil, counts the subschemas written and, once it is
// spent, the rest are written as {} and budget.spent says so.
func jsonSchema(ref *openapi3.SchemaRef, order *propertyOrder, budget *schemaBudget) any {
	if budget == nil {
		budget = newSchemaBudget()
	}
	c := &converter{order: order, open: map[*openapi3.Schema]bool{}, budget: budget}
	return c.convert(ref)
}

// maxInlinedSchemas bounds the subschemas of one tool's input schema, and
// of its output schema, once references are inlined. References can make a
// small document's schema grow exponentially (each of a chain of schemas
// referring twice to the next); a real API's largest schemas hold a few
// thousand.
const maxInlinedSchemas = 10_000

// errSchemaTooLarge is why an operation whose input schema exceeds
// maxInlinedSchemas is not served.
var errSchemaTooLarge = errors.New("input schema too large")

// schemaBudget counts the subschemas left to write.
type schemaBudget struct {
	left  int
	spent bool
}

func newSchemaBudget() *schemaBudget { return &schemaBudget{left: maxInlinedSchemas} }

type converter struct {
	order *propertyOrder
	// open holds the schemas being converted, to cut a schema that contains itself.
	open   map[*openapi3.Schema]bool
	budget *schemaBudget
}

// convert is the JSON Schema of ref: {} once the budget is spent, and
// where ref's schema is one being converted already (it contains itself).
func (c *converter) convert(ref *openapi3.SchemaRef) any {
	if ref == nil || ref.Value == nil {
		return map[string]any{}
	}
	if c.budget.left <= 0 {
		c.budget.spent = true
		return map[string]any{}
	}
	c.budget.left--
	s := ref.Value
	if s.Always != nil {
		return *s.Always
	}
	if c.open[s] {
		return map[string]any{}
	}
	c.open[s] = true
	defer delete(c.open, s)

	out := map[string]any{}
	typeKeywords(out, s)
	annotationKeywords(out, s)
	boundKeywords(out, s)
	c.subschemaKeywords(out, s)
	if len(s.Required) > 0 {
		out["required"] = slices.Clone(s.Required)
	}
	if len(s.DependentRequired) > 0 {
		out["dependentRequired"] = s.DependentRequired
	}
	return out
}

// setIf sets out[key] to value if ok.
func setIf(out map[string]any, key string, value any, ok bool) {
	if ok {
		out[key] = value
	}
}

// typeKeywords writes the schema's type: OpenAPI 3.0's nullable adds
// "null" to it.
func typeKeywords(out map[string]any, s *openapi3.Schema) {
	var types []string
	if s.Type != nil {
		types = slices.Clone(s.Type.Slice())
	}
	if s.Nullable && len(types) > 0 && !slices.Contains(types, "null") {
		types = append(types, "null")
	}
	switch len(types) {
	case 0:
	case 1:
		out["type"] = types[0]
	default:
		out["type"] = types
	}
}

// annotationKeywords writes what describes the values rather than bounds
// them, and the enum, which nullable extends with null.
func annotationKeywords(out map[string]any, s *openapi3.Schema) {
	setIf(out, "title", s.Title, s.Title != "")
	setIf(out, "description", s.Description, s.Description != "")
	setIf(out, "format", s.Format, s.Format != "")
	if len(s.Enum) > 0 {
		enum := slices.Clone(s.Enum)
		if s.Nullable && !slices.Contains(enum, nil) {
			enum = append(enum, nil)
		}
		out["enum"] = enum
	}
	setIf(out, "default", s.Default, s.Default != nil)
	setIf(out, "const", s.Const, s.Const != nil)
	switch {
	case len(s.Examples) > 0:
		out["examples"] = s.Examples
	case s.Example != nil:
		out["examples"] = []any{s.Example}
	}
	setIf(out, "deprecated", true, s.Deprecated)
	setIf(out, "readOnly", true, s.ReadOnly)
	setIf(out, "writeOnly", true, s.WriteOnly)
}

// boundKeywords writes the bounds of numbers, strings, arrays and
// objects. OpenAPI 3.0's boolean exclusiveMinimum and exclusiveMaximum
// make the bound they mark exclusive.
func boundKeywords(out map[string]any, s *openapi3.Schema) {
	bound := func(name, exclusiveName string, value *float64, exclusive openapi3.ExclusiveBound) {
		switch {
		case exclusive.Value != nil:
			out[exclusiveName] = *exclusive.Value
			setIf(out, name, deref(value), value != nil)
		case exclusive.IsTrue() && value != nil:
			out[exclusiveName] = *value
		default:
			setIf(out, name, deref(value), value != nil)
		}
	}
	bound("minimum", "exclusiveMinimum", s.Min, s.ExclusiveMin)
	bound("maximum", "exclusiveMaximum", s.Max, s.ExclusiveMax)
	setIf(out, "multipleOf", deref(s.MultipleOf), s.MultipleOf != nil)
	setIf(out, "minLength", s.MinLength, s.MinLength > 0)
	setIf(out, "maxLength", derefUint(s.MaxLength), s.MaxLength != nil)
	setIf(out, "pattern", s.Pattern, s.Pattern != "")
	setIf(out, "minItems", s.MinItems, s.MinItems > 0)
	setIf(out, "maxItems", derefUint(s.MaxItems), s.MaxItems != nil)
	setIf(out, "uniqueItems", true, s.UniqueItems)
	setIf(out, "minProperties", s.MinProps, s.MinProps > 0)
	setIf(out, "maxProperties", derefUint(s.MaxProps), s.MaxProps != nil)
	setIf(out, "minContains", derefUint(s.MinContains), s.MinContains != nil)
	setIf(out, "maxContains", derefUint(s.MaxContains), s.MaxContains != nil)
	setIf(out, "contentMediaType", s.ContentMediaType, s.ContentMediaType != "")
	setIf(out, "contentEncoding", s.ContentEncoding, s.ContentEncoding != "")
}

// subschemaKeywords converts the schema's subschemas, in an order that
// does not change: the budget is spent in it.
func (c *converter) subschemaKeywords(out map[string]any, s *openapi3.Schema) {
	one := func(key string, r *openapi3.SchemaRef) {
		if r != nil {
			out[key] = c.convert(r)
		}
	}
	many := func(key string, rs openapi3.SchemaRefs) {
		if len(rs) == 0 {
			return
		}
		list := make([]any, len(rs))
		for i, r := range rs {
			list[i] = c.convert(r)
		}
		out[key] = list
	}
	named := func(key string, m openapi3.Schemas) {
		if len(m) == 0 {
			return
		}
		props := orderedObject{keys: c.order.of(m), values: make(map[string]any, len(m))}
		for name, r := range m {
			props.values[name] = c.convert(r)
		}
		out[key] = props
	}
	boolOrSchema := func(key string, b openapi3.BoolSchema) {
		switch {
		case b.Schema != nil:
			out[key] = c.convert(b.Schema)
		case b.Has != nil:
			out[key] = *b.Has
		}
	}
	one("items", s.Items)
	one("not", s.Not)
	one("contains", s.Contains)
	one("propertyNames", s.PropertyNames)
	one("if", s.If)
	one("then", s.Then)
	one("else", s.Else)
	many("allOf", s.AllOf)
	many("anyOf", s.AnyOf)
	many("oneOf", s.OneOf)
	many("prefixItems", s.PrefixItems)
	named("properties", s.Properties)
	named("patternProperties", s.PatternProperties)
	named("dependentSchemas", s.DependentSchemas)
	boolOrSchema("additionalProperties", s.AdditionalProperties)
	boolOrSchema("unevaluatedItems", s.UnevaluatedItems)
	boolOrSchema("unevaluatedProperties", s.UnevaluatedProperties)
}

func deref(f *float64) any {
	if f == nil {
		return nil
	}
	return *f
}

func derefUint(u *uint64) any {
	if u == nil {
		return nil
	}
	return *u
}

// isObject reports whether a schema describes a plain object whose
// properties can sit beside the parameters.
func isObject(ref *openapi3.SchemaRef) bool {
	if ref == nil || ref.Value == nil {
		return false
	}
	s := ref.Value
	if len(s.AllOf)+len(s.AnyOf)+len(s.OneOf) > 0 || s.Not != nil || len(s.Properties) == 0 {
		return false
	}
	return s.Type == nil || s.Type.Is("object")
}

// propertyOrder remembers the order in which the documents of a spec
// declare the properties of their schemas. The loader keeps properties in a
// map, which has no order, yet a model reads a schema's properties in the
// order they come; so the order is read from the documents' text, where
// every "properties" mapping is known by the set of its names.
type propertyOrder struct {
	mu sync.Mutex
	// byNames maps the sorted names of a "properties" mapping, joined by
	// NUL, to the order they were written in; the first mapping seen with
	// that set of names decides.
	byNames map[string][]string
}

// learn records the order of every "properties" mapping of a document.
// A document that does not parse teaches nothing: the loader reports it.
func (o *propertyOrder) learn(data []byte) {
	var root yaml.Node
	if yaml.Unmarshal(data, &root) != nil {
		return
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.byNames == nil {
		o.byNames = map[string][]string{}
	}
	var walk func(n *yaml.Node)
	walk = func(n *yaml.Node) {
		if n == nil {
			return
		}
		if n.Kind == yaml.MappingNode {
			for i := 0; i+1 < len(n.Content); i += 2 {
				key, value := n.Content[i], n.Content[i+1]
				if key.Value == "properties" && value.Kind == yaml.MappingNode {
					names := make([]string, 0, len(value.Content)/2)
					for j := 0; j+1 < len(value.Content); j += 2 {
						names = append(names, value.Content[j].Value)
					}
					set := namesKey(names)
					if _, seen := o.byNames[set]; !seen {
						o.byNames[set] = names
					}
				}
			}
		}
		for _, child := range n.Content {
			walk(child)
		}
	}
	walk(&root)
}

// of returns the names of properties in their declaration order, or sorted
// when it is not known.
func (o *propertyOrder) of(properties openapi3.Schemas) []string {
	names := slices.Sorted(maps.Keys(properties))
	if o == nil {
		return names
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	if declared, ok := o.byNames[namesKey(names)]; ok && len(declared) == len(names) {
		return slices.Clone(declared)
	}
	return names
}

func namesKey(names []string) string {
	sorted := slices.Clone(names)
	slices.Sort(sorted)
	return strings.Join(sorted, "\x00")
}

// orderedObject is a JSON object whose members are written in the order of keys.
type orderedObject struct {
	keys   []string
	values map[string]any
}

func (o orderedObject) MarshalJSON() ([]byte, error) {
	var b bytes.Buffer
	b.WriteByte('{')
	for i, k := range o.keys {
		if i > 0 {
			b.WriteByte(',')
		}
		key, err := json.Marshal(k)
		if err != nil {
			return nil, err
		}
		value, err := json.Marshal(o.values[k])
		if err != nil {
			return nil, err
		}
		b.Write(key)
		b.WriteByte(':')
		b.Write(value)
	}
	b.WriteByte('}')
	return b.Bytes(), nil
}
