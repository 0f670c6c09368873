package policy

import (
	"strings"
	"testing"

	"github.com/toolbus/toolbus/pkg/messages"
)

// TestExplainSaysWhichRuleDecidesAndWhy: Explain decides as Evaluate
// does, lists every rule tried up to the one that decided with the
// condition that failed, and names the entry, its id or preset and line.
func TestExplainSaysWhichRuleDecidesAndWhy(t *testing.T) {
	t.Parallel()
	p := mustParse(t, `default: allow
rules:
  - preset: deny_privileged
  - id: no-admin-login
    tool: "auth:login"
    arguments:
      - {pointer: /user, equals: admin}
    effect: deny
    reason: nobody logs in as admin
  - id: ci
    agent: "ci-*"
    effect: deny
  - preset: ask_destructive
`)
	login := def(t, "auth-login", messages.TagNetwork)
	wipe := def(t, "ops-wipe", messages.TagDestructive)
	for _, tc := range []struct {
		name  string
		req   Request
		steps []string
		want  Effect
		rule  string
	}{
		{"an argument decides", Request{Tool: login, Agent: "bot", Arguments: messages.JSON(`{"user":"admin"}`)}, []string{
			"rules[0] deny_privileged no: the tool has none of the tags privileged (tags.any); its tags: network",
			"rules[1] no-admin-login yes: every condition holds",
		}, Deny, "no-admin-login"},
		{"another argument", Request{Tool: login, Agent: "bot", Arguments: messages.JSON(`{"user":"alice"}`)}, []string{
			"rules[0] deny_privileged no: the tool has none of the tags privileged (tags.any); its tags: network",
			`rules[1] no-admin-login no: arguments[0]: the value at "/user" does not equal "admin"`,
			`rules[2] ci no: agent "bot" matches none of agent: ci-*`,
			"rules[3] ask_destructive no: the tool has none of the tags destructive (tags.any); its tags: network",
		}, Allow, ""},
		{"a preset decides", Request{Tool: wipe}, []string{
			"rules[0] deny_privileged no: the tool has none of the tags privileged (tags.any); its tags: destructive",
			"rules[1] no-admin-login no: the tool ops-wipe matches none of tool: auth:login",
			"rules[2] ci no: an anonymous caller (no agent) matches none of agent: ci-*",
			"rules[3] ask_destructive yes: every condition holds",
		}, Ask, "ask_destructive"},
		{"arguments that are not JSON", Request{Tool: login, Arguments: messages.JSON(`{`)}, []string{
			"rules[0] deny_privileged no: the tool has none of the tags privileged (tags.any); its tags: network",
			"rules[1] no-admin-login no: the rule tests the arguments, which are not valid JSON: the call is denied",
		}, Deny, ""},
	} {
		e := p.Explain(tc.req)
		if d := p.Evaluate(tc.req); d != e.Decision {
			t.Errorf("%s: Explain decided %+v, Evaluate %+v", tc.name, e.Decision, d)
		}
		var got []string
		for _, s := range e.Steps {
			yes := "no"
			if s.Matched {
				yes = "yes"
			}
			got = append(got, "rules["+string(rune('0'+s.Entry))+"] "+s.RuleID+" "+yes+": "+s.Why)
			if s.Line == 0 {
				t.Errorf("%s: step %d has no line", tc.name, s.Entry)
			}
		}
		if strings.Join(got, "\n") != strings.Join(tc.steps, "\n") || e.Decision.Effect != tc.want || e.Decision.RuleID != tc.rule {
			t.Errorf("%s: %s by %q, steps:\n%s\nwant %s by %q:\n%s", tc.name, e.Decision.Effect, e.Decision.RuleID, strings.Join(got, "\n"), tc.want, tc.rule, strings.Join(tc.steps, "\n"))
		}
	}
	if e := p.Explain(Request{Tool: def(t, "x-root", messages.TagPrivileged)}); e.Visible || e.Steps[0].Preset != PresetDenyPrivileged {
		t.Errorf("a privileged tool: %+v", e)
	}
	var none *Policy
	if e := none.Explain(Request{Tool: login}); e.Decision.Effect != Allow || len(e.Steps) != 0 || !e.Visible {
		t.Errorf("no policy: %+v", e)
	}
}
