package policy

import (
	"errors"
	"strings"
	"testing"
	"testing/iotest"

	"github.com/toolbus/toolbus/pkg/messages"
)

func TestParseErrors(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		src   string
		rule  int    // index of the entry, -1 for the file
		id    string // the entry's id
		field string
		line  int
		msg   string // a fragment of the message
	}{
		{name: "empty file", src: "", rule: -1, field: "default", msg: "missing"},
		{name: "empty rules, no default", src: "rules: []", rule: -1, field: "default", msg: "missing"},
		{name: "unknown default", src: "default: maybe", rule: -1, field: "default", line: 1, msg: `unknown effect "maybe"`},
		{name: "unknown top-level key", src: "default: deny\nrule: []", rule: -1, line: 2, msg: `unknown field "rule"`},
		{name: "not a mapping", src: "- a\n- b", rule: -1, line: 1, msg: "want a mapping"},
		{name: "bad YAML", src: "default: [", rule: -1, msg: "invalid YAML"},
		{name: "two documents", src: "default: deny\n---\ndefault: allow", rule: -1, msg: "more than one YAML document"},
		{name: "rules not a list", src: "default: deny\nrules: {a: b}", rule: -1, field: "rules", msg: "want a list"},
		{name: "duplicate top-level key", src: "default: deny\ndefault: allow", rule: -1, field: "default", line: 2, msg: "given twice"},
		{name: "rule not a mapping", src: "default: deny\nrules: [allow]", rule: 0, msg: "want a mapping"},
		{name: "unknown effect", src: "default: deny\nrules:\n  - id: x\n    effect: permit", rule: 0, id: "x", field: "effect", line: 4, msg: `unknown effect "permit"`},
		{name: "missing effect", src: "default: deny\nrules:\n  - tool: \"a:b\"", rule: 0, field: "effect", line: 3, msg: "missing"},
		{name: "unknown rule key, id named though later", src: "default: deny\nrules:\n  - {effect: allow}\n  - efect: allow\n    id: late", rule: 1, id: "late", line: 4, msg: `unknown field "efect"`},
		{name: "duplicate rule key", src: "default: deny\nrules:\n  - {effect: allow, effect: deny}", rule: 0, field: "effect", msg: "given twice"},
		{name: "bad regex", src: "default: deny\nrules:\n  - id: r\n    effect: deny\n    arguments:\n      - pointer: /a\n        regex: \"(\"", rule: 0, id: "r", field: "arguments[0].regex", line: 7, msg: "invalid regular expression"},
		{name: "empty regex", src: "default: deny\nrules:\n  - {effect: deny, arguments: [{pointer: /a, regex: ''}]}", rule: 0, field: "arguments[0].regex", msg: "empty regular expression"},
		{name: "bad pointer", src: "default: deny\nrules:\n  - {effect: deny, arguments: [{pointer: a/b, exists: true}]}", rule: 0, field: "arguments[0].pointer", msg: "must be empty or start with '/'"},
		{name: "bad pointer escape", src: "default: deny\nrules:\n  - {effect: deny, arguments: [{pointer: /a~2, exists: true}]}", rule: 0, field: "arguments[0].pointer", msg: "'~' must be followed by"},
		{name: "missing pointer", src: "default: deny\nrules:\n  - {effect: deny, arguments: [{exists: true}]}", rule: 0, field: "arguments[0].pointer", msg: "missing"},
		{name: "two operators", src: "default: deny\nrules:\n  - {effect: deny, arguments: [{pointer: /a, exists: true, equals: 1}]}", rule: 0, field: "arguments[0]", msg: "exactly one of"},
		{name: "no operator", src: "default: deny\nrules:\n  - {effect: deny, arguments: [{pointer: /a}]}", rule: 0, field: "arguments[0]", msg: "found 0"},
		{name: "exists not a bool", src: "default: deny\nrules:\n  - {effect: deny, arguments: [{pointer: /a, exists: yes}]}", rule: 0, field: "arguments[0].exists", msg: "want true or false"},
		{name: "one_of not a list", src: "default: deny\nrules:\n  - {effect: deny, arguments: [{pointer: /a, one_of: 1}]}", rule: 0, field: "arguments[0].one_of", msg: "want a list"},
		{name: "one_of empty", src: "default: deny\nrules:\n  - {effect: deny, arguments: [{pointer: /a, one_of: []}]}", rule: 0, field: "arguments[0].one_of", msg: "never match"},
		{name: "equals infinity", src: "default: deny\nrules:\n  - {effect: deny, arguments: [{pointer: /a, equals: .inf}]}", rule: 0, field: "arguments[0].equals", msg: "no JSON form"},
		{name: "equals with non-string keys", src: "default: deny\nrules:\n  - {effect: deny, arguments: [{pointer: /a, equals: {[1]: 2}}]}", rule: 0, field: "arguments[0].equals", msg: "keys must be strings"},
		{name: "unknown argument key", src: "default: deny\nrules:\n  - {effect: deny, arguments: [{pointer: /a, matches: x}]}", rule: 0, field: "arguments[0]", msg: `unknown field "matches"`},
		{name: "empty arguments", src: "default: deny\nrules:\n  - {effect: deny, arguments: []}", rule: 0, field: "arguments", msg: "non-empty list"},
		{name: "unknown preset", src: "default: deny\nrules:\n  - preset: ask_everything", rule: 0, field: "preset", line: 3, msg: `unknown preset "ask_everything"`},
		{name: "preset with more fields", src: "default: deny\nrules:\n  - {preset: ask_network, effect: deny}", rule: 0, field: "preset", msg: "no other field"},
		{name: "preset used twice", src: "default: deny\nrules:\n  - preset: ask_network\n  - preset: ask_network", rule: 1, id: "ask_network", field: "preset", line: 4, msg: "already used by rules[0]"},
		{name: "duplicate id", src: "default: deny\nrules:\n  - {id: a, effect: deny}\n  - {id: a, effect: allow}", rule: 1, id: "a", field: "id", line: 4, msg: "already used by rules[0]"},
		{name: "bad tool pattern", src: "default: deny\nrules:\n  - effect: deny\n    tool:\n      - \"a:b\"\n      - \"a b:c\"", rule: 0, field: "tool[1]", line: 6, msg: `invalid tool pattern "a b:c"`},
		{name: "empty method", src: "default: deny\nrules:\n  - {effect: deny, tool: \"a:\"}", rule: 0, field: "tool[0]", msg: "the method"},
		{name: "empty tool list", src: "default: deny\nrules:\n  - {effect: deny, tool: []}", rule: 0, field: "tool", msg: "empty list"},
		{name: "tool not a string", src: "default: deny\nrules:\n  - {effect: deny, tool: {a: b}}", rule: 0, field: "tool", msg: "want a string or a list"},
		{name: "null list item", src: "default: deny\nrules:\n  - {effect: deny, agent: [a, ~]}", rule: 0, field: "agent[1]", msg: "want a string"},
		{name: "bad namespace", src: "default: deny\nrules:\n  - {effect: deny, namespace: a-b}", rule: 0, field: "namespace[0]", msg: "namespace"},
		{name: "unknown source", src: "default: deny\nrules:\n  - {effect: deny, source: grpc}", rule: 0, field: "source[0]", msg: `unknown source kind "grpc"`},
		{name: "tags not a mapping", src: "default: deny\nrules:\n  - {effect: deny, tags: [a]}", rule: 0, field: "tags", msg: "want a mapping"},
		{name: "unknown tags key", src: "default: deny\nrules:\n  - {effect: deny, tags: {some: [a]}}", rule: 0, field: "tags", msg: `unknown field "some"`},
		{name: "empty tag", src: "default: deny\nrules:\n  - {effect: deny, tags: {all: [a, '']}}", rule: 0, field: "tags.all[1]", msg: "empty tag"},
		{name: "alias bomb", src: aliasBomb, rule: 0, field: "arguments[0].equals", msg: "too many YAML nodes"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			p, err := Parse([]byte(tc.src), "test.yaml")
			if err == nil {
				t.Fatalf("Parse succeeded with version %s", p.Version())
			}
			if !errors.Is(err, ErrInvalid) {
				t.Fatalf("error %v is not ErrInvalid", err)
			}
			var ve *ValidationError
			if !errors.As(err, &ve) {
				t.Fatalf("error %v holds no ValidationError", err)
			}
			if ve.Source != "test.yaml" || ve.Rule != tc.rule || ve.RuleID != tc.id || ve.Field != tc.field || !strings.Contains(ve.Message, tc.msg) {
				t.Fatalf("got %+v (%v), want rule %d id %q field %q message containing %q", ve, err, tc.rule, tc.id, tc.field, tc.msg)
			}
			if tc.line != 0 && ve.Line != tc.line {
				t.Fatalf("got line %d, want %d: %v", ve.Line, tc.line, err)
			}
		})
	}
}

