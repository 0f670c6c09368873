package policy

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/toolbus/toolbus/internal/support/editdistance"
	"github.com/toolbus/toolbus/internal/support/glob"
	"github.com/toolbus/toolbus/pkg/messages"
)

// ProblemKind says what is wrong with a rule, seen against a catalog.
type ProblemKind string

const (
	// Unmatched: the rule, or one of its tool patterns, namespaces or
	// tags, matches no tool of the catalog. A typo in a tool's name is one
	// (the rule holds no call, and the call it was written for runs as
	// the rules after it and the default say).
	Unmatched ProblemKind = "unmatched"
	// Shadowed: every tool of the catalog the rule matches is decided,
	// whatever the agent and the arguments, by an earlier rule, so the
	// rule never decides a call.
	Shadowed ProblemKind = "shadowed"
)

// Problem is a rule that does not do what it was written for, as a
// catalog shows: see [Policy.Check].
type Problem struct {
	Kind ProblemKind
	// Source is the policy's name ([Policy.Source]); Line the line of the
	// entry or field at fault, 0 when unknown.
	Source string
	Line   int
	// Entry is the index of the entry in the rules list as written (a
	// preset counts as one), RuleID its id, Preset its preset.
	Entry  int
	RuleID string
	Preset string
	// Field is the part of the rule at fault, as ValidationError spells
	// it ("tool[0]", "namespace[1]", "tags.any[0]"), or empty for the
	// whole rule.
	Field   string
	Message string
}

// Error formats the problem as a ValidationError is formatted:
// source:line: rules[i] (id "x"): field: message.
func (p Problem) Error() string {
	e := ValidationError{Source: p.Source, Line: p.Line, Rule: p.Entry, RuleID: p.RuleID, Field: p.Field, Message: p.Message}
	return e.Error()
}

// builtinTags are the tags Toolbus gives tools itself; a rule may name
// them before any tool carries them.
var builtinTags = []string{messages.TagReadOnly, messages.TagDestructive, messages.TagNetwork, messages.TagFileSystem, messages.TagSlow, messages.TagPrivileged}

// Check holds the policy against a catalog's tools and reports, in the
// order of the rules:
//
//   - each tool pattern that matches no tool, each namespace that no tool
//     is in, and each tag that no tool carries and Toolbus does not give
//     (Unmatched, with the field), with the closest tool or namespace
//     name when one is close;
//   - each rule whose tool, namespace, tags and source conditions,
//     together, match no tool (Unmatched, for the whole rule);
//   - each rule that an earlier rule shadows for every tool it matches
//     (Shadowed): the earlier rule has no condition on arguments and
//     applies to every agent.
//
// The rules of a preset are exempt from Unmatched: they are written for
// whatever tools carry their tag, now or later. The agent and argument
// conditions are not checked: no catalog says which agents or arguments
// will come. A nil policy has no problem.
func (p *Policy) Check(tools []messages.ToolDefinition) []Problem {
	if p == nil {
		return nil
	}
	parts := make([][2]string, len(tools))
	namespaces := map[string]bool{}
	tags := map[string]bool{}
	for i := range tools {
		ns, method := toolParts(&tools[i])
		parts[i] = [2]string{ns, method}
		namespaces[ns] = true
		for _, t := range tools[i].Metadata.Tags {
			tags[t] = true
		}
	}
	// decider[t] is the first rule that decides tool t whatever the agent
	// and the arguments, or len(p.rules): a later rule never decides t.
	decider := make([]int, len(tools))
	for t := range tools {
		decider[t] = len(p.rules)
		for j := range p.rules {
			r := &p.rules[j]
			if len(r.arguments) == 0 && r.everyAgent() && r.matchesTool(parts[t][0], parts[t][1], &tools[t], "") {
				decider[t] = j
				break
			}
		}
	}
	var problems []Problem
	for i := range p.rules {
		r := &p.rules[i]
		problem := func(kind ProblemKind, field, format string, args ...any) {
			line := r.line
			if l, ok := r.fieldLines[field]; ok {
				line = l
			}
			problems = append(problems, Problem{Kind: kind, Source: p.name, Line: line, Entry: r.entry, RuleID: r.written.ID, Preset: r.preset,
				Field: field, Message: fmt.Sprintf(format, args...)})
		}
		var matched []int
		for t := range tools {
			if r.matchesToolAnyAgent(parts[t][0], parts[t][1], &tools[t]) {
				matched = append(matched, t)
			}
		}
		if r.preset == "" {
			before := len(problems)
			for j, s := range r.written.Tools {
				tp, err := parseToolPattern(s)
				if err != nil || slices.ContainsFunc(parts, func(part [2]string) bool { return tp.match(part[0], part[1]) }) {
					continue
				}
				problem(Unmatched, fmt.Sprintf("tool[%d]", j), "%q matches no tool of the catalog%s", s, suggestTool(tp, s, tools))
			}
			for j, ns := range r.written.Namespaces {
				if !namespaces[namespaceOf(ns)] {
					problem(Unmatched, fmt.Sprintf("namespace[%d]", j), "no tool of the catalog is in namespace %q%s", ns, suggestNamespace(namespaceOf(ns), namespaces))
				}
			}
			for _, set := range []struct {
				field string
				tags  []string
			}{{"tags.any", r.written.Tags.Any}, {"tags.all", r.written.Tags.All}, {"tags.none", r.written.Tags.None}} {
				for j, tag := range set.tags {
					if !tags[tag] && !slices.Contains(builtinTags, tag) {
						problem(Unmatched, fmt.Sprintf("%s[%d]", set.field, j), "no tool of the catalog carries the tag %q, and it is not one Toolbus gives (%s)", tag, strings.Join(builtinTags, ", "))
					}
				}
			}
			if len(problems) == before && len(matched) == 0 {
				problem(Unmatched, "", "matches no tool of the catalog: no tool meets its tool, namespace, tags and source conditions at once")
			}
		}
		if len(matched) == 0 {
			continue
		}
		var deciders []int
		shadowed := true
		for _, t := range matched {
			j := decider[t]
			if j >= i {
				shadowed = false
				break
			}
			if !slices.Contains(deciders, j) {
				deciders = append(deciders, j)
			}
		}
		if shadowed {
			slices.Sort(deciders)
			var by []string
			for _, j := range deciders {
				by = append(by, entryName(&p.rules[j]))
			}
			verb := "decides"
			if len(by) > 1 {
				verb = "decide"
			}
			problem(Shadowed, "", "never decides a call: %s, earlier, %s every tool of the catalog this rule matches (%s), for every agent and all arguments", strings.Join(by, " and "), verb, toolList(tools, matched))
		}
	}
	return problems
}

