package schemacost

import (
	"maps"
	"slices"

	"github.com/santhosh-tekuri/jsonschema/v6"
)

// node is one compiled subschema with the subschemas it applies: at the
// same place of the value (inPlace), or one level down.
type node struct {
	location string
	inPlace  []int

	// Array items: position i < len(prefix) gets prefix[i], later ones
	// rest; every item gets anyItem.
	prefix  []int
	rest    []int
	anyItem []int

	// Object members: a named property gets props[name], members whose
	// key a pattern matches get that pattern's schema, the others
	// additional; every member gets anyMember.
	props      map[string]int
	patterns   []pattern
	additional int // -1 when none
	anyMember  []int
	// matched caches, per property name, the targets of the patterns
	// that match it.
	matched map[string][]int
}

type pattern struct {
	re     jsonschema.Regexp
	target int
}

// graph is a compiled schema as numbered nodes; node 0 is the root.
type graph struct {
	nodes []node
	// keys lists every property name any node names, sorted.
	keys []string
	// maxPrefix is the longest tuple (prefixItems) of any node.
	maxPrefix int
	// unbounded is the location of a dynamic reference whose target is
	// not known before validation; empty when there is none.
	unbounded string
	// work counts the steps of Check, which stops at maxWork.
	work int
	// order lists the nodes so that each comes before those it applies
	// in place; pos is each node's index in it.
	order []int
	pos   []int
}

func buildGraph(root *jsonschema.Schema) *graph {
	g := &graph{}
	index := map[*jsonschema.Schema]int{}
	var queue []*jsonschema.Schema
	id := func(s *jsonschema.Schema) int {
		if i, ok := index[s]; ok {
			return i
		}
		i := len(g.nodes)
		index[s] = i
		g.nodes = append(g.nodes, node{location: s.Location, additional: -1})
		queue = append(queue, s)
		return i
	}
	ids := func(ss []*jsonschema.Schema) []int {
		out := make([]int, 0, len(ss))
		for _, s := range ss {
			if s != nil {
				out = append(out, id(s))
			}
		}
		return out
	}
	id(root)
	// Dynamic and recursive references resolve at validation time to a
	// schema of the dynamic scope; any schema with the anchor can be it.
	var all []*jsonschema.Schema
	for len(queue) > 0 {
		s := queue[0]
		queue = queue[1:]
		all = append(all, s)
		for _, c := range children(s) {
			id(c)
		}
	}
	for _, s := range all {
		n := &g.nodes[index[s]]
		var inPlace []*jsonschema.Schema
		inPlace = append(inPlace, s.Ref, s.Not, s.If, s.Then, s.Else, s.ContentSchema)
		inPlace = append(inPlace, s.AllOf...)
		inPlace = append(inPlace, s.AnyOf...)
		inPlace = append(inPlace, s.OneOf...)
		for _, k := range slices.Sorted(maps.Keys(s.DependentSchemas)) {
			inPlace = append(inPlace, s.DependentSchemas[k])
		}
		for _, k := range slices.Sorted(maps.Keys(s.Dependencies)) {
			if d, ok := s.Dependencies[k].(*jsonschema.Schema); ok {
				inPlace = append(inPlace, d)
			}
		}
		// A dynamic reference resolves, when the value is validated, to
		// the outermost schema of the dynamic scope with the anchor. The
		// root opens every scope: when it has the anchor, it is the
		// target. Otherwise the target could be a schema that no static
		// reference reaches, so the cost is not bounded.
		if r := s.RecursiveRef; r != nil {
			switch {
			case !r.RecursiveAnchor:
				inPlace = append(inPlace, r)
			case root.RecursiveAnchor:
				inPlace = append(inPlace, r, root)
			default:
				g.unbounded = s.Location
			}
		}
		if r := s.DynamicRef; r != nil {
			switch {
			case r.Anchor == "":
				inPlace = append(inPlace, r.Ref)
			case root.DynamicAnchor == r.Anchor:
				inPlace = append(inPlace, root)
			default:
				g.unbounded = s.Location
			}
		}
		n.inPlace = ids(inPlace)

		n.prefix = ids(s.PrefixItems)
		switch items := s.Items.(type) {
		case []*jsonschema.Schema:
			n.prefix = ids(items)
			if add, ok := s.AdditionalItems.(*jsonschema.Schema); ok {
				n.rest = ids([]*jsonschema.Schema{add})
			}
		case *jsonschema.Schema:
			n.anyItem = ids([]*jsonschema.Schema{items})
		}
		n.rest = append(n.rest, ids([]*jsonschema.Schema{s.Items2020})...)
		n.anyItem = append(n.anyItem, ids([]*jsonschema.Schema{s.Contains, s.UnevaluatedItems})...)
		g.maxPrefix = max(g.maxPrefix, len(n.prefix))

		if len(s.Properties) > 0 {
			n.props = map[string]int{}
			for k, p := range s.Properties {
				n.props[k] = id(p)
			}
		}
		for _, re := range slices.SortedFunc(maps.Keys(s.PatternProperties), func(a, b jsonschema.Regexp) int {
			return cmpString(a.String(), b.String())
		}) {
			n.patterns = append(n.patterns, pattern{re: re, target: id(s.PatternProperties[re])})
		}
		if add, ok := s.AdditionalProperties.(*jsonschema.Schema); ok && add != nil {
			n.additional = id(add)
		}
		n.anyMember = ids([]*jsonschema.Schema{s.PropertyNames, s.UnevaluatedProperties})
	}
	keys := map[string]bool{}
	for _, n := range g.nodes {
		for k := range n.props {
			keys[k] = true
		}
	}
	g.keys = slices.Sorted(maps.Keys(keys))
	return g
}

func cmpString(a, b string) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// children lists every subschema s refers to, for the walk that numbers them.
func children(s *jsonschema.Schema) []*jsonschema.Schema {
	out := []*jsonschema.Schema{s.Ref, s.RecursiveRef, s.Not, s.If, s.Then, s.Else, s.ContentSchema,
		s.PropertyNames, s.UnevaluatedProperties, s.Contains, s.Items2020, s.UnevaluatedItems}
	if s.DynamicRef != nil {
		out = append(out, s.DynamicRef.Ref)
	}
	out = append(out, s.AllOf...)
	out = append(out, s.AnyOf...)
	out = append(out, s.OneOf...)
	out = append(out, s.PrefixItems...)
	for _, k := range slices.Sorted(maps.Keys(s.DependentSchemas)) {
		out = append(out, s.DependentSchemas[k])
	}
	for _, k := range slices.Sorted(maps.Keys(s.Dependencies)) {
		if d, ok := s.Dependencies[k].(*jsonschema.Schema); ok {
			out = append(out, d)
		}
	}
	for _, k := range slices.Sorted(maps.Keys(s.Properties)) {
		out = append(out, s.Properties[k])
	}
	for _, p := range s.PatternProperties {
		out = append(out, p)
	}
	switch items := s.Items.(type) {
	case []*jsonschema.Schema:
		out = append(out, items...)
	case *jsonschema.Schema:
		out = append(out, items)
	}
	if add, ok := s.AdditionalItems.(*jsonschema.Schema); ok {
		out = append(out, add)
	}
	if add, ok := s.AdditionalProperties.(*jsonschema.Schema); ok {
		out = append(out, add)
	}
	return slices.DeleteFunc(out, func(c *jsonschema.Schema) bool { return c == nil })
}
