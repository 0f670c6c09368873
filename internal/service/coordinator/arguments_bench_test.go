package coordinator

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/toolbus/toolbus/pkg/exposure"
	"github.com/toolbus/toolbus/pkg/messages"
	"github.com/toolbus/toolbus/pkg/policy"
)

// benchSchema is the input schema of a file-writing tool, with a secret.
const benchSchema = `{"type":"object","properties":{
	"path":{"type":"string","description":"Where to write, an absolute path."},
	"content":{"type":"string","description":"What to write."},
	"force":{"type":"boolean","description":"Overwrite an existing file."},
	"mode":{"type":"string","enum":["r","rw","x"]},
	"api_token":{"type":"string","writeOnly":true},
	"meta":{"type":"object","patternProperties":{"^x-":{"type":"string"}},"additionalProperties":{"type":"integer"}}},
	"required":["path","content"],"additionalProperties":false}`

// benchArguments are a model's arguments for it, spaced as models write them.
const benchArguments = `{"path": "/home/user/project/notes.txt", "content": "hello, world\nsecond line", "force": false, "mode": "r",
	"api_token": "sk-123", "meta": {"x-team": "a", "n": 3}}`

// benchPolicyYAML has 50 rules, most testing the arguments (as
// pkg/policy's benchmark); the benchmarked call is decided by the default.
func benchPolicyYAML(def string) string {
	var src strings.Builder
	src.WriteString("default: " + def + "\nrules:\n  - preset: deny_privileged\n  - preset: ask_destructive\n")
	for i := range 12 {
		fmt.Fprintf(&src, "  - {id: t%d, tool: [\"ns%d:get_*\", \"ns%d:list\"], agent: \"team%d-*\", effect: allow}\n", i, i, i, i)
		fmt.Fprintf(&src, "  - {id: g%d, tool: \"*:op%d\", tags: {all: [custom%d, network]}, effect: deny}\n", i, i, i)
		fmt.Fprintf(&src, "  - {id: a%d, tool: \"b:*\", arguments: [{pointer: /path, regex: \"^/secret%d/\"}, {pointer: /force, equals: true}], effect: deny}\n", i, i)
		fmt.Fprintf(&src, "  - {id: n%d, namespace: [b, y%d], arguments: [{pointer: /mode, one_of: [%d, \"rw\"]}], effect: deny}\n", i, i, i)
	}
	return src.String()
}

// BenchmarkSubmitArguments measures what a submit does with its
// arguments, in process, from validating the request through the
// policy's decision and the audit record's redacted copy (the audit
// write itself aside): under a policy that allows the call, whose queued
// event carries the copy, and under one that asks for an approval, whose
// copy is redacted too.
func BenchmarkSubmitArguments(b *testing.B) {
	for _, def := range []string{"allow", "ask"} {
		b.Run(def, func(b *testing.B) {
			pol, err := policy.Parse([]byte(benchPolicyYAML(def)), "bench.yaml")
			if err != nil {
				b.Fatal(err)
			}
			var holder atomic.Pointer[policy.Policy]
			holder.Store(pol)
			tl := tool("b-write", benchSchema)
			admission := exposure.NewResolver(nil).Admission("team3-agent-17", exposure.NewCatalog(1, []messages.ToolDefinition{tl.Definition}))
			p := &submitPipeline{schemas: newSchemaCache(), policy: &holder, grants: grantsFunc(func(string) bool { return false }), limits: submitLimits{approvalTTL: time.Hour}}
			p.audit = func(_ context.Context, _ string, call *messages.CallRequest, def *messages.ToolDefinition, _ policy.Decision, _ string) {
				_ = p.schemas.redactions.of(def).RedactJSON(call.Arguments) // as the auditor redacts
			}
			sr := &messages.SubmitRequest{Tool: "b-write", Agent: "team3-agent-17", Arguments: messages.JSON(benchArguments)}
			ctx := context.Background()
			b.ReportAllocs()
			cpu := processCPU()
			for b.Loop() {
				name, read, err := validateSubmit(sr, 1<<20)
				if err != nil {
					b.Fatal(err)
				}
				args, err := checkArguments(p.schemas, tl, read)
				if err != nil {
					b.Fatal(err)
				}
				call := newCall(sr, name, tl, args.compact, args.digest, time.Now(), time.Minute)
				v, err := decideAndAuthorize(p, ctx, call, tl, admission, &args.parsed)
				if err != nil || v.audit == "" || (def == "ask") != (v.approval != nil) {
					b.Fatalf("verdict %+v, %v", v, err)
				}
				if v.approval == nil {
					if _, qa, err := p.record(ctx, call, tl, &args.parsed, v); err != nil || qa == nil || qa.Arguments == nil {
						b.Fatalf("decision for the queued event %+v, %v", qa, err)
					}
					continue
				}
				p.audit(ctx, v.audit, call, &tl.Definition, v.decision, "")
			}
			b.ReportMetric(float64((processCPU()-cpu).Nanoseconds())/float64(b.N), "cpu-ns/op")
		})
	}
}
