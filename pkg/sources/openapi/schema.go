package openapi

import (
	"slices"

	"github.com/getkin/kin-openapi/openapi3"
)

// jsonSchema turns an OpenAPI schema into a self-contained JSON Schema
// (draft 2020-12): references are inlined, OpenAPI 3.0's nullable and
// boolean exclusive bounds are rewritten, and keywords that only OpenAPI
// knows (discriminator, xml, externalDocs) are dropped. A schema that
// contains itself is cut at the repetition, where any value is accepted.
func jsonSchema(ref *openapi3.SchemaRef) any {
	return convertSchema(ref, map[*openapi3.Schema]bool{})
}

func convertSchema(ref *openapi3.SchemaRef, open map[*openapi3.Schema]bool) any {
	if ref == nil || ref.Value == nil {
		return map[string]any{}
	}
	s := ref.Value
	if s.Always != nil {
		return *s.Always
	}
	if open[s] {
		return map[string]any{}
	}
	open[s] = true
	defer delete(open, s)

	out := map[string]any{}
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
	set := func(key string, value any, ok bool) {
		if ok {
			out[key] = value
		}
	}
	set("title", s.Title, s.Title != "")
	set("description", s.Description, s.Description != "")
	set("format", s.Format, s.Format != "")
	if len(s.Enum) > 0 {
		enum := slices.Clone(s.Enum)
		if s.Nullable && !slices.Contains(enum, nil) {
			enum = append(enum, nil)
		}
		out["enum"] = enum
	}
	set("default", s.Default, s.Default != nil)
	set("const", s.Const, s.Const != nil)
	switch {
	case len(s.Examples) > 0:
		out["examples"] = s.Examples
	case s.Example != nil:
		out["examples"] = []any{s.Example}
	}
	set("deprecated", true, s.Deprecated)
	set("readOnly", true, s.ReadOnly)
	set("writeOnly", true, s.WriteOnly)

	bound := func(name, exclusiveName string, value *float64, exclusive openapi3.ExclusiveBound) {
		switch {
		case exclusive.Value != nil:
			out[exclusiveName] = *exclusive.Value
			set(name, deref(value), value != nil)
		case exclusive.IsTrue() && value != nil:
			out[exclusiveName] = *value
		default:
			set(name, deref(value), value != nil)
		}
	}
	bound("minimum", "exclusiveMinimum", s.Min, s.ExclusiveMin)
	bound("maximum", "exclusiveMaximum", s.Max, s.ExclusiveMax)
	set("multipleOf", deref(s.MultipleOf), s.MultipleOf != nil)
	set("minLength", s.MinLength, s.MinLength > 0)
	set("maxLength", derefUint(s.MaxLength), s.MaxLength != nil)
	set("pattern", s.Pattern, s.Pattern != "")
	set("minItems", s.MinItems, s.MinItems > 0)
	set("maxItems", derefUint(s.MaxItems), s.MaxItems != nil)
	set("uniqueItems", true, s.UniqueItems)
	set("minProperties", s.MinProps, s.MinProps > 0)
	set("maxProperties", derefUint(s.MaxProps), s.MaxProps != nil)
	set("minContains", derefUint(s.MinContains), s.MinContains != nil)
	set("maxContains", derefUint(s.MaxContains), s.MaxContains != nil)
	set("contentMediaType", s.ContentMediaType, s.ContentMediaType != "")
	set("contentEncoding", s.ContentEncoding, s.ContentEncoding != "")

	one := func(key string, r *openapi3.SchemaRef) {
		if r != nil {
			out[key] = convertSchema(r, open)
		}
	}
	many := func(key string, rs openapi3.SchemaRefs) {
		if len(rs) == 0 {
			return
		}
		list := make([]any, len(rs))
		for i, r := range rs {
			list[i] = convertSchema(r, open)
		}
		out[key] = list
	}
	named := func(key string, m openapi3.Schemas) {
		if len(m) == 0 {
			return
		}
		props := make(map[string]any, len(m))
		for name, r := range m {
			props[name] = convertSchema(r, open)
		}
		out[key] = props
	}
	boolOrSchema := func(key string, b openapi3.BoolSchema) {
		switch {
		case b.Schema != nil:
			out[key] = convertSchema(b.Schema, open)
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
	if len(s.Required) > 0 {
		out["required"] = slices.Clone(s.Required)
	}
	if len(s.DependentRequired) > 0 {
		out["dependentRequired"] = s.DependentRequired
	}
	return out
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
