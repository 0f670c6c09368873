package coordinator

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/toolbus/toolbus/pkg/catalog"
	"github.com/toolbus/toolbus/pkg/messages"
	"github.com/toolbus/toolbus/pkg/policy"
)

// thinkingTool is a tool whose schema is shown with a thought parameter.
func thinkingTool(name, schema string) *catalog.Tool {
	tl := tool(name, schema)
	on := true
	tl.Definition.Metadata.ThinkAugment = &on
	return tl
}

// A submit's arguments, read once, give the call what reading their text
// gives: its compact form, its digest, the redacted copy of its approval,
// and that of its queued event, when the policy allows it.
func TestSubmitArgumentsAsTheirText(t *testing.T) {
	const schema = `{"type":"object","properties":{"n":{"type":"integer"},"pin":{"type":"string","writeOnly":true},"m":{"type":"object"}}}`
	count, think := tool("t-count", schema), thinkingTool("t-think", schema)
	admission := resolverOf(t, count, think)("a")
	p := &submitPipeline{
		schemas: newSchemaCache(),
		policy:  mustPolicy(t, "default: ask\nrules: []\n"),
		grants:  grantsFunc(func(string) bool { return false }),
		audit:   (&audits{}).record,
		limits:  submitLimits{approvalTTL: time.Hour},
	}
	allowing := *p
	allowing.policy = mustPolicy(t, "default: allow\nrules: []\n")
	for _, tc := range []struct {
		tool *catalog.Tool
		args string
		// text is what the call's arguments are read from: args, less the
		// thought of a thinking tool.
		text string
	}{
		{count, `{ "n" : 1, "pin": "1234", "m": {"token": "x", "b": [1.0, 1e2]} }`, ""},
		{count, ``, ""},
		{count, `{"n": 1, "n": 2}`, ""},
		{count, "{\"m\": {\"k\": \"\xff\\u00e9\"}}", ""},
		{think, `{"thought": "the user wants 1", "n": 1, "pin": "p"}`, `{"n":1,"pin":"p"}`},
		{think, `{"n": 1, "m": {"thought": 2}}`, ""},
	} {
		text := tc.text
		if text == "" {
			text = tc.args
		}
		sr := &messages.SubmitRequest{Tool: tc.tool.Definition.Name, Agent: "a", Arguments: messages.JSON(tc.args)}
		name, read, err := validateSubmit(sr, 1<<20)
		if err != nil {
			t.Fatalf("%s: %v", tc.args, err)
		}
		args, err := checkArguments(p.schemas, tc.tool, read)
		if err != nil {
			t.Fatalf("%s: %v", tc.args, err)
		}
		var compact bytes.Buffer
		if text == "" {
			compact.WriteString("{}")
		} else if err := json.Compact(&compact, []byte(text)); err != nil {
			t.Fatal(err)
		}
		digest, err := policy.ArgumentsDigest(messages.JSON(text))
		if err != nil {
			t.Fatal(err)
		}
		call := newCall(sr, name, tc.tool, args.compact, args.digest, time.Now(), time.Minute)
		if !bytes.Equal(call.Arguments, compact.Bytes()) || call.ArgumentsDigest != digest {
			t.Errorf("%s: call's arguments %s, digest %s; want %s, %s", tc.args, call.Arguments, call.ArgumentsDigest, compact.Bytes(), digest)
		}
		v, err := decideAndAuthorize(p, context.Background(), call, tc.tool, admission, &args.parsed)
		if err != nil || v.approval == nil {
			t.Fatalf("%s: authorize %+v, %v; want an approval", tc.args, v, err)
		}
		if want := policy.Redact(tc.tool.Definition.InputSchema, compact.Bytes()); !bytes.Equal(v.approval.Arguments, want) {
			t.Errorf("%s: the approval's arguments %s, want %s", tc.args, v.approval.Arguments, want)
		}
		v, err = decideAndAuthorize(&allowing, context.Background(), call, tc.tool, admission, &args.parsed)
		if err != nil || v.approval != nil || v.audit != messages.AuditAllowed {
			t.Fatalf("%s: authorize %+v, %v; want the call allowed", tc.args, v, err)
		}
		_, qa, err := allowing.record(context.Background(), call, tc.tool, &args.parsed, v)
		if err != nil || qa == nil {
			t.Fatalf("%s: record %+v, %v; want the decision for the queued event", tc.args, qa, err)
		}
		// The queued event carries the redacted copy only when it differs.
		want := policy.Redact(tc.tool.Definition.InputSchema, compact.Bytes())
		if bytes.Equal(want, call.Arguments) {
			want = nil
		}
		if !bytes.Equal(qa.Arguments, want) {
			t.Errorf("%s: the queued event's audited arguments %s, want %s", tc.args, qa.Arguments, want)
		}
	}
}

