package exposure

import (
	"slices"
	"strings"

	"github.com/toolbus/toolbus/pkg/messages"
)

// Catalog is an immutable, indexed snapshot of tool definitions. Resolution
// expands patterns against it without scanning tools that cannot match: an
// exact namespace reads only that namespace's tools and an exact name is one
// map lookup.
type Catalog struct {
	version uint64
	defs    []messages.ToolDefinition
	names   []messages.ToolName
	keys    []string // canonical names
	byName  map[string]int32
	// Tools are sorted by canonical name, so each namespace's tools are
	// contiguous ('-' sorts before every character a namespace may hold).
	namespaces []string
	spans      map[string][2]int32
}

// NewCatalog indexes defs. version identifies the content: a Resolver
// reuses what it computed for one version, so every change to the
// definitions must come with a new, higher version (a JetStream KV revision
// does). Definitions whose namespace and method do not form a valid
// messages.ToolName are left out, and so are later duplicates of a name.
// The definitions are copied; the schemas they point to are shared and
// must not be modified afterwards.
func NewCatalog(version uint64, defs []messages.ToolDefinition) *Catalog {
	c := &Catalog{version: version, byName: make(map[string]int32, len(defs)), spans: make(map[string][2]int32)}
	type entry struct {
		key string
		def *messages.ToolDefinition
	}
	entries := make([]entry, 0, len(defs))
	seen := make(map[string]struct{}, len(defs))
	for i := range defs {
		n := defs[i].ToolName()
		if n.Validate() != nil {
			continue
		}
		key := n.String()
		if _, dup := seen[key]; dup {
			continue
		}
		seen[key] = struct{}{}
		entries = append(entries, entry{key, &defs[i]})
	}
	slices.SortFunc(entries, func(a, b entry) int { return strings.Compare(a.key, b.key) })
	c.defs = make([]messages.ToolDefinition, len(entries))
	c.names = make([]messages.ToolName, len(entries))
	c.keys = make([]string, len(entries))
	for i, e := range entries {
		c.defs[i] = *e.def
		c.names[i] = e.def.ToolName()
		c.keys[i] = e.key
		c.byName[e.key] = int32(i)
		ns := c.names[i].Namespace
		if s, ok := c.spans[ns]; ok {
			c.spans[ns] = [2]int32{s[0], int32(i + 1)}
		} else {
			c.spans[ns] = [2]int32{int32(i), int32(i + 1)}
			c.namespaces = append(c.namespaces, ns)
		}
	}
	return c
}

// Version returns the version the catalog was built with.
func (c *Catalog) Version() uint64 { return c.version }

// Len returns the number of tools.
func (c *Catalog) Len() int { return len(c.defs) }

// Definitions returns the tools sorted by canonical name. The slice is the
// catalog's own: read it, do not modify it.
func (c *Catalog) Definitions() []messages.ToolDefinition { return c.defs }

// Lookup finds a tool by its name in any spelling that
// messages.ParseToolName reads. The definition is the catalog's own.
func (c *Catalog) Lookup(name string) (*messages.ToolDefinition, bool) {
	i, ok := c.index(name)
	if !ok {
		return nil, false
	}
	return &c.defs[i], true
}

// index finds a tool by name in any spelling without allocating: it
// rewrites the name into the canonical form in a stack buffer, splitting it
// exactly as messages.ParseToolName does. A key that is in the map is valid
// by construction, so no further validation is needed.
func (c *Catalog) index(name string) (int32, bool) {
	if i, ok := c.byName[name]; ok {
		return i, true
	}
	if len(name) > messages.MaxToolNameLength+8 {
		return 0, false
	}
	var buf [messages.MaxToolNameLength + 8]byte
	var ns, method string
	var colon, slash bool
	if i := strings.IndexByte(name, ':'); i >= 0 {
		ns, method, colon = name[:i], name[i+1:], true
	} else if i := strings.LastIndexByte(name, '/'); i >= 0 {
		ns, method, slash = name[:i], name[i+1:], true
	} else if i := strings.IndexByte(name, '.'); i >= 0 {
		ns, method = name[:i], name[i+1:]
	} else {
		return 0, false // canonical, and not found above
	}
	key := buf[:0]
	for k := 0; k < len(ns); k++ {
		b := ns[k]
		if (colon || slash) && b == '/' || colon && b == '.' {
			b = '_'
		}
		key = append(key, b)
	}
	key = append(key, '-')
	key = append(key, method...)
	i, ok := c.byName[string(key)]
	return i, ok
}

// Match returns the tools that p matches, sorted by canonical name.
func (c *Catalog) Match(p Pattern) []*messages.ToolDefinition {
	var out []*messages.ToolDefinition
	c.match(&p, func(i int32) { out = append(out, &c.defs[i]) })
	return out
}

// match calls fn with the index of every tool p matches, in index order.
func (c *Catalog) match(p *Pattern, fn func(int32)) {
	if ns, ok := p.namespace.Literal(); ok {
		c.matchNamespace(p, ns, fn)
		return
	}
	for _, ns := range c.namespaces {
		if p.namespace.Match(ns) {
			c.matchNamespace(p, ns, fn)
		}
	}
}

func (c *Catalog) matchNamespace(p *Pattern, ns string, fn func(int32)) {
	if method, ok := p.method.Literal(); ok {
		var buf [2 * messages.MaxToolNameLength]byte
		key := append(append(append(buf[:0], ns...), '-'), method...)
		if i, ok := c.byName[string(key)]; ok {
			fn(i)
		}
		return
	}
	span, ok := c.spans[ns]
	if !ok {
		return
	}
	for i := span[0]; i < span[1]; i++ {
		if p.method.Match(c.names[i].Method) {
			fn(i)
		}
	}
}
