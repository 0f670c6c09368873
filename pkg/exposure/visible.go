package exposure

import (
	"math/bits"
	"sort"

	"github.com/toolbus/toolbus/pkg/messages"
)

// Iteration is what one model iteration of a turn knows about the tools the
// model should see. Tool names may be in any spelling that
// messages.ParseToolName reads.
type Iteration struct {
	// Intake is what the intake step selected; nil when no intake ran.
	Intake *Intake
	// Clarification marks a turn in which the model asks the user a
	// question: intake selections are ignored and base tools are hidden, as
	// for an empty intake; critical and alwaysInclude tools and explicit
	// promotions (Chosen, Discovered, Activated) stay.
	Clarification bool
	// Chosen holds the exact tool names the caller or its profile asked for.
	Chosen []string
	// Discovered holds every tool of the discovery pages returned so far in
	// the turn. Pages not returned contribute nothing.
	Discovered []string
	// Activated holds the tools activated explicitly in the turn.
	Activated []string
	// Discoverable is the caller's policy for tools that no rule admitted:
	// Chosen, Discovered and Activated tools outside the admission are shown
	// only when it returns true. Nil admits every catalog tool that the
	// agent's rules do not exclude; rule exclusions apply in any case.
	Discoverable func(*messages.ToolDefinition) bool
}

// Intake is the selection of an intake step. Selecting a bundle keeps its
// base tools; only naming a tool exactly promotes an onDemand one. An empty
// Intake (neither tools nor bundles) hides every base tool. Base tools that
// only the agent's own items admitted belong to no bundle: intake keeps
// them only by naming them.
type Intake struct {
	Tools   []string
	Bundles []string
}

// Visible is the result of one iteration.
type Visible struct {
	// Tools are the tools whose schemas the model sees, sorted by name.
	Tools []*Tool
	// Dropped lists the names from Chosen, Discovered, Activated and
	// Intake.Tools that no longer name a visible tool: gone from the
	// catalog, unparsable, excluded, not discoverable, or (for intake) not
	// admitted. The caller may prune them from the turn's saved selections.
	Dropped []string
}

// Names returns the canonical names of the visible tools, sorted.
func (v Visible) Names() []string {
	out := make([]string, len(v.Tools))
	for i, t := range v.Tools {
		out[i] = t.Name
	}
	return out
}

// Definitions returns copies of the visible tools' definitions, sorted by
// name, ready for a schema formatter. The copies share the catalog's schema
// bytes, which nobody may modify.
func (v Visible) Definitions() []messages.ToolDefinition {
	out := make([]messages.ToolDefinition, len(v.Tools))
	for i, t := range v.Tools {
		out[i] = *t.Definition
	}
	return out
}

// Visible computes which tools the model sees on one iteration. Its cost is
// proportional to the admitted set's bitmap size plus the output, so it can
// run on every model iteration.
func (a *Admission) Visible(it Iteration) Visible {
	show := make(bitmap, len(a.initial))
	narrowed := it.Clarification || it.Intake != nil
	if narrowed {
		copy(show, a.always)
	} else {
		copy(show, a.initial)
	}
	var dropped []string
	drop := func(name string) {
		if !contains(dropped, name) {
			dropped = append(dropped, name)
		}
	}
	if it.Intake != nil && !it.Clarification {
		for _, b := range it.Intake.Bundles {
			if bm, ok := a.bundleBase[b]; ok {
				for i := range show {
					show[i] |= bm[i]
				}
			}
		}
		for _, name := range it.Intake.Tools {
			if ci, ok := a.catalog.index(name); ok && a.pos[ci] >= 0 {
				show.set(int(a.pos[ci]))
			} else {
				drop(name)
			}
		}
	}
	var extra []*Tool
	promote := func(names []string) {
		for _, name := range names {
			ci, ok := a.catalog.index(name)
			if !ok {
				drop(name)
				continue
			}
			if p := a.pos[ci]; p >= 0 {
				show.set(int(p))
				continue
			}
			def := &a.catalog.defs[ci]
			if a.excluded.has(int(ci)) || (it.Discoverable != nil && !it.Discoverable(def)) {
				drop(name)
				continue
			}
			dup := false
			for _, t := range extra {
				if t.Definition == def {
					dup = true
					break
				}
			}
			if !dup {
				extra = append(extra, &Tool{Name: a.catalog.keys[ci], Definition: def})
			}
		}
	}
	promote(it.Chosen)
	promote(it.Discovered)
	promote(it.Activated)

	n := len(extra)
	for _, w := range show {
		n += bits.OnesCount64(w)
	}
	out := make([]*Tool, 0, n)
	for wi, w := range show {
		for w != 0 {
			k := wi<<6 + bits.TrailingZeros64(w)
			w &= w - 1
			out = append(out, &a.tools[k])
		}
	}
	if len(extra) > 0 {
		out = append(out, extra...)
		sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	}
	return Visible{Tools: out, Dropped: dropped}
}
