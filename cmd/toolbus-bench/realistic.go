package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// The realistic path: every call is made by an agent in a turn, under
// exposure rules and a policy, as agents make them. The agent's
// workspace has two bundles with a critical tool, base tools and an
// onDemand tool (the one measured), which the turn selected before the
// measurement; the policy has twenty rules, none of which stops the call.
const (
	realisticAgent = "bench-agent"
	realisticTurn  = "bench-turn"
)

// writeRealisticWorkspace writes the workspace and the policy file under
// dir, for the tools of namespace ns and the agent, and returns their paths.
func writeRealisticWorkspace(dir, ns, agent string) (workspace, policyFile string, err error) {
	workspace = filepath.Join(dir, "workspace")
	files := map[string]string{
		"bundles/core.yaml": fmt.Sprintf(`id: core
title: Core
match:
  - name: "%[1]s:lookup"
    tier: critical
  - name: "%[1]s:details"
  - name: "%[1]s:noop"
    tier: onDemand
`, ns),
		"bundles/extra.yaml": fmt.Sprintf(`id: extra
match:
  - name: "%[1]s:help"
    tier: onDemand
    alwaysInclude: true
  - name: "%[1]s:archive"
    tier: onDemand
`, ns),
		"agents/" + agent + ".yaml": fmt.Sprintf(`id: %s
tool:
  bundles: [core, extra]
`, agent),
	}
	for name, body := range files {
		path := filepath.Join(workspace, name)
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			return "", "", err
		}
		if err := os.WriteFile(path, []byte(body), 0o644); err != nil {
			return "", "", err
		}
	}
	var rules strings.Builder
	rules.WriteString("default: allow\nrules:\n  - preset: deny_privileged\n  - preset: ask_destructive\n")
	for i := range 9 {
		fmt.Fprintf(&rules, "  - {id: deny-other-%d, tool: \"other%d:*\", effect: deny, reason: not this namespace}\n", i, i)
		fmt.Fprintf(&rules, "  - id: guard-%d\n    tool: \"%s:noop\"\n    arguments:\n      - {pointer: /text, equals: \"forbidden-%d\"}\n    effect: deny\n    reason: a value the bench never sends\n", i, ns, i)
	}
	policyFile = filepath.Join(dir, "policy.yaml")
	if err := os.WriteFile(policyFile, []byte(rules.String()), 0o644); err != nil {
		return "", "", err
	}
	return workspace, policyFile, nil
}