// matchesToolAnyAgent is matchesTool for some agent: the rule's agent
// condition is left out.
func (r *compiledRule) matchesToolAnyAgent(ns, method string, def *messages.ToolDefinition) bool {
	anyAgent := *r
	anyAgent.agents = nil
	return anyAgent.matchesTool(ns, method, def, "")
}

// everyAgent reports whether the rule applies to every caller: it has no
// agent condition, or "*" among its agent patterns.
func (r *compiledRule) everyAgent() bool {
	return len(r.agents) == 0 || slices.ContainsFunc(r.agents, func(g glob.Glob) bool { return g.String() == "*" })
}

// entryName names a rule's entry: rules[i], with its id or preset.
func entryName(r *compiledRule) string {
	name := "rules[" + strconv.Itoa(r.entry) + "]"
	switch {
	case r.preset != "":
		name += " (preset " + r.preset + ")"
	case r.written.ID != "":
		name += fmt.Sprintf(" (id %q)", r.written.ID)
	}
	return name
}

// toolList names the matched tools, the first few of them.
func toolList(tools []messages.ToolDefinition, matched []int) string {
	const shown = 3
	var names []string
	for _, t := range matched[:min(len(matched), shown)] {
		names = append(names, tools[t].Name)
	}
	if len(matched) > shown {
		names = append(names, fmt.Sprintf("and %d more", len(matched)-shown))
	}
	return strings.Join(names, ", ")
}

// suggestTool names the catalog tool closest to a pattern without '*',
// when one is close enough to be a typo of it.
func suggestTool(tp toolPattern, written string, tools []messages.ToolDefinition) string {
	if strings.Contains(written, "*") {
		return ""
	}
	want := strings.ToLower(tp.String())
	limit := max(2, len(want)/4)
	var dist editdistance.Rows
	best, bestDist := "", -1
	for i := range tools {
		name := tools[i].Name
		if name == "" {
			ns, method := toolParts(&tools[i])
			name = ns + "-" + method
		}
		if diff := len(name) - len(want); diff > limit || -diff > limit {
			continue // at least that many edits apart
		}
		d := dist.Between(want, strings.ToLower(name))
		if bestDist < 0 || d < bestDist || d == bestDist && name < best {
			best, bestDist = name, d
		}
	}
	if bestDist < 0 || bestDist > limit {
		return ""
	}
	return fmt.Sprintf("; did you mean %s?", best)
}

// suggestNamespace names the catalog namespace closest to ns, when one is.
func suggestNamespace(ns string, namespaces map[string]bool) string {
	var dist editdistance.Rows
	best, bestDist := "", -1
	for candidate := range namespaces {
		d := dist.Between(strings.ToLower(ns), strings.ToLower(candidate))
		if bestDist < 0 || d < bestDist || d == bestDist && candidate < best {
			best, bestDist = candidate, d
		}
	}
	if bestDist < 0 || bestDist > max(2, len(ns)/4) {
		return ""
	}
	return fmt.Sprintf("; did you mean %s?", best)
}
