package policy

import (
	"strings"
	"testing"

	"github.com/toolbus/toolbus/pkg/messages"
)

func petCatalog(t *testing.T) []messages.ToolDefinition {
	return []messages.ToolDefinition{
		def(t, "pets-createPet", messages.TagNetwork),
		def(t, "pets-listPets", messages.TagReadOnly),
		def(t, "pets-deletePet", messages.TagDestructive, "billing"),
		def(t, "demo-echo", messages.TagReadOnly),
	}
}

// TestCheckFindsRulesThatMatchNoTool: a rule naming a tool that does not
// exist (a typo) is reported with its field, line and the tool it likely
// meant; so are a namespace and a custom tag that nothing carries, and a
// rule whose conditions together match no tool. A preset matching no tool
// is not a problem, nor is a rule that matches.
func TestCheckFindsRulesThatMatchNoTool(t *testing.T) {
	t.Parallel()
	p := mustParse(t, `default: allow
rules:
  - preset: deny_privileged
  - id: hold-create
    tool: "pet:createPet"
    effect: ask
  - id: two
    tool: ["pets:listPets", "pets.deletePets"]
    effect: allow
  - id: fine
    tool: "pets-createPet"
    agent: "ci-*"
    arguments: [{pointer: /name, equals: rex}]
    effect: deny
  - id: tags
    tags: {any: [biling, network]}
    effect: ask
  - id: together
    tool: "pets:*"
    tags: {all: [destructive, network]}
    effect: deny
  - id: ns
    namespace: [pets, petz]
    effect: allow
`)
	problems := p.Check(petCatalog(t))
	var got []string
	for _, pr := range problems {
		if pr.Kind != Unmatched {
			t.Errorf("unexpected %s: %v", pr.Kind, pr)
		}
		got = append(got, pr.Error())
	}
	want := []string{
		`test.yaml:5: rules[1] (id "hold-create"): tool[0]: "pet:createPet" matches no tool of the catalog; did you mean pets-createPet?`,
		`test.yaml:8: rules[2] (id "two"): tool[1]: "pets.deletePets" matches no tool of the catalog; did you mean pets-deletePet?`,
		`test.yaml:16: rules[4] (id "tags"): tags.any[0]: no tool of the catalog carries the tag "biling", and it is not one Toolbus gives (read_only, destructive, network, file_system, slow, privileged)`,
		`test.yaml:18: rules[5] (id "together"): matches no tool of the catalog: no tool meets its tool, namespace, tags and source conditions at once`,
		`test.yaml:23: rules[6] (id "ns"): namespace[1]: no tool of the catalog is in namespace "petz"; did you mean pets?`,
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("problems:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if p.Check(nil) == nil {
		t.Error("against an empty catalog every rule but the preset matches nothing")
	}
	var nilPolicy *Policy
	if nilPolicy.Check(petCatalog(t)) != nil {
		t.Error("a nil policy has problems")
	}
}

// TestCheckFindsShadowedRules: a rule every one of whose tools an earlier
// rule decides for every agent and argument never decides; an earlier rule
// that tests arguments or names agents does not shadow it.
func TestCheckFindsShadowedRules(t *testing.T) {
	t.Parallel()
	p := mustParse(t, `default: deny
rules:
  - {id: all-pets, namespace: pets, effect: allow}
  - {id: create, tool: "pets:createPet", effect: ask}
  - {id: some-args, tool: "demo:echo", arguments: [{pointer: /text, equals: x}], effect: deny}
  - {id: echo, tool: "demo:echo", effect: allow}
  - {id: ci-only, agent: "ci-*", tool: "demo:echo", effect: deny}
  - {id: everyone, agent: "*", tool: "demo:*", effect: allow}
  - {id: echo-again, tool: "demo:echo", effect: deny}
`)
	var got []string
	for _, pr := range p.Check(petCatalog(t)) {
		got = append(got, string(pr.Kind)+" "+pr.RuleID+": "+pr.Message)
	}
	want := []string{
		`shadowed create: never decides a call: rules[0] (id "all-pets"), earlier, decides every tool of the catalog this rule matches (pets-createPet), for every agent and all arguments`,
		`shadowed ci-only: never decides a call: rules[3] (id "echo"), earlier, decides every tool of the catalog this rule matches (demo-echo), for every agent and all arguments`,
		`shadowed everyone: never decides a call: rules[3] (id "echo"), earlier, decides every tool of the catalog this rule matches (demo-echo), for every agent and all arguments`,
		`shadowed echo-again: never decides a call: rules[3] (id "echo"), earlier, decides every tool of the catalog this rule matches (demo-echo), for every agent and all arguments`,
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("problems:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// TestToolPatternsInEverySpelling: a tool pattern means the same tool in
// each spelling a tool name has, and with spaces around it, as exposure
// rules read it; a namespace condition reads a nested service's
// namespace as a tool name does.
func TestToolPatternsInEverySpelling(t *testing.T) {
	t.Parallel()
	var version string
	for _, spelling := range []string{"pets:createPet", "pets/createPet", "pets.createPet", "pets-createPet", " pets:createPet "} {
		p := mustParse(t, "default: allow\nrules:\n  - {tool: \""+spelling+"\", effect: deny}\n")
		if d := p.Evaluate(Request{Tool: def(t, "pets-createPet")}); d.Effect != Deny {
			t.Errorf("%q does not match pets-createPet", spelling)
		}
		if version == "" {
			version = p.Version()
		} else if p.Version() != version {
			t.Errorf("%q: another version than pets:createPet's", spelling)
		}
	}
	for _, spelling := range []string{"llm_tools", "llm/tools", "llm.tools"} {
		p := mustParse(t, "default: allow\nrules:\n  - {namespace: \""+spelling+"\", effect: deny}\n")
		if d := p.Evaluate(Request{Tool: def(t, "llm_tools-list")}); d.Effect != Deny {
			t.Errorf("namespace %q does not match llm_tools-list", spelling)
		}
	}
}
