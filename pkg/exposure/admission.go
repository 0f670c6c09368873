package exposure

import (
	"slices"
	"sort"

	"github.com/toolbus/toolbus/pkg/messages"
)

// Tool is a catalog tool with the exposure metadata that the agent's rules
// give it. Definition is the catalog's own definition, shared and never
// modified: the metadata lives only here, so it never reaches a serialised
// model schema. A Tool returned by this package is read-only.
type Tool struct {
	// Name is the canonical "namespace-method" name.
	Name       string
	Definition *messages.ToolDefinition
	// Admitted is false for a tool that no rule admitted and that discovery,
	// activation or a caller choice made visible; it then has no tier,
	// approval or async setting.
	Admitted bool
	// Tier is the effective tier: TierCritical, TierOnDemand or TierBase.
	Tier          Tier
	AlwaysInclude bool
	// Approval and Async come from the last rule that set them; nil when none did.
	Approval *Approval
	Async    *Async
	// Bundles lists the bundles whose rules admitted the tool, in the order
	// they applied; a tool that only the agent's items admitted has none.
	Bundles []string
}

// Admission is the set of tools that an agent's rules admit from one
// catalog snapshot, with their exposure metadata. It is immutable and safe
// for concurrent use.
type Admission struct {
	catalog *Catalog
	tools   []Tool  // sorted by name
	pos     []int32 // catalog index → index in tools, or -1
	// excluded has a bit per catalog tool that some rule excluded and no
	// rule admitted; discovery must not offer those.
	excluded bitmap
	// anyExcluded is false when excluded is empty, as it is for an agent
	// without exclusions: Excluded then answers without looking the
	// name up, which discovery asks of each tool that would make a page.
	anyExcluded bool
	// Bitmaps over tools: shown on every iteration; shown when intake does
	// not narrow; base tools of each bundle, kept when intake selects it.
	always, initial bitmap
	bundleBase      map[string]bitmap
	bundles         []string
}

// Admit expands the agent's rules against the catalog. An agent that the
// workspace does not define, or that names neither bundles nor items, gets
// every bundle. A nil workspace, or one without bundles, stands for one
// bundle per catalog namespace (see DeriveBundles).
func (w *Workspace) Admit(agentID string, cat *Catalog) *Admission {
	rules, bundles := w.rulesFor(agentID, cat)
	return admit(cat, rules, bundles)
}

// ruleRef is a rule as one agent applies it: bundle is the index of its
// bundle in the agent's bundle list, or -1 for the agent's own items.
type ruleRef struct {
	*compiledRule
	bundle int32
}

func (w *Workspace) rulesFor(agentID string, cat *Catalog) ([]ruleRef, []string) {
	var byID map[string]*compiledBundle
	var ordered []*compiledBundle
	if w != nil && len(w.bundles) > 0 {
		byID = w.byID
		ordered = append(ordered, w.bundles...)
		sort.SliceStable(ordered, func(i, j int) bool {
			a, b := &ordered[i].bundle, &ordered[j].bundle
			if a.Priority != b.Priority {
				return a.Priority < b.Priority
			}
			return a.ID < b.ID
		})
	} else {
		byID = make(map[string]*compiledBundle, len(cat.namespaces))
		for _, ns := range cat.namespaces {
			cb := &compiledBundle{bundle: Bundle{ID: ns, Title: ns, Match: []Rule{{Name: ns}}}}
			cb.rules = []compiledRule{{rule: &cb.bundle.Match[0], bundle: ns, name: MustParsePattern(ns)}}
			byID[ns] = cb
			ordered = append(ordered, cb)
		}
	}
	var agent *compiledAgent
	if w != nil {
		agent = w.agents[agentID]
	}
	if agent != nil && (len(agent.agent.Tool.Bundles) > 0 || len(agent.items) > 0) {
		ordered = ordered[:0]
		seen := make(map[string]bool)
		for _, id := range agent.agent.Tool.Bundles {
			if cb, ok := byID[id]; ok && !seen[id] {
				seen[id] = true
				ordered = append(ordered, cb)
			}
		}
	}
	var rules []ruleRef
	bundles := make([]string, 0, len(ordered))
	for bi, cb := range ordered {
		bundles = append(bundles, cb.bundle.ID)
		for i := range cb.rules {
			rules = append(rules, ruleRef{&cb.rules[i], int32(bi)})
		}
	}
	if agent != nil {
		for i := range agent.items {
			rules = append(rules, ruleRef{&agent.items[i], -1})
		}
	}
	return rules, bundles
}

