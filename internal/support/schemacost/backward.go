package schemacost

import "slices"

// backward is the second bound of Check, computed from the other end:
// from[i] is, for one evaluation of node i at some place, the most
// evaluations it causes d levels further down, over every path of keys
// and positions. One level down, the same key or position is taken by
// every subschema applied at the place (they all see the same value), so
// the label is chosen once per place; further down, each child target's
// worst path is taken on its own. The forward bound keeps the paths of
// the nodes it counts apart but not their labels; this one the other way
// round. Each is an upper bound, so Check keeps the smaller.
type backward struct {
	g *graph
	// targets are the nodes from is kept for: the root and every node
	// applied one level down.
	targets []int
	// closure[i] lists, for each target i, the nodes evaluated at the same
	// place when i is, with the number of times (paths of in-place
	// applicators; i itself once).
	closure map[int][]weighted
	from    []float64
}

type weighted struct {
	node  int
	times float64
}

func newBackward(g *graph) *backward {
	b := &backward{g: g, closure: map[int][]weighted{}, from: make([]float64, len(g.nodes))}
	isTarget := make([]bool, len(g.nodes))
	isTarget[0] = true
	for _, n := range g.nodes {
		for _, list := range [][]int{n.prefix, n.rest, n.anyItem, n.anyMember} {
			for _, t := range list {
				isTarget[t] = true
			}
		}
		for _, t := range n.props {
			isTarget[t] = true
		}
		for _, p := range n.patterns {
			isTarget[p.target] = true
		}
		if n.additional >= 0 {
			isTarget[n.additional] = true
		}
	}
	for i, is := range isTarget {
		if !is {
			continue
		}
		b.targets = append(b.targets, i)
		counts := map[int]float64{i: 1}
		g.spreadSparse(counts)
		var cl []weighted
		total := 0.0
		for j, times := range counts {
			cl = append(cl, weighted{j, times})
			total += times
		}
		slices.SortFunc(cl, func(a, b weighted) int { return a.node - b.node })
		b.closure[i] = cl
		b.from[i] = total
	}
	return b
}

// step moves the bound one level deeper.
func (b *backward) step() {
	g := b.g
	next := make([]float64, len(b.from))
	for _, i := range b.targets {
		cl := b.closure[i]
		best := 0.0
		for position := 0; position <= g.maxPrefix; position++ {
			s := 0.0
			if g.spend(len(cl)) {
				return
			}
			for _, w := range cl {
				n := &g.nodes[w.node]
				if position < len(n.prefix) {
					s += w.times * b.from[n.prefix[position]]
				} else {
					s += w.times * b.sum(n.rest)
				}
				s += w.times * b.sum(n.anyItem)
			}
			best = max(best, s)
		}
		// A key no property names; then each named key, as a change
		// from it in the nodes that name it or have patterns.
		other := 0.0
		delta := map[string]float64{}
		for _, w := range cl {
			n := &g.nodes[w.node]
			base := b.sum(n.anyMember)
			for _, p := range n.patterns {
				base += b.from[p.target]
			}
			if n.additional >= 0 {
				base += b.from[n.additional]
			}
			other += w.times * base
			keys := g.keys
			if len(n.patterns) == 0 {
				keys = nil
				for k := range n.props {
					keys = append(keys, k)
				}
			}
			if g.spend(len(keys) * (1 + len(n.patterns))) {
				return
			}
			for _, k := range keys {
				exact := b.sum(n.anyMember)
				matched := false
				if t, ok := n.props[k]; ok {
					exact += b.from[t]
					matched = true
				}
				for _, t := range g.matching(w.node, k) {
					exact += b.from[t]
					matched = true
				}
				if !matched && n.additional >= 0 {
					exact += b.from[n.additional]
				}
				delta[k] += w.times * (exact - base)
			}
		}
		best = max(best, other)
		for _, d := range delta {
			best = max(best, other+d)
		}
		next[i] = best
	}
	b.from = next
}

func (b *backward) sum(nodes []int) float64 {
	s := 0.0
	for _, j := range nodes {
		s += b.from[j]
	}
	return s
}

// root is the bound for the whole value at the current depth.
func (b *backward) root() float64 { return b.from[0] }
