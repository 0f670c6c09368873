package policy

import (
	"errors"
	"strings"
	"testing"

	"github.com/toolbus/toolbus/pkg/messages"
)

// def returns a tool definition for a canonical name, with tags.
func def(t testing.TB, name string, tags ...string) messages.ToolDefinition {
	t.Helper()
	n, err := messages.ParseToolName(name)
	if err != nil {
		t.Fatal(err)
	}
	return messages.ToolDefinition{
		Name: n.String(), Namespace: n.Namespace, Method: n.Method,
		Metadata: messages.ToolMetadata{Tags: tags},
		Source:   messages.ToolSource{Kind: messages.SourceGo},
	}
}

func mustParse(t testing.TB, src string) *Policy {
	t.Helper()
	p, err := Parse([]byte(src), "test.yaml")
	if err != nil {
		t.Fatalf("Parse: %v", err)
	}
	return p
}

type evalCase struct {
	name   string
	tool   messages.ToolDefinition
	agent  string
	args   string
	effect Effect
	ruleID string // "" with index -1 means the default
}

func runEvalCases(t *testing.T, p *Policy, cases []evalCase) {
	t.Helper()
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			d := p.Evaluate(Request{Tool: tc.tool, Agent: tc.agent, Arguments: messages.JSON(tc.args)})
			if d.Effect != tc.effect || d.RuleID != tc.ruleID {
				t.Fatalf("got %s by rule %q (index %d, %q), want %s by rule %q", d.Effect, d.RuleID, d.RuleIndex, d.Reason, tc.effect, tc.ruleID)
			}
			if tc.ruleID == "" && d.RuleIndex != -1 {
				t.Fatalf("rule index %d, want -1 for the default", d.RuleIndex)
			}
			if d.Version != p.Version() {
				t.Fatalf("decision version %q, policy version %q", d.Version, p.Version())
			}
		})
	}
}

func TestEvaluateFirstMatchWins(t *testing.T) {
	t.Parallel()
	p := mustParse(t, `
default: ask
rules:
  - id: read
    tool: "fs:read"
    effect: allow
  - id: fs
    tool: "fs:*"
    effect: deny
  - id: read-again
    tool: "fs:read"
    effect: ask
`)
	runEvalCases(t, p, []evalCase{
		{name: "earlier rule wins", tool: def(t, "fs-read"), effect: Allow, ruleID: "read"},
		{name: "second rule", tool: def(t, "fs-write"), effect: Deny, ruleID: "fs"},
		{name: "default", tool: def(t, "web-get"), effect: Ask},
	})
}

func TestEvaluateToolPatterns(t *testing.T) {
	t.Parallel()
	p := mustParse(t, `
default: deny
rules:
  - {id: colon, tool: "a:colon", effect: allow}
  - {id: slash, tool: "a/slash", effect: allow}
  - {id: dot, tool: "a.dot", effect: allow}
  - {id: dash, tool: "a-dash-ed", effect: allow}
  - {id: nested, tool: "x/y:nested", effect: allow}
  - {id: any-list, tool: "*:list", effect: allow}
  - {id: prefix, tool: "b:get_*", effect: allow}
  - {id: middle, tool: "c:*_by_*", effect: allow}
  - {id: exact, tool: "catalog:lookup", effect: allow}
  - {id: bare, tool: fsx, effect: allow}
  - {id: several, tool: ["d:one", "e:two"], effect: allow}
`)
	runEvalCases(t, p, []evalCase{
		{name: "colon", tool: def(t, "a-colon"), effect: Allow, ruleID: "colon"},
		{name: "slash", tool: def(t, "a-slash"), effect: Allow, ruleID: "slash"},
		{name: "dot", tool: def(t, "a-dot"), effect: Allow, ruleID: "dot"},
		{name: "dash in method", tool: def(t, "a-dash-ed"), effect: Allow, ruleID: "dash"},
		{name: "nested service", tool: def(t, "x_y-nested"), effect: Allow, ruleID: "nested"},
		{name: "glob namespace", tool: def(t, "zz-list"), effect: Allow, ruleID: "any-list"},
		{name: "glob namespace, other method", tool: def(t, "zz-lists"), effect: Deny},
		{name: "glob prefix", tool: def(t, "b-get_user"), effect: Allow, ruleID: "prefix"},
		{name: "glob prefix, empty run", tool: def(t, "b-get_"), effect: Allow, ruleID: "prefix"},
		{name: "glob prefix, no match", tool: def(t, "b-put_user"), effect: Deny},
		{name: "glob middle", tool: def(t, "c-find_by_id"), effect: Allow, ruleID: "middle"},
		{name: "glob middle, no match", tool: def(t, "c-find_id"), effect: Deny},
		{name: "exact is exact", tool: def(t, "catalog-lookupAll"), effect: Deny},
		{name: "exact", tool: def(t, "catalog-lookup"), effect: Allow, ruleID: "exact"},
		{name: "bare namespace", tool: def(t, "fsx-anything"), effect: Allow, ruleID: "bare"},
		{name: "bare namespace is not a prefix", tool: def(t, "fsxy-anything"), effect: Deny},
		{name: "list, second", tool: def(t, "e-two"), effect: Allow, ruleID: "several"},
		{name: "list, crossed", tool: def(t, "d-two"), effect: Deny},
		{name: "name only", tool: messages.ToolDefinition{Name: "e-two"}, effect: Allow, ruleID: "several"},
	})
}