// admitState is what the rules say of one catalog tool. It holds no
// pointers, so that a state per catalog tool costs neither allocation nor
// garbage-collector scanning.
type admitState struct {
	flags uint8
	// approval and async are 1 + the index of the last rule that set them.
	approval, async int32
	// bundle is 1 + the index of the first bundle that admitted the tool;
	// more is 1 + the index in links of the next one.
	bundle, more int32
}

// link chains the second and later bundles of a tool.
type link struct{ bundle, next int32 }

const (
	stateAdmitted uint8 = 1 << iota
	stateCritical
	stateOnDemand
	stateAlways
)

// admit applies the rules, in order, to the catalog tools their names
// match, then builds the admission of the tools they admitted.
func admit(cat *Catalog, rules []ruleRef, bundles []string) *Admission {
	n := cat.Len()
	m := &admitter{cat: cat, states: make([]admitState, n), excluded: newBitmap(n)}
	for ri := range rules {
		r := &rules[ri]
		cat.match(&r.name, func(i int32) { m.apply(ri, r, i) })
	}
	return m.admission(rules, bundles)
}

// admitter is an admission in the making: what the rules applied so far
// say of each catalog tool.
type admitter struct {
	cat      *Catalog
	states   []admitState
	links    []link
	excluded bitmap
	// count is the number of tools admitted; bundleRefs the number of
	// their bundles, all tools together.
	count, bundleRefs int
}

// apply applies rule ri, r, to catalog tool i, which its name matched: a
// tool its exclusions match is excluded, any other admitted.
func (m *admitter) apply(ri int, r *ruleRef, i int32) {
	for k := range r.exclude {
		if r.exclude[k].Match(m.cat.names[i]) {
			m.excluded.set(int(i))
			return
		}
	}
	st := &m.states[i]
	if st.flags&stateAdmitted == 0 {
		st.flags |= stateAdmitted
		m.count++
	}
	switch r.rule.Tier {
	case TierCritical:
		st.flags |= stateCritical
	case TierOnDemand:
		st.flags |= stateOnDemand
	}
	if r.rule.AlwaysInclude {
		st.flags |= stateAlways
	}
	if r.rule.Approval != nil {
		st.approval = int32(ri + 1)
	}
	if r.rule.Async != nil {
		st.async = int32(ri + 1)
	}
	m.addBundle(st, r.bundle)
}

// addBundle adds bundle b to a tool's bundles unless they hold it; b is
// -1 for the agent's own items, which are of no bundle.
func (m *admitter) addBundle(st *admitState, b int32) {
	switch {
	case b < 0 || st.bundle == b+1:
	case st.bundle == 0:
		st.bundle = b + 1
		m.bundleRefs++
	default:
		last := int32(0) // 1 + index in links of the chain's last link
		for l := st.more; l != 0; l = m.links[l-1].next {
			if m.links[l-1].bundle == b {
				return
			}
			last = l
		}
		m.links = append(m.links, link{bundle: b})
		if last == 0 {
			st.more = int32(len(m.links))
		} else {
			m.links[last-1].next = int32(len(m.links))
		}
		m.bundleRefs++
	}
}

