package policy

import (
	"fmt"
	"slices"
	"strings"

	"github.com/toolbus/toolbus/internal/support/glob"
	"github.com/toolbus/toolbus/pkg/messages"
)

// Step is one rule that [Policy.Explain] tried, in evaluation order.
type Step struct {
	// Rule is the rule's index in [Policy.Rules]; Entry the index of its
	// entry as written (a preset counts as one entry).
	Rule  int
	Entry int
	// RuleID and Preset name the rule; Line is its entry's line in the
	// source, 0 when unknown.
	RuleID string
	Preset string
	Line   int
	Effect Effect
	// Matched is true for the rule that decided, the last step.
	Matched bool
	// Why says which condition failed ("the tool has none of the tags
	// privileged"), or, for the rule that decided, that every one held.
	Why string
}

// Explanation is how the policy decided a call: the decision, and every
// rule tried before it, with why each did not apply.
type Explanation struct {
	Decision Decision
	// Steps are the rules tried, in order: every rule up to and including
	// the one that decided, or all of them when the default decided.
	Steps []Step
	// Visible is [Policy.Visible] for the tool and agent: whether the
	// agent's models see the tool at all.
	Visible bool
}

// Explain decides a call as [Policy.Evaluate] does, and says why: which
// rule decided, and which condition of each earlier rule did not hold. It
// is meant for people (an operator asking why a call was denied or asked
// about), not for the call path: it allocates.
func (p *Policy) Explain(req Request) Explanation {
	if p == nil {
		return Explanation{Decision: nilDecision, Visible: true}
	}
	ns, method := toolParts(&req.Tool)
	args := newArguments(req)
	var steps []Step
	for i := range p.rules {
		r := &p.rules[i]
		step := Step{Rule: i, Entry: r.entry, RuleID: r.written.ID, Preset: r.preset, Line: r.line, Effect: r.decision.Effect}
		why := r.toolMismatch(ns, method, &req.Tool, req.Agent)
		if why == "" && len(r.arguments) > 0 {
			if !args.validate() {
				step.Why = "the rule tests the arguments, which are not valid JSON: the call is denied"
				steps = append(steps, step)
				return Explanation{Decision: p.malformed, Steps: steps, Visible: p.Visible(req.Agent, req.Tool)}
			}
			why = r.argumentsMismatch(&args)
		}
		if why != "" {
			step.Why = why
			steps = append(steps, step)
			continue
		}
		step.Matched = true
		step.Why = "every condition holds"
		steps = append(steps, step)
		return Explanation{Decision: r.decision, Steps: steps, Visible: p.Visible(req.Agent, req.Tool)}
	}
	return Explanation{Decision: p.defaultDecision, Steps: steps, Visible: p.Visible(req.Agent, req.Tool)}
}

// toolMismatch says which of the rule's conditions on the tool and the
// agent does not hold, or "" when all do.
func (r *compiledRule) toolMismatch(ns, method string, def *messages.ToolDefinition, agent string) string {
	tool := ns + "-" + method
	if len(r.tools) > 0 && !slices.ContainsFunc(r.tools, func(t toolPattern) bool { return t.match(ns, method) }) {
		return fmt.Sprintf("the tool %s matches none of tool: %s", tool, strings.Join(r.written.Tools, ", "))
	}
	if len(r.namespaces) > 0 && !slices.Contains(r.namespaces, ns) {
		return fmt.Sprintf("the tool's namespace %s is none of namespace: %s", ns, strings.Join(r.namespaces, ", "))
	}
	if len(r.sources) > 0 && !slices.Contains(r.sources, def.Source.Kind) {
		return fmt.Sprintf("the tool's source kind %q is none of source: %s", def.Source.Kind, strings.Join(r.sources, ", "))
	}
	tags := def.Metadata.Tags
	if len(r.tagsAny) > 0 && !slices.ContainsFunc(r.tagsAny, func(t string) bool { return slices.Contains(tags, t) }) {
		return fmt.Sprintf("the tool has none of the tags %s (tags.any); its tags: %s", strings.Join(r.tagsAny, ", "), tagList(tags))
	}
	for _, t := range r.tagsAll {
		if !slices.Contains(tags, t) {
			return fmt.Sprintf("the tool lacks the tag %s (tags.all); its tags: %s", t, tagList(tags))
		}
	}
	for _, t := range r.tagsNone {
		if slices.Contains(tags, t) {
			return fmt.Sprintf("the tool has the tag %s (tags.none)", t)
		}
	}
	if len(r.agents) > 0 && !slices.ContainsFunc(r.agents, func(g glob.Glob) bool { return g.Match(agent) }) {
		var patterns []string
		for _, g := range r.agents {
			patterns = append(patterns, g.String())
		}
		caller := fmt.Sprintf("agent %q", agent)
		if agent == "" {
			caller = "an anonymous caller (no agent)"
		}
		return fmt.Sprintf("%s matches none of agent: %s", caller, strings.Join(patterns, ", "))
	}
	return ""
}

// argumentsMismatch says which of the rule's argument conditions does not
// hold, or "" when all do; args must be valid.
func (r *compiledRule) argumentsMismatch(args *arguments) string {
	for i := range r.arguments {
		m := &r.arguments[i]
		if m.match(args) {
			continue
		}
		cond := r.written.Arguments[i]
		where := fmt.Sprintf("arguments[%d]: the value at %q", i, cond.Pointer)
		if _, found := args.lookup(m); !found && m.op != opExists {
			return where + " is absent"
		}
		switch m.op {
		case opEquals:
			return fmt.Sprintf("%s does not equal %s", where, m.values[0].json)
		case opOneOf:
			var vs []string
			for _, v := range m.values {
				vs = append(vs, v.json)
			}
			return fmt.Sprintf("%s is none of %s", where, strings.Join(vs, ", "))
		case opRegex:
			return fmt.Sprintf("%s is not a string that %q matches", where, cond.Regex)
		default:
			if m.exists {
				return where + " is absent"
			}
			return where + " is present"
		}
	}
	return ""
}

func tagList(tags []string) string {
	if len(tags) == 0 {
		return "none"
	}
	return strings.Join(tags, ", ")
}