func TestEvaluateToolConditions(t *testing.T) {
	t.Parallel()
	p := mustParse(t, `
default: allow
rules:
  - {id: ns, namespace: [shell, sys], effect: deny}
  - {id: all, tags: {all: [network, destructive]}, effect: deny}
  - {id: any, tags: {any: [billing, payments]}, effect: ask}
  - {id: none, tags: {any: [read_only], none: [secret]}, effect: allow}
  - {id: read-secret, tags: {any: [read_only]}, effect: ask}
  - {id: mcp, source: mcp, effect: ask}
`)
	mcp := def(t, "remote-search")
	mcp.Source.Kind = messages.SourceMCP
	runEvalCases(t, p, []evalCase{
		{name: "namespace", tool: def(t, "sys-reboot"), effect: Deny, ruleID: "ns"},
		{name: "namespace, other", tool: def(t, "shellfish-eat"), effect: Allow},
		{name: "tags all", tool: def(t, "web-delete", "network", "destructive"), effect: Deny, ruleID: "all"},
		{name: "tags all, one missing", tool: def(t, "web-post", "network"), effect: Allow},
		{name: "tags any, custom tag", tool: def(t, "shop-pay", "payments"), effect: Ask, ruleID: "any"},
		{name: "tags none holds", tool: def(t, "kv-get", "read_only"), effect: Allow, ruleID: "none"},
		{name: "tags none fails", tool: def(t, "vault-get", "read_only", "secret"), effect: Ask, ruleID: "read-secret"},
		{name: "source", tool: mcp, effect: Ask, ruleID: "mcp"},
	})
}

func TestEvaluateAgents(t *testing.T) {
	t.Parallel()
	p := mustParse(t, `
default: deny
rules:
  - {id: admin, agent: admin, effect: allow}
  - {id: ci, agent: ["ci-*", "*-bot"], tool: "build:*", effect: allow}
  - {id: everyone, agent: "*", tool: "help:*", effect: allow}
`)
	runEvalCases(t, p, []evalCase{
		{name: "exact", tool: def(t, "sys-reboot"), agent: "admin", effect: Allow, ruleID: "admin"},
		{name: "exact is exact", tool: def(t, "sys-reboot"), agent: "admin2", effect: Deny},
		{name: "glob prefix", tool: def(t, "build-run"), agent: "ci-7", effect: Allow, ruleID: "ci"},
		{name: "glob suffix", tool: def(t, "build-run"), agent: "deploy-bot", effect: Allow, ruleID: "ci"},
		{name: "glob, other tool", tool: def(t, "sys-reboot"), agent: "ci-7", effect: Deny},
		{name: "glob, no match", tool: def(t, "build-run"), agent: "cid", effect: Deny},
		{name: "star matches anonymous", tool: def(t, "help-me"), effect: Allow, ruleID: "everyone"},
	})
}

