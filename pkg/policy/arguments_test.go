package policy

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"github.com/toolbus/toolbus/pkg/messages"
)

// agreementPolicy tests the arguments in every way a rule can, so that a
// call read once is decided as the same call read from its text.
const agreementPolicy = `
default: allow
rules:
  - {id: path, arguments: [{pointer: /path, regex: "^/etc/"}], effect: deny}
  - {id: force, arguments: [{pointer: /force, equals: true}], effect: ask}
  - {id: mode, arguments: [{pointer: /mode, one_of: [420, "rw", {"a": [1]}]}], effect: deny}
  - {id: nested, arguments: [{pointer: /a/b/0, exists: true}], effect: ask}
  - {id: whole, arguments: [{pointer: "", equals: {"x": null}}], effect: deny}
  - {id: empty, arguments: [{pointer: "", equals: {}}], effect: ask}
`

const agreementSchema = `{"properties": {"pin": {"writeOnly": true}, "m": {"patternProperties": {"^s_": {"x-sensitive": true}}}}}`

// checkReadOnce holds what ParseArguments gives to what each reader of
// the arguments' text gives: the digest, the compact form, the schema's
// value, the policy's decision and the redaction.
func checkReadOnce(t *testing.T, pol *Policy, schema, raw []byte) {
	t.Helper()
	parsed, err := ParseArguments(raw)
	_, digestErr := ArgumentsDigest(raw)
	var compacted bytes.Buffer
	compactErr := json.Compact(&compacted, raw)
	if len(raw) == 0 {
		compacted.WriteString("{}")
		compactErr = nil
	}
	if err != nil {
		if digestErr == nil {
			t.Fatalf("%q: ParseArguments failed (%v) where ArgumentsDigest read them", raw, err)
		}
		return
	}
	if digestErr != nil {
		t.Fatalf("%q: ArgumentsDigest failed (%v) where ParseArguments read them", raw, digestErr)
	}
	if want, _ := ArgumentsDigest(raw); parsed.Digest() != want {
		t.Errorf("%q: digest %s, ArgumentsDigest %s", raw, parsed.Digest(), want)
	}
	compact, err := parsed.Compact()
	if (err == nil) != (compactErr == nil) || err == nil && !bytes.Equal(compact, compacted.Bytes()) {
		t.Fatalf("%q: compact %q (%v), encoding/json %q (%v)", raw, compact, err, compacted.Bytes(), compactErr)
	}
	if err != nil {
		return
	}
	tool := messages.ToolDefinition{Name: "fs-write", Namespace: "fs", Method: "write"}
	fromText := pol.Evaluate(Request{Tool: tool, Arguments: raw})
	if got := pol.Evaluate(Request{Tool: tool, Arguments: raw, Parsed: parsed}); got != fromText {
		t.Errorf("%q: decided %+v read once, %+v from the text", raw, got, fromText)
	}
	if got, want := CompileRedaction(schema).Redact(&parsed), Redact(schema, compact); !bytes.Equal(got, want) {
		t.Errorf("%q: redacted %s read once, %s from the text", raw, got, want)
	}
}

func TestArgumentsReadOnceAgree(t *testing.T) {
	t.Parallel()
	pol, err := Parse([]byte(agreementPolicy), "policy.yaml")
	if err != nil {
		t.Fatal(err)
	}
	for _, raw := range agreementCases {
		checkReadOnce(t, pol, []byte(agreementSchema), []byte(raw))
	}
}

var agreementCases = []string{
	``, ` `, `null`, ` null `, `{}`, `{"path": "/etc/passwd"}`, `{"path": "/home"}`, `{"force": true}`, `{"force": 1}`,
	`{"mode": 420.0}`, `{"mode": 4.2e2}`, `{"mode": "rw"}`, `{"mode": {"a": [1.0]}}`, `{"a": {"b": [null]}}`, `{"a": {"b": []}}`,
	`{"x": null}`, `{"x": null, "y": 1}`, `{"pin": "1234", "m": {"s_k": 1, "k": {"token": 2}}}`, `{"k": 1, "k": {"password": 2}}`,
	"{\"path\": \"/etc/\xff\"}", `{"path": "\/etc\/x"}`, `[1, {"secret": 2}]`, `"text"`, `{"a":`, `{"a":1} x`, `{"a": 01}`,
	"{ \"a\" :\t[ 1 ,\n 2 ] }", strings.Repeat("[", messages.MaxJSONDepth+1) + strings.Repeat("]", messages.MaxJSONDepth+1),
}

// FuzzArgumentsReadOnce holds arguments read once to every reader of
// their text.
func FuzzArgumentsReadOnce(f *testing.F) {
	pol, err := Parse([]byte(agreementPolicy), "policy.yaml")
	if err != nil {
		f.Fatal(err)
	}
	for _, raw := range agreementCases {
		f.Add([]byte(agreementSchema), []byte(raw))
	}
	f.Fuzz(func(t *testing.T, schema, raw []byte) {
		checkReadOnce(t, pol, schema, raw)
	})
}

// A schema compiled once redacts every call as Redact does, its
// patterns included, from many goroutines at once.
func TestRedactionIsShared(t *testing.T) {
	t.Parallel()
	c := CompileRedaction(messages.JSON(agreementSchema))
	args, err := ParseArguments(messages.JSON(`{"m": {"s_a": 1, "b": 2}, "pin": 3}`))
	if err != nil {
		t.Fatal(err)
	}
	const want = `{"m":{"b":2,"s_a":"[redacted]"},"pin":"[redacted]"}`
	done := make(chan string)
	for range 4 {
		go func() { done <- string(c.Redact(&args)) }()
	}
	for range 4 {
		if got := <-done; got != want {
			t.Errorf("redacted %s, want %s", got, want)
		}
	}
}

// TestInexactNumbers: a number the work item cannot carry as written (a
// 64-bit float rounds it) is found, with its pointer; integers of 64 bits
// and numbers a float reads back as written are not.
func TestInexactNumbers(t *testing.T) {
	for _, tc := range []struct {
		args, pointer, number string
	}{
		{`{"a":1,"b":-7,"c":0.1,"d":1.0,"e":1e0,"f":0.30000000000000004,"g":9007199254740993,"h":18446744073709551615,"i":-9223372036854775808,"j":2.5e-8,"k":-0}`, "", ""},
		{`{"amount":1.0000000000000000001}`, "/amount", "1.0000000000000000001"},
		{`{"n":18446744073709551616}`, "/n", "18446744073709551616"},
		{`{"n":1e400}`, "/n", "1e400"},
		{`{"list":[1,2,{"a/b~c":0.1000000000000000000001}]}`, "/list/2/a~1b~0c", "0.1000000000000000000001"},
		{`{"s":"1.0000000000000000001"}`, "", ""},
	} {
		a, err := ParseArguments(messages.JSON(tc.args))
		if err != nil {
			t.Fatalf("%s: %v", tc.args, err)
		}
		if p, n := a.InexactNumber(); p != tc.pointer || n != tc.number {
			t.Errorf("%s: InexactNumber = %q, %q; want %q, %q", tc.args, p, n, tc.pointer, tc.number)
		}
	}
}