// Bad arguments are refused as they always were: with the same code and
// message, at the same stage (nested too deeply: before the tool is
// looked up, whatever else is wrong with them).
func TestBadArgumentsRefused(t *testing.T) {
	const schema = `{"type":"object","properties":{"n":{"type":"integer"}},"required":["n"]}`
	deep := strings.Repeat("[", messages.MaxJSONDepth+1)
	for _, tc := range []struct {
		tool       *catalog.Tool
		args       string
		validation bool // refused by validateSubmit
		want       string
	}{
		{tool("t-count", schema), `{"n":`, false, "invalid_arguments: arguments of t-count are not JSON: invalid JSON: unexpected end of JSON input, expecting a value"},
		{tool("t-count", schema), `{"n": 1} {}`, false, "invalid_arguments: arguments of t-count are not JSON: invalid JSON: trailing data after the JSON value, at offset 9"},
		{tool("t-count", schema), `{"n": 01}`, false, `invalid_arguments: arguments of t-count are not JSON: invalid JSON: invalid character '1' at offset 7, expecting ',' or '}'`},
		{tool("t-count", schema), `{"n": "1"}`, false, "invalid_arguments: arguments of t-count do not match its input schema: /n: got string, want integer"},
		{tool("t-count", schema), `null`, false, "invalid_arguments: arguments of t-count do not match its input schema: /: got null, want object"},
		{tool("t-count", `{}`), `  `, false, "invalid_arguments: arguments are not JSON: unexpected end of JSON input"},
		{thinkingTool("t-think", schema), `{"thought": "x", "n": }`, false, `invalid_arguments: arguments of t-think: arguments of tool "t-think" are not valid JSON: invalid character '}' at offset 22, expecting a value`},
		{tool("t-count", schema), deep + strings.Repeat("]", messages.MaxJSONDepth+1), true, "bad_request: a JSON value nests arrays and objects deeper than 256 levels"},
		{tool("t-count", schema), `{"n": x, "m": ` + deep, true, "bad_request: a JSON value nests arrays and objects deeper than 256 levels"},
	} {
		_, read, err := validateSubmit(&messages.SubmitRequest{Tool: tc.tool.Definition.Name, Arguments: messages.JSON(tc.args)}, 1<<20)
		if tc.validation {
			if err == nil || err.Error() != tc.want {
				t.Errorf("%.30s: validateSubmit: %v, want %s", tc.args, err, tc.want)
			}
			continue
		}
		if err != nil {
			t.Fatalf("%.30s: validateSubmit: %v", tc.args, err)
		}
		if _, err := checkArguments(newSchemaCache(), tc.tool, read); err == nil || err.Error() != tc.want {
			t.Errorf("%.30s: %v, want %s", tc.args, err, tc.want)
		}
	}
}

// The schema compiled for redaction is the tool's current one: a new
// schema of the same tool is compiled again.
func TestRedactionFollowsTheSchema(t *testing.T) {
	cache := newSchemaCache()
	args := messages.JSON(`{"code":"1234"}`)
	plain := tool("t-login", `{"properties":{"code":{"type":"string"}}}`)
	if got := cache.redaction(&plain.Definition).RedactJSON(args); string(got) != `{"code":"1234"}` {
		t.Fatalf("redacted %s under a schema without secrets", got)
	}
	secret := tool("t-login", `{"properties":{"code":{"type":"string","writeOnly":true}}}`)
	if got := cache.redaction(&secret.Definition).RedactJSON(args); string(got) != `{"code":"[redacted]"}` {
		t.Errorf("redacted %s under the tool's new schema, which makes code write-only", got)
	}
}
