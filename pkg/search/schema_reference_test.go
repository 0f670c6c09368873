package search

import "encoding/json"

// The schema walk as it was written first, on encoding/json: the reference
// that the hand-written scanner must agree with.

// schemaNode is the part of a JSON Schema that describes parameters.
type schemaNode struct {
	Title       string                 `json:"title"`
	Description string                 `json:"description"`
	Properties  map[string]*schemaNode `json:"properties"`
	// Items is one schema, or an array of schemas in old drafts.
	Items json.RawMessage `json:"items"`
	Enum  []any           `json:"enum"`
	AnyOf []*schemaNode   `json:"anyOf"`
	OneOf []*schemaNode   `json:"oneOf"`
	AllOf []*schemaNode   `json:"allOf"`
}

// walkSchema adds the property names of node to FieldParamName and their
// descriptions to FieldParamDescription, recursing into nested objects, array items
// and alternatives. describe says whether node's own description belongs to
// a parameter (the root's describes the whole tool, which has its own field).
func (a *analyzer) walkSchemaReference(node *schemaNode, depth int, describe bool) {
	if node == nil || depth > maxSchemaDepth {
		return
	}
	names, descriptions := &a.fields[FieldParamName], &a.fields[FieldParamDescription]
	if describe {
		*descriptions = a.tokens(*descriptions, node.Title)
		*descriptions = a.tokens(*descriptions, node.Description)
		for _, v := range node.Enum {
			if s, ok := v.(string); ok {
				*descriptions = a.tokens(*descriptions, s)
			}
		}
	}
	for name, prop := range node.Properties {
		*names = a.tokens(*names, name)
		a.walkSchemaReference(prop, depth+1, true)
	}
	if len(node.Items) > 0 {
		var item schemaNode
		if json.Unmarshal(node.Items, &item) == nil {
			a.walkSchemaReference(&item, depth+1, true)
		} else {
			var items []*schemaNode
			if json.Unmarshal(node.Items, &items) == nil {
				for _, it := range items {
					a.walkSchemaReference(it, depth+1, true)
				}
			}
		}
	}
	for _, alts := range [][]*schemaNode{node.AnyOf, node.OneOf, node.AllOf} {
		for _, alt := range alts {
			a.walkSchemaReference(alt, depth+1, describe)
		}
	}
}