// aliasBomb is a small file whose argument value expands to 10^6 strings.
const aliasBomb = `
default: deny
rules:
  - effect: deny
    arguments:
      - pointer: /a
        equals:
          - &a [x, x, x, x, x, x, x, x, x, x]
          - &b [*a, *a, *a, *a, *a, *a, *a, *a, *a, *a]
          - &c [*b, *b, *b, *b, *b, *b, *b, *b, *b, *b]
          - &d [*c, *c, *c, *c, *c, *c, *c, *c, *c, *c]
          - &e [*d, *d, *d, *d, *d, *d, *d, *d, *d, *d]
          - &f [*e, *e, *e, *e, *e, *e, *e, *e, *e, *e]
`

func TestParseErrorMessage(t *testing.T) {
	t.Parallel()
	_, err := Parse([]byte("default: deny\nrules:\n  - id: no-rm\n    effect: deny\n    arguments: [{pointer: /a, regex: \"(\"}]\n  - effect: maybe\n"), "policy.yaml")
	if err == nil {
		t.Fatal("Parse succeeded")
	}
	msg := err.Error()
	for _, want := range []string{
		`policy.yaml:5: rules[0] (id "no-rm"): arguments[0].regex: invalid regular expression "("`,
		`policy.yaml:6: rules[1]: effect: unknown effect "maybe"; want allow, deny or ask`,
	} {
		if !strings.Contains(msg, want) {
			t.Errorf("error\n%s\ndoes not hold\n%s", msg, want)
		}
	}
	var errs interface{ Unwrap() []error }
	if !errors.As(err, &errs) || len(errs.Unwrap()) != 2 {
		t.Errorf("want both problems reported as separate errors: %v", err)
	}
}

