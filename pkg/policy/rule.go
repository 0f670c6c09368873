package policy

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"

	"github.com/toolbus/toolbus/internal/support/glob"
	"github.com/toolbus/toolbus/pkg/messages"
)

// Rule is one entry of a policy: conditions and the effect that applies when
// all of them hold. A condition left empty matches anything, so a rule with
// no condition matches every call. The YAML key of each field is given in
// brackets.
type Rule struct {
	// ID names the rule in decisions and errors [id]. Optional; unique
	// within a policy.
	ID string `json:"id,omitempty"`
	// Preset stands for the rules of the named preset, in place of this
	// entry [preset]. An entry with a preset has no other field.
	Preset string `json:"preset,omitempty"`
	// Tools holds tool patterns; the rule applies when any matches [tool].
	// A pattern is written like a tool name in any spelling ("fs:read",
	// "fs/read", "fs.read", "fs-read"); '*' in the namespace or the method
	// stands for any run of characters ("fs:read_*", "*:list"), and a bare
	// namespace ("fs") means every tool of that namespace.
	Tools []string `json:"tool,omitempty"`
	// Namespaces applies the rule to tools of any of these namespaces,
	// matched exactly [namespace]. A nested service's namespace may be
	// written as in a tool name: "llm/tools" is "llm_tools".
	Namespaces []string `json:"namespace,omitempty"`
	// Tags tests the tool's tags, built-in and custom alike [tags].
	Tags TagMatch `json:"tags,omitzero"`
	// Sources applies the rule to tools of any of these source kinds:
	// messages.SourceGo, SourceMCP, SourceOpenAPI or SourceBuiltin [source].
	Sources []string `json:"source,omitempty"`
	// Agents applies the rule to callers whose agent ID matches any of these
	// patterns, exact or with '*' for any run of characters [agent]. "*"
	// also matches an anonymous caller.
	Agents []string `json:"agent,omitempty"`
	// Arguments are conditions on the call's arguments; all must hold
	// [arguments].
	Arguments []Argument `json:"arguments,omitempty"`
	// Effect is what the rule decides [effect]. Required.
	Effect Effect `json:"effect,omitempty"`
	// Reason explains the effect to the agent and to approvers [reason].
	Reason string `json:"reason,omitempty"`
}

// TagMatch tests a tool's tags. Each list left empty holds trivially.
type TagMatch struct {
	// Any holds when the tool has at least one of these tags [any].
	Any []string `json:"any,omitempty"`
	// All holds when the tool has every one of these tags [all].
	All []string `json:"all,omitempty"`
	// None holds when the tool has none of these tags [none].
	None []string `json:"none,omitempty"`
}

// Argument is a condition on the value that a JSON pointer selects in the
// call's arguments. It has exactly one operator: Equals, OneOf, Regex or
// Exists. A pointer that selects nothing fails every operator but
// Exists: false. Values are compared by JSON type first, so the string "5"
// never equals the number 5; numbers compare by value (1, 1.0 and 1e0 are
// equal, with no rounding), strings exactly, objects and arrays by their
// canonical JSON. When an object holds a key twice, the last value counts,
// as it does for the tool.
type Argument struct {
	// Pointer is an RFC 6901 JSON pointer: "" is the whole arguments object,
	// "/path" a property, "/files/0" an array element, "~1" and "~0" stand
	// for '/' and '~' in a key [pointer].
	Pointer string `json:"pointer"`
	// Equals holds when the selected value equals this JSON value [equals].
	Equals messages.JSON `json:"equals,omitempty"`
	// OneOf holds when the selected value equals any of these [one_of].
	OneOf []messages.JSON `json:"one_of,omitempty"`
	// Regex holds when the selected value is a string that the RE2 regular
	// expression matches. Like Go's regexp.MatchString it matches anywhere in
	// the string: anchor it with ^ and $ to match the whole [regex].
	Regex string `json:"regex,omitempty"`
	// Exists holds when the pointer selects a value (null counts as a value)
	// and *Exists is true, or selects nothing and *Exists is false [exists].
	Exists *bool `json:"exists,omitempty"`
}

