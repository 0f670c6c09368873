package policy

import (
	"fmt"
	"strings"
	"testing"

	"github.com/toolbus/toolbus/pkg/messages"
)

// benchPolicy has 50 rules of every kind; the benchmarked call is tested by
// most of them and decided by the default.
func benchPolicy(b *testing.B) *Policy {
	b.Helper()
	var src strings.Builder
	src.WriteString("default: ask\nrules:\n  - preset: deny_privileged\n  - preset: ask_destructive\n")
	for i := range 12 {
		fmt.Fprintf(&src, "  - {id: t%d, tool: [\"ns%d:get_*\", \"ns%d:list\"], agent: \"team%d-*\", effect: allow}\n", i, i, i, i)
		fmt.Fprintf(&src, "  - {id: g%d, tool: \"*:op%d\", tags: {all: [custom%d, network]}, effect: deny}\n", i, i, i)
		fmt.Fprintf(&src, "  - {id: a%d, tool: \"bench:*\", arguments: [{pointer: /path, regex: \"^/secret%d/\"}, {pointer: /force, equals: true}], effect: deny}\n", i, i)
		fmt.Fprintf(&src, "  - {id: n%d, namespace: [x%d, y%d], source: [mcp, openapi], arguments: [{pointer: /mode, one_of: [%d, \"rw\"]}], effect: deny}\n", i, i, i, i)
	}
	p, err := Parse([]byte(src.String()), "bench.yaml")
	if err != nil {
		b.Fatal(err)
	}
	if n := len(p.Rules()); n != 50 {
		b.Fatalf("%d rules, want 50", n)
	}
	return p
}

func BenchmarkEvaluate(b *testing.B) {
	p := benchPolicy(b)
	req := Request{
		Tool: messages.ToolDefinition{
			Name: "bench-write", Namespace: "bench", Method: "write",
			Metadata: messages.ToolMetadata{Tags: []string{messages.TagFileSystem, "custom3"}},
			Source:   messages.ToolSource{Kind: messages.SourceMCP},
		},
		Agent:     "team3-agent-17",
		Arguments: messages.JSON(`{"path": "/home/user/project/notes.txt", "content": "hello, world", "force": false, "mode": "r"}`),
	}
	if d := p.Evaluate(req); d.RuleIndex != -1 {
		b.Fatalf("benchmarked call matched %+v, want the default", d)
	}
	b.ReportAllocs()
	for b.Loop() {
		p.Evaluate(req)
	}
}

// BenchmarkEvaluateParsed is BenchmarkEvaluate with the arguments read
// before, as a submit hands them to the policy.
func BenchmarkEvaluateParsed(b *testing.B) {
	p := benchPolicy(b)
	req := Request{
		Tool: messages.ToolDefinition{
			Name: "bench-write", Namespace: "bench", Method: "write",
			Metadata: messages.ToolMetadata{Tags: []string{messages.TagFileSystem, "custom3"}},
			Source:   messages.ToolSource{Kind: messages.SourceMCP},
		},
		Agent:     "team3-agent-17",
		Arguments: messages.JSON(`{"path": "/home/user/project/notes.txt", "content": "hello, world", "force": false, "mode": "r"}`),
	}
	parsed, err := ParseArguments(req.Arguments)
	if err != nil {
		b.Fatal(err)
	}
	req.Parsed = parsed
	if d := p.Evaluate(req); d.RuleIndex != -1 {
		b.Fatalf("benchmarked call matched %+v, want the default", d)
	}
	b.ReportAllocs()
	for b.Loop() {
		p.Evaluate(req)
	}
}

func BenchmarkVisible(b *testing.B) {
	p := benchPolicy(b)
	def := messages.ToolDefinition{Name: "ns11-put", Namespace: "ns11", Method: "put", Source: messages.ToolSource{Kind: messages.SourceGo}}
	b.ReportAllocs()
	for b.Loop() {
		p.Visible("team3-agent", def)
	}
}

func BenchmarkArgumentsDigest(b *testing.B) {
	args := messages.JSON(`{"path": "/home/user/project/notes.txt", "content": "hello, world", "force": false, "mode": "r", "n": 1.5}`)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := ArgumentsDigest(args); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkCheck holds the 50 rules of benchPolicy against a catalog of
// 5,000 tools in 100 namespaces, as a coordinator does when the catalog
// changes.
func BenchmarkCheck(b *testing.B) {
	p := benchPolicy(b)
	tools := make([]messages.ToolDefinition, 0, 5000)
	for i := range 5000 {
		ns, method := fmt.Sprintf("ns%d", i%100), fmt.Sprintf("get_%d", i)
		tools = append(tools, messages.ToolDefinition{Name: ns + "-" + method, Namespace: ns, Method: method,
			Metadata: messages.ToolMetadata{Tags: []string{messages.TagNetwork}}, Source: messages.ToolSource{Kind: messages.SourceMCP}})
	}
	b.ReportAllocs()
	for b.Loop() {
		p.Check(tools)
	}
}
