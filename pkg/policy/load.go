package policy

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"regexp"
	"strconv"

	"github.com/toolbus/toolbus/pkg/messages"
	"go.yaml.in/yaml/v3"
)

// Load reads a policy in YAML from r; name (usually the file name) prefixes
// error messages. See [Parse] for the format.
func Load(r io.Reader, name string) (*Policy, error) {
	data, err := io.ReadAll(r)
	if err != nil {
		return nil, fmt.Errorf("read policy %s: %w", name, err)
	}
	return Parse(data, name)
}

// Parse compiles a policy written in YAML; name (usually the file name)
// prefixes error messages. The document is a mapping with two keys:
//
//	default: deny            # required: allow, deny or ask
//	rules:                   # in evaluation order; the first match wins
//	  - preset: deny_privileged
//	  - id: no-force-push
//	    tool: "git:push"     # string or list; quote patterns that start with '*'
//	    arguments:
//	      - {pointer: /force, equals: true}
//	    effect: deny
//	    reason: force-pushing rewrites shared history
//	  - tool: ["fs:read_*", "*:list"]
//	    agent: "ci-*"
//	    effect: allow
//
// A rule's keys are those of [Rule]: id, preset, tool, namespace, tags (a
// mapping of any, all and none), source, agent, arguments (a list of
// mappings with pointer and one of equals, one_of, regex, exists), effect
// and reason. tool, namespace, source, agent and the tag lists take a string
// or a non-empty list of strings. Unknown keys, keys given twice and values
// of the wrong kind are errors, as is everything [New] rejects. Every error
// names the entry (rules[i], with its id) and the field, with the line.
func Parse(data []byte, name string) (*Policy, error) {
	l := &loader{o: origin{name: name}, budget: maxYAMLNodes}
	def, rules := l.file(data)
	if len(l.errs) > 0 {
		return nil, joinErrors(l.errs)
	}
	return compile(def, rules, l.o)
}

// maxYAMLNodes bounds the work of reading one file, aliases expanded, so
// that a small file of nested aliases cannot make the loader run for ever.
const maxYAMLNodes = 100_000

type loader struct {
	o      origin
	errs   []error
	budget int
}

func (l *loader) fail(n *yaml.Node, entry int, id, field, format string, args ...any) {
	e := &ValidationError{Source: l.o.name, Rule: entry, RuleID: id, Field: field, Message: fmt.Sprintf(format, args...)}
	if n != nil {
		e.Line = n.Line
	}
	l.errs = append(l.errs, e)
}

func resolve(n *yaml.Node) *yaml.Node {
	if n != nil && n.Kind == yaml.AliasNode {
		return n.Alias
	}
	return n
}

func isNull(n *yaml.Node) bool {
	return n == nil || (n.Kind == yaml.ScalarNode && n.ShortTag() == "!!null")
}

func (l *loader) file(data []byte) (Effect, []Rule) {
	var doc yaml.Node
	dec := yaml.NewDecoder(bytes.NewReader(data))
	if err := dec.Decode(&doc); err != nil && err != io.EOF {
		l.fail(nil, -1, "", "", "invalid YAML: %v", err)
		return "", nil
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); err != io.EOF {
		l.fail(&extra, -1, "", "", "holds more than one YAML document")
		return "", nil
	}
	var root *yaml.Node
	if doc.Kind == yaml.DocumentNode && len(doc.Content) > 0 {
		root = resolve(doc.Content[0])
	}
	if isNull(root) {
		return "", nil // compile reports the missing default
	}
	if root.Kind != yaml.MappingNode {
		l.fail(root, -1, "", "", "want a mapping with default and rules")
		return "", nil
	}
	var def Effect
	var rules []Rule
	seen := map[string]bool{}
	for i := 0; i+1 < len(root.Content); i += 2 {
		k, v := root.Content[i], root.Content[i+1]
		if !l.key(k, seen, -1, "", "") {
			continue
		}
		k = resolve(k)
		switch k.Value {
		case "default":
			l.o.defaultAt = k.Line
			if s, ok := l.scalar(v, -1, "", "default"); ok {
				def = Effect(s)
			}
		case "rules":
			rules = l.rules(v)
		default:
			l.fail(k, -1, "", "", "unknown field %q; want default or rules", k.Value)
		}
	}
	return def, rules
}