func (r Rule) clone() Rule {
	r.Tools = slices.Clone(r.Tools)
	r.Namespaces = slices.Clone(r.Namespaces)
	r.Sources = slices.Clone(r.Sources)
	r.Agents = slices.Clone(r.Agents)
	r.Tags = TagMatch{Any: slices.Clone(r.Tags.Any), All: slices.Clone(r.Tags.All), None: slices.Clone(r.Tags.None)}
	if r.Arguments != nil {
		args := make([]Argument, len(r.Arguments))
		for i, a := range r.Arguments {
			a.Equals = slices.Clone(a.Equals)
			if a.OneOf != nil {
				vs := make([]messages.JSON, len(a.OneOf))
				for j, v := range a.OneOf {
					vs[j] = slices.Clone(v)
				}
				a.OneOf = vs
			}
			if a.Exists != nil {
				e := *a.Exists
				a.Exists = &e
			}
			args[i] = a
		}
		r.Arguments = args
	}
	return r
}

// hasConditionOrEffect reports whether a preset entry carries anything
// besides the preset name.
func (r *Rule) hasConditionOrEffect() bool {
	return r.ID != "" || len(r.Tools) > 0 || len(r.Namespaces) > 0 || len(r.Tags.Any) > 0 ||
		len(r.Tags.All) > 0 || len(r.Tags.None) > 0 || len(r.Sources) > 0 || len(r.Agents) > 0 ||
		len(r.Arguments) > 0 || r.Effect != "" || r.Reason != ""
}

// New compiles a policy from a default effect, which is required, and rules
// in evaluation order. With no rules the default decides every call.
func New(def Effect, rules []Rule) (*Policy, error) {
	return compile(def, rules, origin{})
}

// origin locates the entries of a policy in its source, for errors.
type origin struct {
	name       string
	defaultAt  int
	lines      []int // line of each entry
	fieldLines []map[string]int
}

func (o *origin) err(entry int, id, field, format string, args ...any) *ValidationError {
	e := &ValidationError{Source: o.name, Rule: entry, RuleID: id, Field: field, Message: fmt.Sprintf(format, args...)}
	if entry < 0 {
		e.Line = o.defaultAt
	} else if entry < len(o.lines) {
		e.Line = o.lines[entry]
		if entry < len(o.fieldLines) {
			if l, ok := o.fieldLines[entry][field]; ok {
				e.Line = l
			}
		}
	}
	return e
}

// entryLines returns the line of an entry and of its fields, when known.
func (o *origin) entryLines(entry int) (int, map[string]int) {
	if entry >= len(o.lines) {
		return 0, nil
	}
	var fields map[string]int
	if entry < len(o.fieldLines) {
		fields = o.fieldLines[entry]
	}
	return o.lines[entry], fields
}

func compile(def Effect, rules []Rule, o origin) (*Policy, error) {
	var errs []error
	switch {
	case def == "":
		errs = append(errs, o.err(-1, "", "default", "missing; want allow, deny or ask"))
	case !def.Valid():
		errs = append(errs, o.err(-1, "", "default", "unknown effect %q; want allow, deny or ask", def))
	}

	p := &Policy{def: def, name: o.name}
	ids := map[string]int{}
	for entry := range rules {
		expanded := []Rule{rules[entry]}
		if name := rules[entry].Preset; name != "" {
			if rules[entry].hasConditionOrEffect() {
				errs = append(errs, o.err(entry, rules[entry].ID, "preset", "an entry with a preset has no other field"))
				continue
			}
			var ok bool
			if expanded, ok = Preset(name); !ok {
				errs = append(errs, o.err(entry, "", "preset", "unknown preset %q; known presets: %s", name, strings.Join(Presets(), ", ")))
				continue
			}
		}
		for _, r := range expanded {
			field := "id"
			if rules[entry].Preset != "" {
				field = "preset"
			}
			if r.ID != "" {
				if first, dup := ids[r.ID]; dup {
					errs = append(errs, o.err(entry, r.ID, field, "id %q is already used by rules[%d]", r.ID, first))
					continue
				}
				ids[r.ID] = entry
			}
			c, norm, ruleErrs := compileRule(r, entry, &o)
			if len(ruleErrs) > 0 {
				errs = append(errs, ruleErrs...)
				continue
			}
			c.decision.RuleIndex = len(p.rules)
			c.decision.RuleID = r.ID
			c.entry, c.preset, c.written = entry, rules[entry].Preset, r
			c.line, c.fieldLines = o.entryLines(entry)
			c.decision.Effect = r.Effect
			c.decision.Reason = r.Reason
			if c.decision.Reason == "" {
				if r.ID != "" {
					c.decision.Reason = fmt.Sprintf("matched rule %q", r.ID)
				} else {
					c.decision.Reason = fmt.Sprintf("matched rules[%d]", entry)
				}
			}
			p.rules = append(p.rules, c)
			p.source = append(p.source, norm)
		}
	}
	if len(errs) > 0 {
		return nil, joinErrors(errs)
	}

	slots := map[string]int{}
	for i := range p.rules {
		for j := range p.rules[i].arguments {
			m := &p.rules[i].arguments[j]
			slot, ok := slots[m.pointer]
			if !ok {
				slot = -1
				if len(slots) < lookupSlots {
					slot = len(slots)
					slots[m.pointer] = slot
				}
			}
			m.slot = slot
		}
	}

	v, err := version(def, p.source)
	if err != nil {
		return nil, err
	}
	p.version = v
	for i := range p.rules {
		p.rules[i].decision.Version = v
	}
	p.defaultDecision = Decision{Effect: def, Reason: fmt.Sprintf("no rule matched; the default is %s", def), RuleIndex: -1, Version: v}
	p.malformed = Decision{Effect: Deny, Reason: "the arguments are not valid JSON, and a rule tests them", RuleIndex: -1, Version: v}
	return p, nil
}