func TestEvaluateArguments(t *testing.T) {
	t.Parallel()
	p := mustParse(t, `
default: allow
rules:
  - {id: force, tool: "git:push", arguments: [{pointer: /force, equals: true}], effect: deny}
  - {id: count, tool: "db:query", arguments: [{pointer: /limit, equals: 1000}], effect: ask}
  - {id: big, tool: "db:query", arguments: [{pointer: /id, equals: 9007199254740993}], effect: deny}
  - {id: mode, tool: "fs:chmod", arguments: [{pointer: /mode, one_of: ["777", 511]}], effect: deny}
  - id: etc
    tool: "fs:*"
    arguments:
      - {pointer: /paths/0, regex: "^/etc/"}
      - {pointer: /dry_run, exists: false}
    effect: deny
  - {id: unanchored, tool: "sh:run", arguments: [{pointer: /cmd, regex: "rm -rf"}], effect: deny}
  - {id: escaped, tool: "http:get", arguments: [{pointer: "/headers/x~1y~0z", equals: "1"}], effect: deny}
  - {id: nul, tool: "kv:put", arguments: [{pointer: /value, equals: null}], effect: deny}
  - {id: object, tool: "kv:put", arguments: [{pointer: /value, equals: {a: 1, b: [true]}}], effect: ask}
  - {id: has-env, tool: "kv:put", arguments: [{pointer: /env, exists: true}], effect: ask}
  - {id: whole, tool: "kv:get", arguments: [{pointer: "", equals: {}}], effect: ask}
`)
	push, query, chmod, rm, sh, get, put, kvget := def(t, "git-push"), def(t, "db-query"), def(t, "fs-chmod"), def(t, "fs-rm"), def(t, "sh-run"), def(t, "http-get"), def(t, "kv-put"), def(t, "kv-get")
	runEvalCases(t, p, []evalCase{
		{name: "equals bool", tool: push, args: `{"force": true}`, effect: Deny, ruleID: "force"},
		{name: "equals bool, other", tool: push, args: `{"force": false}`, effect: Allow},
		{name: "equals, type mismatch", tool: push, args: `{"force": "true"}`, effect: Allow},
		{name: "equals, missing pointer", tool: push, args: `{}`, effect: Allow},
		{name: "equals, empty arguments", tool: push, effect: Allow},
		{name: "equals, null arguments", tool: push, args: `null`, effect: Allow},
		{name: "equals, duplicate key: last wins", tool: push, args: `{"force": false, "force": true}`, effect: Deny, ruleID: "force"},
		{name: "equals, duplicate key: last wins the other way", tool: push, args: `{"force": true, "force": false}`, effect: Allow},
		{name: "equals, escaped key", tool: push, args: `{"f\u006frce": true}`, effect: Deny, ruleID: "force"},
		{name: "number", tool: query, args: `{"limit": 1000}`, effect: Ask, ruleID: "count"},
		{name: "number, other spelling", tool: query, args: `{"limit": 1.0e3}`, effect: Ask, ruleID: "count"},
		{name: "number, trailing zeros", tool: query, args: `{"limit": 1000.000}`, effect: Ask, ruleID: "count"},
		{name: "number, differs", tool: query, args: `{"limit": 1000.5}`, effect: Allow},
		{name: "number vs string", tool: query, args: `{"limit": "1000"}`, effect: Allow},
		{name: "number beyond float64", tool: query, args: `{"id": 9007199254740993}`, effect: Deny, ruleID: "big"},
		{name: "number beyond float64, neighbour", tool: query, args: `{"id": 9007199254740992}`, effect: Allow},
		{name: "one_of string", tool: chmod, args: `{"mode": "777"}`, effect: Deny, ruleID: "mode"},
		{name: "one_of number", tool: chmod, args: `{"mode": 511}`, effect: Deny, ruleID: "mode"},
		{name: "one_of none", tool: chmod, args: `{"mode": "755"}`, effect: Allow},
		{name: "regex and exists", tool: rm, args: `{"paths": ["/etc/passwd", "/tmp"]}`, effect: Deny, ruleID: "etc"},
		{name: "regex, exists fails", tool: rm, args: `{"paths": ["/etc/passwd"], "dry_run": null}`, effect: Allow},
		{name: "regex, second element", tool: rm, args: `{"paths": ["/tmp", "/etc/passwd"]}`, effect: Allow},
		{name: "regex, anchored", tool: rm, args: `{"paths": ["/home/etc/x"]}`, effect: Allow},
		{name: "regex, not a string", tool: rm, args: `{"paths": [42]}`, effect: Allow},
		{name: "regex, escaped string", tool: rm, args: `{"paths": ["\/etc\/x"]}`, effect: Deny, ruleID: "etc"},
		{name: "regex, array index missing", tool: rm, args: `{"paths": []}`, effect: Allow},
		{name: "regex, pointer through a scalar", tool: rm, args: `{"paths": "/etc/x"}`, effect: Allow},
		{name: "regex unanchored", tool: sh, args: `{"cmd": "cd / && rm -rf *"}`, effect: Deny, ruleID: "unanchored"},
		{name: "escaped pointer", tool: get, args: `{"headers": {"x/y~z": "1"}}`, effect: Deny, ruleID: "escaped"},
		{name: "escaped pointer, unescaped key", tool: get, args: `{"headers": {"x~1y~0z": "1"}}`, effect: Allow},
		{name: "equals null", tool: put, args: `{"value": null}`, effect: Deny, ruleID: "nul"},
		{name: "equals object, other key order", tool: put, args: `{"value": {"b": [true], "a": 1.0}}`, effect: Ask, ruleID: "object"},
		{name: "equals object, differs", tool: put, args: `{"value": {"b": [false], "a": 1}}`, effect: Allow},
		{name: "exists true, null value", tool: put, args: `{"env": null}`, effect: Ask, ruleID: "has-env"},
		{name: "whole document", tool: kvget, args: ` { } `, effect: Ask, ruleID: "whole"},
		{name: "whole document, empty arguments", tool: kvget, effect: Ask, ruleID: "whole"},
		{name: "malformed arguments are denied", tool: push, args: `{"force": tru`, effect: Deny},
		{name: "malformed arguments untested", tool: def(t, "other-tool"), args: `{"force": tru`, effect: Allow},
	})
}