func TestNewErrors(t *testing.T) {
	t.Parallel()
	_, err := New(Allow, []Rule{{ID: "x", Effect: "block", Arguments: []Argument{{Pointer: "/a", Equals: messages.JSON(`{`)}}}})
	var ve *ValidationError
	if !errors.As(err, &ve) {
		t.Fatalf("got %v", err)
	}
	if got := err.Error(); !strings.Contains(got, `policy: rules[0] (id "x"): effect: unknown effect "block"`) ||
		!strings.Contains(got, `rules[0] (id "x"): arguments[0].equals: invalid JSON`) {
		t.Fatalf("error %q does not name both problems", got)
	}
}

func TestLoad(t *testing.T) {
	t.Parallel()
	p, err := Load(strings.NewReader("default: ask\nrules:\n  - {tool: \"a:*\", effect: allow}\n"), "a.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if d := p.Evaluate(Request{Tool: def(t, "a-b")}); d.Effect != Allow {
		t.Fatalf("got %s", d.Effect)
	}
	if _, err := Load(iotest.ErrReader(errors.New("disk on fire")), "a.yaml"); err == nil || errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "disk on fire") {
		t.Fatalf("reader failure: got %v", err)
	}
}

func TestParseYAMLValues(t *testing.T) {
	t.Parallel()
	// YAML scalars become the JSON values a user means.
	p := mustParse(t, `
default: allow
rules:
  - id: v
    arguments:
      - {pointer: /hex, equals: 0x10}
      - {pointer: /float, equals: 1.50}
      - {pointer: /word, equals: yes}
      - {pointer: /date, equals: 2024-01-02}
      - {pointer: /list, equals: [1, "1"]}
    effect: deny
`)
	d := p.Evaluate(Request{Tool: def(t, "a-b"), Arguments: messages.JSON(`{"hex": 16, "float": 1.5, "word": "yes", "date": "2024-01-02", "list": [1.0, "1"]}`)})
	if d.RuleID != "v" {
		t.Fatalf("got %+v", d)
	}
}