// joinErrors is errors.Join, except that a lone error is returned as
// itself so that callers can type-assert it.
func joinErrors(errs []error) error {
	if len(errs) == 1 {
		return errs[0]
	}
	return errors.Join(errs...)
}

func version(def Effect, rules []Rule) (string, error) {
	if rules == nil {
		rules = []Rule{}
	}
	b, err := json.Marshal(struct {
		Format  string `json:"format"`
		Default Effect `json:"default"`
		Rules   []Rule `json:"rules"`
	}{"toolbus.policy/1", def, rules})
	if err != nil {
		return "", fmt.Errorf("policy version: %w", err)
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:]), nil
}

// compiledRule is a rule ready for the call path: patterns split, regular
// expressions compiled, values in canonical form, and its decision built.
type compiledRule struct {
	// entry is the index of the rules entry the rule comes from, as
	// written (a preset counts as one entry); preset names the entry's
	// preset; written is the rule as written, before it was normalised.
	entry   int
	preset  string
	written Rule
	// line is the entry's line in the source, fieldLines those of its
	// fields (keyed as ValidationError.Field); 0 and nil when unknown.
	line       int
	fieldLines map[string]int

	tools      []toolPattern
	namespaces []string
	tagsAny    []string
	tagsAll    []string
	tagsNone   []string
	sources    []string
	agents     []glob.Glob
	arguments  []argumentMatcher
	decision   Decision
}