func TestEvaluateNilPolicy(t *testing.T) {
	t.Parallel()
	var p *Policy
	d := p.Evaluate(Request{Tool: def(t, "sys-reboot", messages.TagPrivileged)})
	if d.Effect != Allow || d.RuleIndex != -1 {
		t.Fatalf("nil policy: got %+v, want allow by default", d)
	}
	empty, err := New(Allow, nil)
	if err != nil {
		t.Fatal(err)
	}
	if p.Version() != empty.Version() || d.Version != empty.Version() {
		t.Fatalf("nil policy version %q, empty allow policy version %q", p.Version(), empty.Version())
	}
	if !p.Visible("a", def(t, "sys-reboot")) || p.Default() != Allow || p.Rules() != nil {
		t.Fatal("nil policy must show every tool, default to allow and have no rules")
	}
}

func TestDecisionReasons(t *testing.T) {
	t.Parallel()
	p := mustParse(t, `
default: deny
rules:
  - {id: named, tool: "a:x", effect: allow}
  - {tool: "a:y", effect: allow}
  - {tool: "a:z", effect: ask, reason: needs a human}
`)
	for _, tc := range []struct {
		tool   string
		reason string
		index  int
	}{
		{"a-x", `matched rule "named"`, 0},
		{"a-y", "matched rules[1]", 1},
		{"a-z", "needs a human", 2},
		{"a-w", "no rule matched; the default is deny", -1},
	} {
		d := p.Evaluate(Request{Tool: def(t, tc.tool)})
		if d.Reason != tc.reason || d.RuleIndex != tc.index {
			t.Errorf("%s: got reason %q index %d, want %q index %d", tc.tool, d.Reason, d.RuleIndex, tc.reason, tc.index)
		}
	}
}