// admission is the Admission of the tools the rules admitted, in catalog
// order, with their bitmaps.
func (m *admitter) admission(rules []ruleRef, bundles []string) *Admission {
	count := m.count
	a := &Admission{
		catalog:    m.cat,
		tools:      make([]Tool, 0, count),
		pos:        make([]int32, len(m.states)),
		excluded:   m.excluded,
		always:     newBitmap(count),
		initial:    newBitmap(count),
		bundleBase: make(map[string]bitmap, len(bundles)),
		bundles:    bundles,
	}
	baseOf := make([]bitmap, len(bundles))
	arena := make([]string, 0, m.bundleRefs)
	for i := range m.states {
		st := &m.states[i]
		if st.flags&stateAdmitted == 0 {
			a.pos[i] = -1
			continue
		}
		a.excluded.clear(i)
		k := len(a.tools)
		a.pos[i] = int32(k)
		start := len(arena)
		if st.bundle != 0 {
			arena = append(arena, bundles[st.bundle-1])
			for l := st.more; l != 0; l = m.links[l-1].next {
				arena = append(arena, bundles[m.links[l-1].bundle])
			}
		}
		t := m.tool(i, rules, arena[start:len(arena):len(arena)])
		if t.Tier == TierCritical || t.AlwaysInclude {
			a.always.set(k)
		}
		if t.Tier != TierOnDemand || t.AlwaysInclude {
			a.initial.set(k)
		}
		if t.Tier == TierBase && st.bundle != 0 {
			a.markBase(baseOf, st.bundle-1, k, count)
			for l := st.more; l != 0; l = m.links[l-1].next {
				a.markBase(baseOf, m.links[l-1].bundle, k, count)
			}
		}
		a.tools = append(a.tools, t)
	}
	a.anyExcluded = slices.ContainsFunc(a.excluded, func(word uint64) bool { return word != 0 })
	return a
}

// tool is admitted catalog tool i with what the rules gave it.
func (m *admitter) tool(i int, rules []ruleRef, bundles []string) Tool {
	st := &m.states[i]
	t := Tool{
		Name:          m.cat.keys[i],
		Definition:    &m.cat.defs[i],
		Admitted:      true,
		Tier:          TierBase,
		AlwaysInclude: st.flags&stateAlways != 0,
		Bundles:       bundles,
	}
	if st.approval > 0 {
		t.Approval = rules[st.approval-1].rule.Approval
	}
	if st.async > 0 {
		t.Async = rules[st.async-1].rule.Async
	}
	switch {
	case st.flags&stateCritical != 0:
		t.Tier = TierCritical
	case st.flags&stateOnDemand != 0:
		t.Tier = TierOnDemand
	}
	return t
}

// markBase marks tool k a base tool of bundle b, of count admitted tools.
func (a *Admission) markBase(baseOf []bitmap, b int32, k, count int) {
	if baseOf[b] == nil {
		baseOf[b] = newBitmap(count)
		a.bundleBase[a.bundles[b]] = baseOf[b]
	}
	baseOf[b].set(k)
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// CatalogVersion returns the version of the catalog the admission was computed from.
func (a *Admission) CatalogVersion() uint64 { return a.catalog.version }

// Catalog returns the catalog the admission was computed from.
func (a *Admission) Catalog() *Catalog { return a.catalog }

// Tools returns the admitted tools sorted by name. The slice is the
// admission's own: read it, do not modify it.
func (a *Admission) Tools() []Tool { return a.tools }

// Bundles returns the IDs of the bundles that applied, in order: the
// choices an intake step may offer.
func (a *Admission) Bundles() []string { return a.bundles }

// Lookup finds an admitted tool by its name in any spelling.
func (a *Admission) Lookup(name string) (*Tool, bool) {
	ci, ok := a.catalog.index(name)
	if !ok || a.pos[ci] < 0 {
		return nil, false
	}
	return &a.tools[a.pos[ci]], true
}

// Excluded reports whether a rule of the agent excluded the tool and no
// rule admitted it. Discovery must not offer such a tool.
func (a *Admission) Excluded(name string) bool {
	if !a.anyExcluded {
		return false
	}
	ci, ok := a.catalog.index(name)
	return ok && a.excluded.has(int(ci))
}

// bitmap is a fixed-size set of small integers.
type bitmap []uint64

func newBitmap(n int) bitmap    { return make(bitmap, (n+63)/64) }
func (b bitmap) set(i int)      { b[i>>6] |= 1 << (uint(i) & 63) }
func (b bitmap) clear(i int)    { b[i>>6] &^= 1 << (uint(i) & 63) }
func (b bitmap) has(i int) bool { return b[i>>6]&(1<<(uint(i)&63)) != 0 }
