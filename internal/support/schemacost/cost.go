package schemacost

import (
	"encoding/binary"
	"fmt"
	"math"
	"slices"

	"github.com/santhosh-tekuri/jsonschema/v6"
)

// Check reports a *CostError when validating a value against sch can
// evaluate more than MaxEvaluationsPerValue subschemas at one place of the
// value, at any depth up to MaxDepth, or when sch applies itself to the
// same place in a cycle.
//
// Two upper bounds are computed level by level, and the smaller counts.
// Forward, counts[i] bounds how many times node i is evaluated at one
// place of the current depth: one level down, a place is an array item or
// an object member; for every kind of place (each tuple position, any
// later item, each property name, any other key) the counts it receives
// are computed, in-place applicators followed in topological order, and
// the largest per node kept. Backward, see backward. A bound stops
// changing (or cycles, as when objects and arrays alternate) or exceeds
// the budget within a few levels for every schema seen in practice; it
// is followed to MaxDepth otherwise.
func Check(sch *jsonschema.Schema) error {
	g := buildGraph(sch)
	if g.unbounded != "" {
		return &CostError{Depth: -1, Location: g.unbounded, Reason: "a dynamic reference to an anchor that the root schema does not declare could lead anywhere"}
	}
	order, cycleAt := g.inPlaceOrder()
	if cycleAt >= 0 {
		return &CostError{Depth: -1, Location: g.nodes[cycleAt].location, Reason: "the schema applies itself to the same value in a cycle"}
	}
	g.order = order
	g.pos = make([]int, len(g.nodes))
	for p, i := range order {
		g.pos[i] = p
	}
	counts := make([]float64, len(g.nodes))
	counts[0] = 1
	g.spread(counts)
	back := newBackward(g)
	forward, backward := newSeries(), newSeries()
	for depth := 0; ; depth++ {
		forward.add(counts)
		backward.add(back.from)
		if bound := min(sum(counts), back.root()); bound > MaxEvaluationsPerValue {
			return &CostError{Depth: depth, Evaluations: bound, Location: g.nodes[argmax(counts)].location}
		}
		if g.work > maxWork {
			return &CostError{Depth: -1, Location: g.nodes[0].location, Reason: fmt.Sprintf("the schema is too large to bound (%d nodes, %d property names)", len(g.nodes), len(g.keys))}
		}
		if depth == MaxDepth || forward.settled(sum) || backward.settled(func([]float64) float64 { return back.root() }) {
			return nil
		}
		counts = g.descend(counts)
		back.step()
	}
}

// maxWork bounds the steps Check takes, about a tenth of a second: a
// schema large enough to take longer is refused rather than bounded.
const maxWork = 20_000_000

// spend counts n steps of work and reports whether Check must give up.
func (g *graph) spend(n int) bool {
	g.work += n
	return g.work > maxWork
}

// matching lists the targets of node i's patterns that key k matches.
func (g *graph) matching(i int, k string) []int {
	n := &g.nodes[i]
	if n.matched == nil {
		n.matched = map[string][]int{}
	}
	if m, ok := n.matched[k]; ok {
		return m
	}
	g.work += 20 * len(n.patterns) // a regular expression costs more than a step
	var m []int
	for _, p := range n.patterns {
		if p.re.MatchString(k) {
			m = append(m, p.target)
		}
	}
	n.matched[k] = m
	return m
}

// series remembers the vectors a bound went through. Each level's vector
// depends only on the one before, so once a vector comes again the bound
// cycles through values already seen, at every deeper level.
type series struct {
	seen     map[string]bool
	repeated bool
	// worst is the largest bound seen so far.
	worst float64
	last  []float64
}

func newSeries() *series { return &series{seen: map[string]bool{}} }

func (s *series) add(v []float64) {
	key := make([]byte, 0, 8*len(v))
	for _, x := range v {
		key = binary.LittleEndian.AppendUint64(key, math.Float64bits(x))
	}
	s.repeated = s.seen[string(key)]
	s.seen[string(key)] = true
	s.last = v
}

// settled reports whether the bound (total of the last vector) can no
// longer pass the budget at any deeper level.
func (s *series) settled(total func([]float64) float64) bool {
	s.worst = max(s.worst, total(s.last))
	return s.repeated && s.worst <= MaxEvaluationsPerValue
}