func TestVisible(t *testing.T) {
	t.Parallel()
	p := mustParse(t, `
default: allow
rules:
  - {id: force, tool: "git:push", arguments: [{pointer: /force, equals: true}], effect: deny}
  - {id: tmp, tool: "fs:write", arguments: [{pointer: /path, regex: "^/tmp/"}], effect: allow}
  - {id: fs, tool: "fs:*", effect: deny}
  - {id: guest, agent: "guest-*", tool: "db:*", effect: deny}
  - {id: ask, tool: "pay:*", effect: ask}
  - {id: sh-ask, tool: "sh:run", arguments: [{pointer: /cmd, exists: true}], effect: ask}
  - {id: sh, tool: "sh:*", effect: deny}
`)
	denyDefault := mustParse(t, "default: deny\nrules: [{tool: \"ok:*\", effect: allow}]")
	for _, tc := range []struct {
		name  string
		p     *Policy
		agent string
		tool  string
		want  bool
	}{
		{"denied only for some arguments", p, "a", "git-push", true},
		{"an argument rule allows some calls", p, "a", "fs-write", true},
		{"denied whatever the arguments", p, "a", "fs-read", false},
		{"denied for this agent", p, "guest-1", "db-query", false},
		{"not denied for another agent", p, "admin", "db-query", true},
		{"ask is visible", p, "a", "pay-send", true},
		{"an argument rule that asks", p, "a", "sh-run", true},
		{"later deny still hides other tools", p, "a", "sh-exec", false},
		{"default allow", p, "a", "web-get", true},
		{"default deny", denyDefault, "a", "web-get", false},
		{"allowed under default deny", denyDefault, "a", "ok-go", true},
	} {
		if got := tc.p.Visible(tc.agent, def(t, tc.tool)); got != tc.want {
			t.Errorf("%s: Visible(%q, %q) = %v, want %v", tc.name, tc.agent, tc.tool, got, tc.want)
		}
	}
}

func TestPresets(t *testing.T) {
	t.Parallel()
	p := mustParse(t, `
default: deny
rules:
  - preset: deny_privileged
  - preset: ask_destructive
  - preset: allow_read_only
  - preset: ask_network
  - preset: ask_file_system
`)
	runEvalCases(t, p, []evalCase{
		{name: "privileged", tool: def(t, "sys-reboot", "privileged", "read_only"), effect: Deny, ruleID: "deny_privileged"},
		{name: "destructive", tool: def(t, "fs-rm", "destructive", "file_system"), effect: Ask, ruleID: "ask_destructive"},
		{name: "read-only", tool: def(t, "fs-read", "read_only", "file_system"), effect: Allow, ruleID: "allow_read_only"},
		{name: "network", tool: def(t, "web-post", "network"), effect: Ask, ruleID: "ask_network"},
		{name: "file system", tool: def(t, "fs-touch", "file_system"), effect: Ask, ruleID: "ask_file_system"},
		{name: "untagged", tool: def(t, "misc-thing"), effect: Deny},
	})

	// Order decides between presets: read-only first lets a read-only
	// network tool through, network first asks.
	readFirst := mustParse(t, "default: deny\nrules: [{preset: allow_read_only}, {preset: ask_network}]")
	netFirst := mustParse(t, "default: deny\nrules: [{preset: ask_network}, {preset: allow_read_only}]")
	fetch := def(t, "web-fetch", "read_only", "network")
	if d := readFirst.Evaluate(Request{Tool: fetch}); d.Effect != Allow {
		t.Errorf("read-only first: got %s, want allow", d.Effect)
	}
	if d := netFirst.Evaluate(Request{Tool: fetch}); d.Effect != Ask {
		t.Errorf("network first: got %s, want ask", d.Effect)
	}
	// allow_read_only does not trust contradictory tags, whatever the order.
	first := mustParse(t, "default: ask\nrules: [{preset: allow_read_only}]")
	if d := first.Evaluate(Request{Tool: def(t, "fs-rm", "read_only", "destructive")}); d.Effect != Ask {
		t.Errorf("read-only and destructive: got %s by %q, want the default ask", d.Effect, d.RuleID)
	}

	// A preset in YAML is the same policy as its rules written out.
	for _, name := range Presets() {
		rules, ok := Preset(name)
		if !ok || len(rules) == 0 {
			t.Fatalf("Preset(%q) = %v, %v", name, rules, ok)
		}
		byName := mustParse(t, "default: allow\nrules: [{preset: "+name+"}]")
		byRules, err := New(Allow, rules)
		if err != nil {
			t.Fatalf("New(preset %s): %v", name, err)
		}
		if byName.Version() != byRules.Version() {
			t.Errorf("preset %s: version by name %s, by rules %s", name, byName.Version(), byRules.Version())
		}
	}
	if _, ok := Preset("allow_everything"); ok {
		t.Error("Preset found an unknown name")
	}
	// Preset returns a copy.
	rules, _ := Preset(PresetAskNetwork)
	rules[0].Tags.Any[0] = "changed"
	if again, _ := Preset(PresetAskNetwork); again[0].Tags.Any[0] != messages.TagNetwork {
		t.Error("changing the result of Preset changed the preset")
	}
}