// compileRule validates r and returns its compiled form and its normalised
// form; errors name the entry and field.
func compileRule(r Rule, entry int, o *origin) (compiledRule, Rule, []error) {
	var errs []error
	fail := func(field, format string, args ...any) {
		errs = append(errs, o.err(entry, r.ID, field, format, args...))
	}
	var c compiledRule
	norm := Rule{ID: r.ID, Effect: r.Effect, Reason: r.Reason}

	switch {
	case r.Effect == "":
		fail("effect", "missing; want allow, deny or ask")
	case !r.Effect.Valid():
		fail("effect", "unknown effect %q; want allow, deny or ask", r.Effect)
	}

	for i, s := range r.Tools {
		tp, err := parseToolPattern(s)
		if err != nil {
			fail(fmt.Sprintf("tool[%d]", i), "%v", err)
			continue
		}
		c.tools = append(c.tools, tp)
		norm.Tools = append(norm.Tools, tp.String())
	}
	var namespaces []string
	for i, ns := range r.Namespaces {
		ns = namespaceOf(ns)
		if err := messages.ValidateNamespace(ns); err != nil {
			fail(fmt.Sprintf("namespace[%d]", i), "%v", err)
		}
		namespaces = append(namespaces, ns)
	}
	c.namespaces = sortedSet(namespaces)
	norm.Namespaces = c.namespaces

	for _, set := range []struct {
		name string
		tags []string
		dst  *[]string
		norm *[]string
	}{
		{"tags.any", r.Tags.Any, &c.tagsAny, &norm.Tags.Any},
		{"tags.all", r.Tags.All, &c.tagsAll, &norm.Tags.All},
		{"tags.none", r.Tags.None, &c.tagsNone, &norm.Tags.None},
	} {
		for i, t := range set.tags {
			if strings.TrimSpace(t) == "" {
				fail(fmt.Sprintf("%s[%d]", set.name, i), "empty tag")
			}
		}
		*set.dst = sortedSet(set.tags)
		*set.norm = *set.dst
	}

	for i, s := range r.Sources {
		switch s {
		case messages.SourceGo, messages.SourceMCP, messages.SourceOpenAPI, messages.SourceBuiltin:
		default:
			fail(fmt.Sprintf("source[%d]", i), "unknown source kind %q; want go, mcp, openapi or builtin", s)
		}
	}
	c.sources = sortedSet(r.Sources)
	norm.Sources = c.sources

	for i, a := range r.Agents {
		if a == "" {
			fail(fmt.Sprintf("agent[%d]", i), `empty agent pattern; use "*" for every agent`)
		}
	}
	norm.Agents = sortedSet(r.Agents)
	for _, a := range norm.Agents {
		c.agents = append(c.agents, glob.Compile(a))
	}

	for i, a := range r.Arguments {
		m, n, err := compileArgument(a)
		if err != nil {
			field := fmt.Sprintf("arguments[%d]", i)
			if err.field != "" {
				field += "." + err.field
			}
			fail(field, "%s", err.message)
			continue
		}
		c.arguments = append(c.arguments, m)
		norm.Arguments = append(norm.Arguments, n)
	}

	slices.SortFunc(c.tools, func(a, b toolPattern) int { return strings.Compare(a.String(), b.String()) })
	c.tools = slices.CompactFunc(c.tools, func(a, b toolPattern) bool { return a.String() == b.String() })
	norm.Tools = sortedSet(norm.Tools)
	return c, norm, errs
}

// sortedSet returns the strings sorted without duplicates, or nil for none.
func sortedSet(s []string) []string {
	if len(s) == 0 {
		return nil
	}
	out := slices.Clone(s)
	slices.Sort(out)
	return slices.Compact(out)
}

func (r *compiledRule) matchesTool(ns, method string, def *messages.ToolDefinition, agent string) bool {
	if len(r.tools) > 0 {
		ok := false
		for i := range r.tools {
			if r.tools[i].match(ns, method) {
				ok = true
				break
			}
		}
		if !ok {
			return false
		}
	}
	if len(r.namespaces) > 0 && !slices.Contains(r.namespaces, ns) {
		return false
	}
	if len(r.sources) > 0 && !slices.Contains(r.sources, def.Source.Kind) {
		return false
	}
	tags := def.Metadata.Tags
	if len(r.tagsAny) > 0 {
		ok := false
		for _, t := range r.tagsAny {
			if slices.Contains(tags, t) {
				ok = true
				break
			}
		}
		if !ok {
			return false
		}
	}
	for _, t := range r.tagsAll {
		if !slices.Contains(tags, t) {
			return false
		}
	}
	for _, t := range r.tagsNone {
		if slices.Contains(tags, t) {
			return false
		}
	}
	if len(r.agents) > 0 {
		ok := false
		for i := range r.agents {
			if r.agents[i].Match(agent) {
				ok = true
				break
			}
		}
		if !ok {
			return false
		}
	}
	return true
}

func (r *compiledRule) matchesArguments(args *arguments) bool {
	for i := range r.arguments {
		if !r.arguments[i].match(args) {
			return false
		}
	}
	return true
}

// toolPattern matches a tool's namespace and method separately.
type toolPattern struct {
	namespace, method glob.Glob
}

func (t toolPattern) match(ns, method string) bool {
	return t.namespace.Match(ns) && t.method.Match(method)
}

// String returns the pattern in canonical "namespace-method" spelling.
func (t toolPattern) String() string { return t.namespace.String() + "-" + t.method.String() }