// key checks a mapping key: a scalar not seen before in the same mapping.
func (l *loader) key(k *yaml.Node, seen map[string]bool, entry int, id, prefix string) bool {
	k = resolve(k)
	if k == nil || k.Kind != yaml.ScalarNode {
		l.fail(k, entry, id, prefix, "a key must be a string")
		return false
	}
	if seen[k.Value] {
		l.fail(k, entry, id, prefix+k.Value, "given twice")
		return false
	}
	seen[k.Value] = true
	return true
}

func (l *loader) rules(n *yaml.Node) []Rule {
	n = resolve(n)
	if isNull(n) {
		return nil
	}
	if n.Kind != yaml.SequenceNode {
		l.fail(n, -1, "", "rules", "want a list of rules")
		return nil
	}
	rules := make([]Rule, len(n.Content))
	l.o.lines = make([]int, len(n.Content))
	l.o.fieldLines = make([]map[string]int, len(n.Content))
	for i, e := range n.Content {
		rules[i] = l.rule(resolve(e), i)
	}
	return rules
}

var ruleFields = "id, preset, tool, namespace, tags, source, agent, arguments, effect or reason"

func (l *loader) rule(n *yaml.Node, entry int) Rule {
	var r Rule
	if n == nil || n.Kind != yaml.MappingNode {
		l.fail(n, entry, "", "", "want a mapping with %s", ruleFields)
		return r
	}
	l.o.lines[entry] = n.Line
	lines := map[string]int{}
	l.o.fieldLines[entry] = lines
	// The id comes first so that every error about the entry can name it.
	for i := 0; i+1 < len(n.Content); i += 2 {
		if k := resolve(n.Content[i]); k != nil && k.Value == "id" {
			if v := resolve(n.Content[i+1]); v != nil && v.Kind == yaml.ScalarNode {
				r.ID = v.Value
			}
		}
	}
	id := r.ID
	seen := map[string]bool{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		if !l.key(k, seen, entry, id, "") {
			continue
		}
		k = resolve(k)
		field := k.Value
		lines[field] = k.Line
		switch field {
		case "id":
			r.ID, _ = l.scalar(v, entry, id, field)
		case "preset":
			r.Preset, _ = l.scalar(v, entry, id, field)
		case "effect":
			s, _ := l.scalar(v, entry, id, field)
			r.Effect = Effect(s)
		case "reason":
			r.Reason, _ = l.scalar(v, entry, id, field)
		case "tool":
			r.Tools = l.list(v, entry, id, field, lines)
		case "namespace":
			r.Namespaces = l.list(v, entry, id, field, lines)
		case "source":
			r.Sources = l.list(v, entry, id, field, lines)
		case "agent":
			r.Agents = l.list(v, entry, id, field, lines)
		case "tags":
			r.Tags = l.tags(v, entry, id, lines)
		case "arguments":
			r.Arguments = l.arguments(v, entry, id, lines)
		default:
			l.fail(k, entry, id, "", "unknown field %q; want %s", field, ruleFields)
		}
	}
	return r
}

func (l *loader) scalar(n *yaml.Node, entry int, id, field string) (string, bool) {
	n = resolve(n)
	if isNull(n) || n.Kind != yaml.ScalarNode {
		l.fail(n, entry, id, field, "want a string")
		return "", false
	}
	return n.Value, true
}

