package policy_test

import (
	"fmt"

	"github.com/toolbus/toolbus/pkg/messages"
	"github.com/toolbus/toolbus/pkg/policy"
)

func Example() {
	p, err := policy.Parse([]byte(`
default: ask
rules:
  - preset: deny_privileged
  - id: no-force-push
    tool: "git:push"
    arguments:
      - {pointer: /force, equals: true}
    effect: deny
    reason: force-pushing rewrites shared history
  - preset: allow_read_only
  - {tool: "git:*", agent: "ci-*", effect: allow}
`), "policy.yaml")
	if err != nil {
		fmt.Println(err)
		return
	}
	push := messages.ToolDefinition{Name: "git-push", Namespace: "git", Method: "push"}
	status := messages.ToolDefinition{Name: "git-status", Namespace: "git", Method: "status",
		Metadata: messages.ToolMetadata{Tags: []string{messages.TagReadOnly}}}

	for _, req := range []policy.Request{
		{Tool: push, Agent: "ci-1", Arguments: messages.JSON(`{"remote": "origin", "force": true}`)},
		{Tool: push, Agent: "ci-1", Arguments: messages.JSON(`{"remote": "origin"}`)},
		{Tool: push, Agent: "dev", Arguments: messages.JSON(`{"remote": "origin"}`)},
		{Tool: status, Agent: "dev"},
	} {
		d := p.Evaluate(req)
		fmt.Printf("%s %s: %s (%s)\n", req.Agent, req.Tool.Name, d.Effect, d.Reason)
	}
	fmt.Println("git-push visible:", p.Visible("dev", push))

	fmt.Println(string(policy.Redact(nil, messages.JSON(`{"user": "ann", "api_key": "sk-123"}`))))
	a, _ := policy.ArgumentsDigest(messages.JSON(`{"b": 1, "a": 2}`))
	b, _ := policy.ArgumentsDigest(messages.JSON(`{"a": 2.0, "b": 1}`))
	fmt.Println("same digest:", a == b)
	// Output:
	// ci-1 git-push: deny (force-pushing rewrites shared history)
	// ci-1 git-push: allow (matched rules[3])
	// dev git-push: ask (no rule matched; the default is ask)
	// dev git-status: allow (the tool only reads)
	// git-push visible: true
	// {"api_key":"[redacted]","user":"ann"}
	// same digest: true
}