// parseToolPattern reads a tool pattern in any spelling that
// messages.ParseToolName accepts, with '*' allowed in either part; a
// pattern with no separator is a namespace and matches all its tools.
func parseToolPattern(s string) (toolPattern, error) {
	ns, method, ok := messages.SplitToolName(strings.TrimSpace(s))
	if !ok {
		method = "*" // a namespace alone: all its tools
	}
	if !validPatternPart(ns, false) {
		return toolPattern{}, fmt.Errorf("invalid tool pattern %q: the namespace %q must be non-empty and hold only letters, digits, '_' and '*'", s, ns)
	}
	if !validPatternPart(method, true) {
		return toolPattern{}, fmt.Errorf("invalid tool pattern %q: the method %q must be non-empty and hold only letters, digits, '_', '-' and '*'", s, method)
	}
	return toolPattern{namespace: glob.Compile(ns), method: glob.Compile(method)}, nil
}

// namespaceOf reads a namespace as the namespace of a tool name is read:
// a nested service "a/b" (or "a.b") is namespace "a_b".
func namespaceOf(s string) string {
	return strings.NewReplacer("/", "_", ".", "_").Replace(strings.TrimSpace(s))
}

func validPatternPart(s string, dash bool) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9', c == '_', c == '*':
		case c == '-' && dash:
		default:
			return false
		}
	}
	return true
}

// argumentMatcher is a compiled Argument.
type argumentMatcher struct {
	tokens []string
	slot   int // index into arguments.lookups, or -1 for no caching
	// pointer is the pointer as written, under which rules share lookups
	// (RFC 6901 gives each pointer a single spelling).
	pointer string
	op      operator
	values  []canonicalValue // equals: one; one_of: several
	re      *regexp.Regexp
	exists  bool
}

type operator uint8

const (
	opEquals operator = iota
	opOneOf
	opRegex
	opExists
)

type argumentError struct{ field, message string }

func compileArgument(a Argument) (argumentMatcher, Argument, *argumentError) {
	var m argumentMatcher
	tokens, err := parsePointer(a.Pointer)
	if err != nil {
		return m, a, &argumentError{"pointer", err.Error()}
	}
	m.tokens, m.pointer = tokens, a.Pointer
	norm := Argument{Pointer: a.Pointer}

	ops := 0
	if len(a.Equals) > 0 {
		ops++
	}
	if a.OneOf != nil {
		ops++
	}
	if a.Regex != "" {
		ops++
	}
	if a.Exists != nil {
		ops++
	}
	if ops != 1 {
		return m, a, &argumentError{"", fmt.Sprintf("give exactly one of equals, one_of, regex and exists; found %d", ops)}
	}

	switch {
	case len(a.Equals) > 0:
		v, err := newCanonicalValue(a.Equals)
		if err != nil {
			return m, a, &argumentError{"equals", err.Error()}
		}
		m.op, m.values = opEquals, []canonicalValue{v}
		norm.Equals = messages.JSON(v.json)
	case a.OneOf != nil:
		if len(a.OneOf) == 0 {
			return m, a, &argumentError{"one_of", "empty list; it would never match"}
		}
		seen := map[string]bool{}
		for i, raw := range a.OneOf {
			v, err := newCanonicalValue(raw)
			if err != nil {
				return m, a, &argumentError{fmt.Sprintf("one_of[%d]", i), err.Error()}
			}
			if !seen[v.json] {
				seen[v.json] = true
				m.values = append(m.values, v)
			}
		}
		slices.SortFunc(m.values, func(x, y canonicalValue) int { return strings.Compare(x.json, y.json) })
		m.op = opOneOf
		for _, v := range m.values {
			norm.OneOf = append(norm.OneOf, messages.JSON(v.json))
		}
	case a.Regex != "":
		re, err := regexp.Compile(a.Regex)
		if err != nil {
			return m, a, &argumentError{"regex", fmt.Sprintf("invalid regular expression %q: %v", a.Regex, err)}
		}
		m.op, m.re = opRegex, re
		norm.Regex = a.Regex
	default:
		m.op, m.exists = opExists, *a.Exists
		e := *a.Exists
		norm.Exists = &e
	}
	return m, norm, nil
}

func (m *argumentMatcher) match(args *arguments) bool {
	v, found := args.lookup(m)
	if m.op == opExists {
		return found == m.exists
	}
	if !found {
		return false
	}
	if m.op == opRegex {
		s, ok := v.(string)
		return ok && m.re.MatchString(s)
	}
	for i := range m.values {
		if m.values[i].equal(v) {
			return true
		}
	}
	return false
}