func TestVersion(t *testing.T) {
	t.Parallel()
	base := `
default: deny
rules:
  - id: a
    tool: ["fs:read", "fs:list"]
    tags: {any: [x, y]}
    arguments: [{pointer: /n, one_of: [1, "two"]}]
    effect: allow
  - preset: ask_network
`
	same := []string{
		// other formatting, spellings, set orders and number forms
		"default: deny\nrules: [{id: a, tool: [fs/list, fs-read], tags: {any: [y, x, x]}, arguments: [{pointer: /n, one_of: [two, 1.0]}], effect: allow}, {preset: ask_network}]",
		"# comment\ndefault:   deny\nrules:\n- effect: allow\n  id: a\n  arguments:\n  - one_of: ['two', 1e0]\n    pointer: /n\n  tags:\n    any: [x, y]\n  tool: [fs.read, 'fs:list']\n- id: ask_network\n  tags: {any: [network]}\n  effect: ask\n  reason: the tool reaches the network and needs approval\n",
	}
	different := []string{
		strings.Replace(base, "default: deny", "default: ask", 1),
		strings.Replace(base, "effect: allow", "effect: ask", 1),
		strings.Replace(base, "id: a", "id: b", 1),
		strings.Replace(base, "fs:list", "fs:lists", 1),
		strings.Replace(base, "[x, y]", "[x]", 1),
		strings.Replace(base, "any: [x, y]", "all: [x, y]", 1),
		strings.Replace(base, `"two"`, `"three"`, 1),
		strings.Replace(base, "effect: allow", "effect: allow\n    reason: fine", 1),
		strings.Replace(base, "ask_network", "ask_file_system", 1),
		base + "  - {tool: \"x:*\", effect: deny}\n",
	}
	v := mustParse(t, base).Version()
	if len(v) != 64 {
		t.Fatalf("version %q is not a hex SHA-256", v)
	}
	for i, src := range same {
		if got := mustParse(t, src).Version(); got != v {
			t.Errorf("same[%d]: version %s, want %s", i, got, v)
		}
	}
	seen := map[string]int{v: -1}
	for i, src := range different {
		got := mustParse(t, src).Version()
		if j, dup := seen[got]; dup {
			t.Errorf("different[%d]: version %s equals that of %d", i, got, j)
		}
		seen[got] = i
	}

	// Rules and Default rebuild the same policy.
	p := mustParse(t, base)
	q, err := New(p.Default(), p.Rules())
	if err != nil {
		t.Fatal(err)
	}
	if q.Version() != v {
		t.Errorf("rebuilt from Rules: version %s, want %s", q.Version(), v)
	}
	if r := p.Rules(); len(r) != 2 || r[0].Tools[0] != "fs-list" || r[1].ID != PresetAskNetwork || string(r[0].Arguments[0].OneOf[1]) != "1" {
		t.Errorf("normalised rules: %+v", r)
	}
}

func TestNewFromGo(t *testing.T) {
	t.Parallel()
	yes := true
	p, err := New(Deny, []Rule{
		{Preset: PresetDenyPrivileged},
		{ID: "tmp", Tools: []string{"fs:write"}, Arguments: []Argument{
			{Pointer: "/path", Regex: "^/tmp/"},
			{Pointer: "/mode", OneOf: []messages.JSON{messages.JSON(`"a"`), messages.JSON(`"w"`)}},
			{Pointer: "/sync", Exists: &yes},
			{Pointer: "/n", Equals: messages.JSON(`2`)},
		}, Effect: Allow},
	})
	if err != nil {
		t.Fatal(err)
	}
	d := p.Evaluate(Request{Tool: def(t, "fs-write"), Arguments: messages.JSON(`{"path": "/tmp/x", "mode": "w", "sync": false, "n": 2.0}`)})
	if d.Effect != Allow || d.RuleID != "tmp" || d.RuleIndex != 1 {
		t.Fatalf("got %+v", d)
	}
	if _, err := New("", nil); !errors.Is(err, ErrInvalid) {
		t.Fatalf("New without a default: %v, want ErrInvalid", err)
	}
}
