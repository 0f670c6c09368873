package policy

import (
	"strings"

	"github.com/toolbus/toolbus/pkg/messages"
)

// Effect is what a policy decides for a call.
type Effect string

const (
	// Allow lets the call run.
	Allow Effect = "allow"
	// Deny refuses the call; a tool denied regardless of its arguments is
	// also hidden from the agent (see [Policy.Visible]).
	Deny Effect = "deny"
	// Ask holds the call until someone approves it.
	Ask Effect = "ask"
)

// Valid reports whether e is Allow, Deny or Ask.
func (e Effect) Valid() bool { return e == Allow || e == Deny || e == Ask }

// Request is one call as the policy sees it.
type Request struct {
	// Tool is the called tool's catalog definition. The policy reads its
	// Namespace and Method (or, when both are empty, its canonical Name),
	// Metadata.Tags and Source.Kind.
	Tool messages.ToolDefinition
	// Agent identifies the caller; empty for an anonymous caller.
	Agent string
	// Arguments are the call's arguments, a JSON object. Empty or null
	// stands for {}.
	Arguments messages.JSON
	// Parsed, when it holds the arguments already read (ParseArguments),
	// stands for Arguments, which is not read: a call's arguments are read
	// once. A value rather than a pointer, so that handing it over costs
	// no allocation.
	Parsed Arguments
}

// Decision is the outcome of [Policy.Evaluate].
type Decision struct {
	Effect Effect
	// Reason is the matched rule's reason, or a generated one that names
	// the rule or says that the default applied.
	Reason string
	// RuleIndex is the index of the matched rule in [Policy.Rules], or -1
	// when no rule matched and the default applied, or when the call was
	// denied because its arguments are not JSON.
	RuleIndex int
	// RuleID is the matched rule's id; empty when it has none.
	RuleID string
	// Version is the policy's version (see [Policy.Version]). An approval
	// granted under one version does not carry over to another.
	Version string
}

// Policy is a compiled, immutable list of rules and a default effect. The
// first rule whose conditions all hold decides a call; when none does, the
// default decides. A nil *Policy allows everything, like having no policy
// at all. A Policy is safe for concurrent use.
type Policy struct {
	// name is the source's name given to Parse or Load; empty for New.
	name    string
	def     Effect
	rules   []compiledRule
	source  []Rule
	version string

	defaultDecision Decision
	// malformed is the decision for a call whose arguments a rule must test
	// but which are not JSON: a deny, so that a deny rule cannot be skipped
	// by sending garbage.
	malformed Decision
}

var (
	emptyVersion = mustVersion(Allow, nil)
	nilDecision  = Decision{Effect: Allow, Reason: "no policy is set", RuleIndex: -1, Version: emptyVersion}
)

func mustVersion(def Effect, rules []Rule) string {
	v, err := version(def, rules)
	if err != nil {
		panic(err)
	}
	return v
}

// Evaluate decides a call. It never fails: a call whose arguments must be
// tested but are not valid JSON is denied.
func (p *Policy) Evaluate(req Request) Decision {
	if p == nil {
		return nilDecision
	}
	ns, method := toolParts(&req.Tool)
	args := newArguments(req)
	for i := range p.rules {
		r := &p.rules[i]
		if !r.matchesTool(ns, method, &req.Tool, req.Agent) {
			continue
		}
		if len(r.arguments) > 0 {
			if !args.validate() {
				return p.malformed
			}
			if !r.matchesArguments(&args) {
				continue
			}
		}
		return r.decision
	}
	return p.defaultDecision
}

// Visible reports whether the agent may see the tool at all: it is false
// only when the first rule that could apply to the tool and agent denies it
// whatever the arguments. A rule that tests arguments and denies does not
// hide the tool (other arguments may pass), and one that tests arguments and
// allows or asks makes it visible, since some call can then go through.
// Discovery and tools.list use this to hide denied tools.
func (p *Policy) Visible(agent string, def messages.ToolDefinition) bool {
	_, hidden := p.Hidden(agent, def)
	return !hidden
}

// Hidden returns the decision that hides the tool from the agent (see
// [Policy.Visible]), the rule that denies it whatever the arguments or the
// default, and whether there is one.
func (p *Policy) Hidden(agent string, def messages.ToolDefinition) (Decision, bool) {
	if p == nil {
		return Decision{}, false
	}
	ns, method := toolParts(&def)
	for i := range p.rules {
		r := &p.rules[i]
		if !r.matchesTool(ns, method, &def, agent) {
			continue
		}
		if len(r.arguments) > 0 {
			if r.decision.Effect == Deny {
				continue
			}
			return Decision{}, false
		}
		if r.decision.Effect == Deny {
			return r.decision, true
		}
		return Decision{}, false
	}
	if p.def == Deny {
		return p.defaultDecision, true
	}
	return Decision{}, false
}

// Version identifies the policy's meaning: the hex SHA-256 of its
// normalised rules (presets expanded, patterns in canonical spelling, sets
// sorted, argument values in canonical JSON) and default. Loading the same
// rules from differently formatted YAML gives the same version; changing any
// rule, id, reason or the default gives another. A nil policy has the
// version of an empty policy with default allow.
func (p *Policy) Version() string {
	if p == nil {
		return emptyVersion
	}
	return p.version
}

// Source returns the name the policy was parsed under (usually its
// file's name); empty for a policy built with New.
func (p *Policy) Source() string {
	if p == nil {
		return ""
	}
	return p.name
}

// Default returns the effect that applies when no rule matches.
func (p *Policy) Default() Effect {
	if p == nil {
		return Allow
	}
	return p.def
}

// Rules returns the normalised rules in evaluation order, with presets
// expanded; passing them to [New] with [Policy.Default] rebuilds an
// equivalent policy with the same version.
func (p *Policy) Rules() []Rule {
	if p == nil {
		return nil
	}
	out := make([]Rule, len(p.source))
	for i, r := range p.source {
		out[i] = r.clone()
	}
	return out
}

// toolParts returns the tool's namespace and method, falling back on its
// canonical name when the definition has only that.
func toolParts(def *messages.ToolDefinition) (ns, method string) {
	if def.Namespace != "" || def.Method != "" {
		return def.Namespace, def.Method
	}
	ns, method, _ = strings.Cut(def.Name, "-")
	return ns, method
}

// arguments holds a call's arguments while rules test them: read once,
// and only when a rule needs them (unless they come parsed), with the
// values that the first lookupSlots distinct pointers of the policy select
// remembered, so that rules testing the same property do not walk the
// arguments again.
type arguments struct {
	raw     []byte
	checked bool
	valid   bool
	value   any
	lookups [lookupSlots]cachedLookup
}

const lookupSlots = 16

type cachedLookup struct {
	done, found bool
	value       any
}

var emptyObject = []byte("{}")

func newArguments(req Request) arguments {
	if req.Parsed.read {
		return arguments{checked: true, valid: true, value: req.Parsed.Value()}
	}
	return arguments{raw: req.Arguments}
}

func (a *arguments) validate() bool {
	if !a.checked {
		a.checked = true
		v, err := DecodeArguments(a.raw)
		a.value, a.valid = v, err == nil
	}
	return a.valid
}

// lookup returns the value that m's pointer selects; validate must have
// returned true.
func (a *arguments) lookup(m *argumentMatcher) (any, bool) {
	if m.slot < 0 {
		return lookup(a.value, m.tokens)
	}
	c := &a.lookups[m.slot]
	if !c.done {
		c.value, c.found = lookup(a.value, m.tokens)
		c.done = true
	}
	return c.value, c.found
}
