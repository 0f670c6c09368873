package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/toolbus/toolbus/internal/service/coordinator"
	"github.com/toolbus/toolbus/pkg/policy"
)

// TestPolicyCheck: toolbus policy check loads a file as the coordinator
// does and holds its rules against the running Toolbus's catalog, or
// against a file's offline: a rule naming a tool that does not exist, a
// rule earlier rules shadow and a file that does not load each exit 1,
// naming the line and the tool likely meant; a sound file exits 0.
func TestPolicyCheck(t *testing.T) {
	t.Parallel()
	url, bin := policedStack(t)
	dir := t.TempDir()
	write := func(name, content string) string {
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
		return path
	}
	typo := write("typo.yaml", `default: allow
rules:
  - preset: deny_privileged
  - id: hold-echo
    tool: "demo:ecko"
    effect: ask
  - {id: all-demo, namespace: demo, effect: allow}
  - {id: late, tool: "demo-sha256", effect: deny}
`)
	stdout, stderr, status := cli(t, bin, url, "policy", "check", typo)
	want := []string{
		`typo.yaml:5: rules[1] (id "hold-echo"): tool[0]: "demo:ecko" matches no tool of the catalog; did you mean demo-echo?`,
		`typo.yaml:8: rules[3] (id "late"): never decides a call: rules[2] (id "all-demo"), earlier, decides every tool of the catalog this rule matches (demo-sha256), for every agent and all arguments`,
		"2 problems, checked against",
	}
	if status != exitPolicyProblems || !containsEvery(stdout, want) {
		t.Fatalf("a typo: exit status %d\n%s%s", status, stdout, stderr)
	}

	// Offline, against a file that toolbus --json tools wrote.
	tools, stderr, status := cli(t, bin, url, "--json", "tools")
	if status != exitOK {
		t.Fatalf("tools: %d %s", status, stderr)
	}
	catalog := write("catalog.json", tools)
	stdout, stderr, status = cli(t, bin, "nats://127.0.0.1:1", "policy", "check", "--catalog", catalog, typo)
	if status != exitPolicyProblems || !containsEvery(stdout, want) {
		t.Fatalf("offline: exit status %d\n%s%s", status, stdout, stderr)
	}
	// Without a catalog and without a Toolbus, it says how to check offline.
	if _, stderr, status := cli(t, bin, "nats://127.0.0.1:1", "policy", "check", typo); status != exitRequestFailed || !strings.Contains(stderr, "--catalog FILE") {
		t.Fatalf("no Toolbus: exit status %d\n%s", status, stderr)
	}

	var out policyCheck
	stdout, _, status = cli(t, bin, url, "--json", "policy", "check", typo)
	if err := json.Unmarshal([]byte(stdout), &out); err != nil || status != exitPolicyProblems || len(out.Problems) != 2 ||
		out.Problems[0].Kind != "unmatched" || out.Problems[0].Field != "tool[0]" || out.Problems[0].Line != 5 || *out.Problems[0].Rule != 1 ||
		out.Problems[1].Kind != "shadowed" || out.Tools == 0 || out.Rules != 4 {
		t.Fatalf("--json: exit status %d, %+v (%v)\n%s", status, out, err, stdout)
	}

	invalid := write("invalid.yaml", "default: allow\nrules:\n  - {tool: \"demo:echo\", effect: maybe}\n  - {preset: ask_everything}\n")
	stdout, stderr, status = cli(t, bin, url, "policy", "check", invalid)
	if status != exitPolicyProblems || !containsEvery(stdout, []string{
		`invalid.yaml:3: rules[0]: effect: unknown effect "maybe"; want allow, deny or ask`,
		`invalid.yaml:4: rules[1]: preset: unknown preset "ask_everything"`,
		"2 problems; the policy does not load",
	}) {
		t.Fatalf("an invalid file: exit status %d\n%s%s", status, stdout, stderr)
	}

	sound := write("sound.yaml", "default: allow\nrules:\n  - preset: ask_destructive\n  - {tool: \"demo-echo\", agent: \"ci-*\", effect: deny}\n")
	if stdout, stderr, status := cli(t, bin, url, "policy", "check", sound); status != exitOK || !strings.Contains(stdout, "sound.yaml: no problem found: 2 rules checked against") {
		t.Fatalf("a sound file: exit status %d\n%s%s", status, stdout, stderr)
	}
	if _, _, status := cli(t, bin, url, "policy", "check"); status != exitUsage {
		t.Fatalf("no file: exit status %d", status)
	}
}