func (l *loader) list(n *yaml.Node, entry int, id, field string, lines map[string]int) []string {
	n = resolve(n)
	switch {
	case isNull(n):
	case n.Kind == yaml.ScalarNode:
		lines[field+"[0]"] = n.Line
		return []string{n.Value}
	case n.Kind == yaml.SequenceNode:
		if len(n.Content) == 0 {
			l.fail(n, entry, id, field, "empty list; leave the field out to match anything")
			return nil
		}
		out := make([]string, 0, len(n.Content))
		for i, e := range n.Content {
			item := fmt.Sprintf("%s[%d]", field, i)
			if s, ok := l.scalar(e, entry, id, item); ok {
				lines[item] = resolve(e).Line
				out = append(out, s)
			}
		}
		return out
	}
	l.fail(n, entry, id, field, "want a string or a list of strings")
	return nil
}

func (l *loader) tags(n *yaml.Node, entry int, id string, lines map[string]int) TagMatch {
	var t TagMatch
	n = resolve(n)
	if n == nil || n.Kind != yaml.MappingNode || len(n.Content) == 0 {
		l.fail(n, entry, id, "tags", "want a mapping with any, all or none")
		return t
	}
	seen := map[string]bool{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		if !l.key(k, seen, entry, id, "tags.") {
			continue
		}
		k = resolve(k)
		field := "tags." + k.Value
		lines[field] = k.Line
		switch k.Value {
		case "any":
			t.Any = l.list(v, entry, id, field, lines)
		case "all":
			t.All = l.list(v, entry, id, field, lines)
		case "none":
			t.None = l.list(v, entry, id, field, lines)
		default:
			l.fail(k, entry, id, "tags", "unknown field %q; want any, all or none", k.Value)
		}
	}
	return t
}

func (l *loader) arguments(n *yaml.Node, entry int, id string, lines map[string]int) []Argument {
	n = resolve(n)
	if n == nil || n.Kind != yaml.SequenceNode || len(n.Content) == 0 {
		l.fail(n, entry, id, "arguments", "want a non-empty list of conditions")
		return nil
	}
	out := make([]Argument, len(n.Content))
	for i, e := range n.Content {
		prefix := fmt.Sprintf("arguments[%d]", i)
		e = resolve(e)
		if e == nil || e.Kind != yaml.MappingNode {
			l.fail(e, entry, id, prefix, "want a mapping with pointer and one of equals, one_of, regex, exists")
			continue
		}
		lines[prefix] = e.Line
		a := &out[i]
		hasPointer := false
		seen := map[string]bool{}
		for j := 0; j+1 < len(e.Content); j += 2 {
			k, v := e.Content[j], e.Content[j+1]
			if !l.key(k, seen, entry, id, prefix+".") {
				continue
			}
			k = resolve(k)
			field := prefix + "." + k.Value
			lines[field] = k.Line
			switch k.Value {
			case "pointer":
				a.Pointer, hasPointer = l.scalar(v, entry, id, field)
			case "equals":
				if b, err := l.json(v, 0); err != nil {
					l.fail(v, entry, id, field, "%v", err)
				} else {
					a.Equals = b
				}
			case "one_of":
				a.OneOf = l.oneOf(v, entry, id, field, lines)
			case "regex":
				if s, ok := l.scalar(v, entry, id, field); ok {
					if s == "" {
						l.fail(v, entry, id, field, "empty regular expression")
					}
					a.Regex = s
				}
			case "exists":
				v = resolve(v)
				var b bool
				if v == nil || v.Kind != yaml.ScalarNode || v.ShortTag() != "!!bool" || v.Decode(&b) != nil {
					l.fail(v, entry, id, field, "want true or false")
					continue
				}
				a.Exists = &b
			default:
				l.fail(k, entry, id, prefix, "unknown field %q; want pointer, equals, one_of, regex or exists", k.Value)
			}
		}
		if !hasPointer && !seen["pointer"] {
			l.fail(e, entry, id, prefix+".pointer", `missing; "" selects the whole arguments object`)
		}
	}
	return out
}