// inPlaceOrder sorts the nodes so that each comes before the nodes it
// applies in place. cycleAt is a node on a cycle, or -1.
func (g *graph) inPlaceOrder() (order []int, cycleAt int) {
	const (
		unseen = iota
		open
		done
	)
	state := make([]uint8, len(g.nodes))
	cycleAt = -1
	var visit func(i int) bool
	visit = func(i int) bool {
		switch state[i] {
		case open:
			cycleAt = i
			return false
		case done:
			return true
		}
		state[i] = open
		for _, j := range g.nodes[i].inPlace {
			if !visit(j) {
				return false
			}
		}
		state[i] = done
		order = append(order, i)
		return true
	}
	for i := range g.nodes {
		if !visit(i) {
			return nil, cycleAt
		}
	}
	slices.Reverse(order)
	return order, -1
}

// spread adds to counts the evaluations of the in-place applicators.
func (g *graph) spread(counts []float64) {
	for _, i := range g.order {
		if c := counts[i]; c > 0 {
			for _, j := range g.nodes[i].inPlace {
				counts[j] += c
			}
		}
	}
}

// spreadSparse is spread for counts held by few nodes: it visits only
// the nodes they apply in place.
func (g *graph) spreadSparse(counts map[int]float64) {
	var seen []int
	mark := map[int]bool{}
	var visit func(i int)
	visit = func(i int) {
		if mark[i] {
			return
		}
		mark[i] = true
		seen = append(seen, i)
		for _, j := range g.nodes[i].inPlace {
			visit(j)
		}
	}
	for i := range counts {
		visit(i)
	}
	g.work += 4 * len(seen) // sorted and spread
	slices.SortFunc(seen, func(a, b int) int { return g.pos[a] - g.pos[b] })
	for _, i := range seen {
		if c := counts[i]; c != 0 {
			for _, j := range g.nodes[i].inPlace {
				counts[j] += c
			}
		}
	}
}

// descend returns, per node, the most evaluations it can get at one place
// one level below a place with counts.
func (g *graph) descend(counts []float64) []float64 {
	next := make([]float64, len(counts))
	item := make([]float64, len(counts))
	for position := 0; position <= g.maxPrefix; position++ {
		clear(item)
		if g.spend(len(counts)) {
			return next
		}
		for i, c := range counts {
			if c == 0 {
				continue
			}
			n := &g.nodes[i]
			if position < len(n.prefix) {
				item[n.prefix[position]] += c
			} else {
				for _, j := range n.rest {
					item[j] += c
				}
			}
			for _, j := range n.anyItem {
				item[j] += c
			}
		}
		g.spread(item)
		maxInto(next, item)
	}

	// A member with a key no property names gets every pattern's schema
	// and the additional one (at worst; a key matches patterns or takes
	// additionalProperties, not both). A named key's member gets, per
	// node, what that key gets there instead: the difference is kept per
	// (key, node) and only the largest counts.
	other := make([]float64, len(counts))
	delta := map[string]map[int]float64{}
	add := func(k string, node int, c float64) {
		d := delta[k]
		if d == nil {
			d = map[int]float64{}
			delta[k] = d
		}
		d[node] += c
	}
	for i, c := range counts {
		if c == 0 {
			continue
		}
		n := &g.nodes[i]
		for _, p := range n.patterns {
			other[p.target] += c
		}
		if n.additional >= 0 {
			other[n.additional] += c
		}
		for _, j := range n.anyMember {
			other[j] += c
		}
		keys := g.keys
		if len(n.patterns) == 0 {
			keys = nil
			for k := range n.props {
				keys = append(keys, k)
			}
		}
		if g.spend(len(keys) * (1 + len(n.patterns))) {
			return next
		}
		for _, k := range keys {
			for _, p := range n.patterns {
				add(k, p.target, -c)
			}
			if n.additional >= 0 {
				add(k, n.additional, -c)
			}
			matched := false
			if t, ok := n.props[k]; ok {
				add(k, t, c)
				matched = true
			}
			for _, t := range g.matching(i, k) {
				add(k, t, c)
				matched = true
			}
			if !matched && n.additional >= 0 {
				add(k, n.additional, c)
			}
		}
	}
	g.spread(other)
	worstDelta := make([]float64, len(counts))
	for _, d := range delta {
		if g.spend(len(d)) {
			return next
		}
		g.spreadSparse(d)
		for i, v := range d {
			worstDelta[i] = max(worstDelta[i], v)
		}
	}
	for i := range other {
		other[i] += worstDelta[i]
	}
	maxInto(next, other)
	return next
}

func maxInto(dst, src []float64) {
	for i, v := range src {
		dst[i] = max(dst[i], v)
	}
}

func sum(v []float64) float64 {
	var s float64
	for _, x := range v {
		s += x
	}
	return s
}

func argmax(v []float64) int {
	best := 0
	for i, x := range v {
		if x > v[best] {
			best = i
		}
	}
	return best
}