// TestPolicyExplain: toolbus policy explain says which rule of the policy
// in force decides a call, and why each earlier rule did not.
func TestPolicyExplain(t *testing.T) {
	t.Parallel()
	url, bin := policedStack(t)
	stdout, stderr, status := cli(t, bin, url, "policy", "explain", "demo:word_count", `{"text":"a b"}`, "--agent", "bot")
	if status != exitOK || !containsEvery(stdout, []string{
		"demo-word_count for agent bot: deny",
		`decided by policy.yaml:4 rules[0] (id "no-words"): no counting today`,
		`yes  deny   policy.yaml:4 rules[0] (id "no-words"): every condition holds`,
		"policy version ",
	}) {
		t.Fatalf("exit status %d\n%s%s", status, stdout, stderr)
	}
	stdout, stderr, status = cli(t, bin, url, "--json", "policy", "explain", "demo-echo")
	var reply struct {
		Effect string `json:"effect"`
		Rules  []struct {
			Why string `json:"why"`
		} `json:"rules"`
	}
	if err := json.Unmarshal([]byte(stdout), &reply); err != nil || status != exitOK || reply.Effect != "allow" || len(reply.Rules) != 1 ||
		reply.Rules[0].Why != "the tool demo-echo matches none of tool: demo:word_count" {
		t.Fatalf("--json: exit status %d %+v\n%s%s", status, reply, stdout, stderr)
	}
	if _, stderr, status := cli(t, bin, url, "policy", "explain", "demo-nosuch"); status != exitRequestFailed || !strings.Contains(stderr, "tool_not_found") {
		t.Fatalf("a tool that does not exist: exit status %d\n%s", status, stderr)
	}
}

func containsEvery(s string, parts []string) bool {
	for _, p := range parts {
		if !strings.Contains(s, p) {
			return false
		}
	}
	return true
}

// In a deployment with identities, an operator checks a policy against
// the whole catalog and has calls explained; an agent's user, whose
// tools.list is its agent's view, is told to connect as an operator (the
// tools the policy hides from its agent would seem missing), and is
// refused an explanation.
func TestPolicyCommandsInADeployment(t *testing.T) {
	t.Parallel()
	url, bin := deployedStack(t, func(cfg *coordinator.Config) {
		p, err := policy.Parse([]byte("default: allow\nrules:\n  - {id: no-hash, tool: \"demo:sha256\", effect: deny}\n"), "policy.yaml")
		if err != nil {
			t.Fatal(err)
		}
		cfg.Policy = p
	})
	file := filepath.Join(t.TempDir(), "policy.yaml")
	if err := os.WriteFile(file, []byte("default: allow\nrules:\n  - {id: no-hash, tool: \"demo:sha256\", effect: deny}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	operator := []string{"--user", "operator", "--password", "operator-secret"}
	agentA := []string{"--user", "agent_a", "--password", "agent-a-secret"}
	if stdout, stderr, status := cli(t, bin, url, append(operator, "policy", "check", file)...); status != exitOK || !strings.Contains(stdout, "no problem found") {
		t.Fatalf("check as the operator: exit status %d\n%s%s", status, stdout, stderr)
	}
	if stdout, stderr, status := cli(t, bin, url, append(agentA, "policy", "check", file)...); status != exitRequestFailed || !strings.Contains(stderr, "connect as an operator's user") {
		t.Fatalf("check as an agent's user: exit status %d\n%s%s", status, stdout, stderr)
	}
	if stdout, stderr, status := cli(t, bin, url, append(operator, "policy", "explain", "demo-sha256", `{"text":"x"}`, "--agent", "support-bot")...); status != exitOK ||
		!strings.Contains(stdout, "demo-sha256 for agent support-bot: deny") || !strings.Contains(stdout, "the agent's models do not see the tool") {
		t.Fatalf("explain as the operator: exit status %d\n%s%s", status, stdout, stderr)
	}
	if _, stderr, status := cli(t, bin, url, append(agentA, "policy", "explain", "demo-sha256")...); status != exitRequestFailed || !strings.Contains(stderr, "forbidden") || !strings.Contains(stderr, "connect as an operator's user") {
		t.Fatalf("explain as an agent's user: exit status %d\n%s", status, stderr)
	}
}