func (l *loader) oneOf(n *yaml.Node, entry int, id, field string, lines map[string]int) []messages.JSON {
	n = resolve(n)
	if n == nil || n.Kind != yaml.SequenceNode {
		l.fail(n, entry, id, field, "want a list of values")
		return nil
	}
	out := make([]messages.JSON, 0, len(n.Content))
	for i, e := range n.Content {
		item := fmt.Sprintf("%s[%d]", field, i)
		lines[item] = resolve(e).Line
		b, err := l.json(e, 0)
		if err != nil {
			l.fail(e, entry, id, item, "%v", err)
			continue
		}
		out = append(out, b)
	}
	return out
}

var errTooLarge = errors.New("too many YAML nodes, aliases expanded")

// json converts a YAML value to canonical JSON.
func (l *loader) json(n *yaml.Node, depth int) ([]byte, error) {
	v, err := l.value(n, depth)
	if err != nil {
		return nil, err
	}
	return appendCanonical(nil, v), nil
}

var jsonNumber = regexp.MustCompile(`^-?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?$`)

// value converts a YAML value to the types decodeJSON produces.
func (l *loader) value(n *yaml.Node, depth int) (any, error) {
	if l.budget--; l.budget < 0 {
		return nil, errTooLarge
	}
	if depth > 100 {
		return nil, errors.New("value nested too deeply")
	}
	n = resolve(n)
	if n == nil {
		return nil, errors.New("alias to nothing")
	}
	switch n.Kind {
	case yaml.ScalarNode:
		switch tag := n.ShortTag(); tag {
		case "!!str", "!!timestamp", "!!binary":
			return n.Value, nil
		case "!!null":
			return nil, nil
		case "!!bool":
			var b bool
			if err := n.Decode(&b); err != nil {
				return nil, err
			}
			return b, nil
		case "!!int", "!!float":
			return yamlNumber(n)
		default:
			return nil, fmt.Errorf("YAML tag %s has no JSON form", tag)
		}
	case yaml.SequenceNode:
		out := make([]any, 0, len(n.Content))
		for _, e := range n.Content {
			v, err := l.value(e, depth+1)
			if err != nil {
				return nil, err
			}
			out = append(out, v)
		}
		return out, nil
	case yaml.MappingNode:
		out := make(map[string]any, len(n.Content)/2)
		for i := 0; i+1 < len(n.Content); i += 2 {
			k := resolve(n.Content[i])
			if k == nil || k.Kind != yaml.ScalarNode || isNull(k) || k.ShortTag() == "!!merge" {
				return nil, errors.New("object keys must be strings")
			}
			if _, dup := out[k.Value]; dup {
				return nil, fmt.Errorf("object key %q given twice", k.Value)
			}
			v, err := l.value(n.Content[i+1], depth+1)
			if err != nil {
				return nil, err
			}
			out[k.Value] = v
		}
		return out, nil
	}
	return nil, errors.New("unsupported YAML value")
}

func yamlNumber(n *yaml.Node) (any, error) {
	if jsonNumber.MatchString(n.Value) {
		return json.Number(n.Value), nil
	}
	var v any
	if err := n.Decode(&v); err != nil {
		return nil, err
	}
	switch x := v.(type) {
	case int:
		return json.Number(strconv.Itoa(x)), nil
	case int64:
		return json.Number(strconv.FormatInt(x, 10)), nil
	case uint64:
		return json.Number(strconv.FormatUint(x, 10)), nil
	case float64:
		if math.IsNaN(x) || math.IsInf(x, 0) {
			return nil, fmt.Errorf("number %s has no JSON form", n.Value)
		}
		return json.Number(strconv.FormatFloat(x, 'g', -1, 64)), nil
	}
	return nil, fmt.Errorf("number %s has no JSON form", n.Value)
}
