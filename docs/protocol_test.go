package docs

import (
	"bytes"
	"encoding/json"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"regexp"
	"strconv"
	"testing"

	"github.com/toolbus/toolbus/pkg/messages"
)

// TestProtocolExamples decodes every example in protocol.md into the type
// it is marked with, refusing unknown fields, so the document cannot drift
// from pkg/messages.
func TestProtocolExamples(t *testing.T) {
	doc, err := os.ReadFile("protocol.md")
	if err != nil {
		t.Fatal(err)
	}
	types := map[string]func() any{
		"ListToolsRequest":     func() any { return &messages.ListToolsRequest{} },
		"ListToolsReply":       func() any { return &messages.ListToolsReply{} },
		"SubmitRequest":        func() any { return &messages.SubmitRequest{} },
		"SubmitReply":          func() any { return &messages.SubmitReply{} },
		"CallRequest":          func() any { return &messages.CallRequest{} },
		"CallEvent":            func() any { return &messages.CallEvent{} },
		"CallResult":           func() any { return &messages.CallResult{} },
		"GetCallRequest":       func() any { return &messages.GetCallRequest{} },
		"CallInfo":             func() any { return &messages.CallInfo{} },
		"CancelRequest":        func() any { return &messages.CancelRequest{} },
		"CancelReply":          func() any { return &messages.CancelReply{} },
		"GetTurnRequest":       func() any { return &messages.GetTurnRequest{} },
		"TurnInfo":             func() any { return &messages.TurnInfo{} },
		"Error":                func() any { return &messages.Error{} },
		"ToolDefinition":       func() any { return &messages.ToolDefinition{} },
		"WorkerHeartbeat":      func() any { return &messages.WorkerHeartbeat{} },
		"TurnState":            func() any { return &messages.TurnState{} },
		"ActivateRequest":      func() any { return &messages.ActivateRequest{} },
		"ActivateReply":        func() any { return &messages.ActivateReply{} },
		"ToolSwitchRequest":    func() any { return &messages.ToolSwitchRequest{} },
		"Approval":             func() any { return &messages.Approval{} },
		"ListApprovalsRequest": func() any { return &messages.ListApprovalsRequest{} },
		"ListApprovalsReply":   func() any { return &messages.ListApprovalsReply{} },
		"DecideRequest":        func() any { return &messages.DecideRequest{} },
		"DecideReply":          func() any { return &messages.DecideReply{} },
		"AuditRecord":          func() any { return &messages.AuditRecord{} },
		"DiscoverRequest":      func() any { return &messages.DiscoverRequest{} },
		"DiscoverReply":        func() any { return &messages.DiscoverReply{} },
		"SubmitBatchRequest":   func() any { return &messages.SubmitBatchRequest{} },
		"SubmitBatchReply":     func() any { return &messages.SubmitBatchReply{} },
		"ResultsRequest":       func() any { return &messages.ResultsRequest{} },
		"ResultsReply":         func() any { return &messages.ResultsReply{} },
	}
	examples := regexp.MustCompile("(?s)<!-- message: (\\w+) -->\\s*```json\\n(.*?)```").FindAllSubmatch(doc, -1)
	seen := map[string]bool{}
	for _, m := range examples {
		name, body := string(m[1]), m[2]
		newValue, ok := types[name]
		if !ok {
			t.Errorf("example marked with unknown message %s", name)
			continue
		}
		seen[name] = true
		v := newValue()
		dec := json.NewDecoder(bytes.NewReader(body))
		dec.DisallowUnknownFields()
		if err := dec.Decode(v); err != nil {
			t.Errorf("%s example does not decode: %v\n%s", name, err, body)
			continue
		}
		// And it survives MessagePack.
		packed, err := messages.Msgpack.Marshal(v)
		if err != nil {
			t.Errorf("%s example does not encode as MessagePack: %v", name, err)
			continue
		}
		again := newValue()
		if err := messages.Msgpack.Unmarshal(packed, again); err != nil {
			t.Errorf("%s example does not decode from MessagePack: %v", name, err)
		}
	}
	for name := range types {
		if !seen[name] {
			t.Errorf("protocol.md has no example of %s", name)
		}
	}
}

// TestProtocolErrorCodes checks the table of error codes against
// pkg/messages: every code defined there is listed, with the status that
// ErrorCode.Status gives it, and the table lists no other code.
func TestProtocolErrorCodes(t *testing.T) {
	doc, err := os.ReadFile("protocol.md")
	if err != nil {
		t.Fatal(err)
	}
	_, table, ok := bytes.Cut(doc, []byte("### Error codes\n"))
	if !ok {
		t.Fatal("protocol.md has no section Error codes")
	}
	table, _, _ = bytes.Cut(table, []byte("\n## "))
	listed := map[messages.ErrorCode]bool{}
	for _, m := range regexp.MustCompile("(?m)^\\| `(\\w+)` \\| (\\d+) \\|").FindAllSubmatch(table, -1) {
		code := messages.ErrorCode(m[1])
		listed[code] = true
		if status := code.StatusText(); status != string(m[2]) {
			t.Errorf("protocol.md gives %s the status %s; pkg/messages gives it %s", code, m[2], status)
		}
	}
	defined := definedErrorCodes(t)
	for _, code := range defined {
		if !listed[code] {
			t.Errorf("protocol.md does not list the error code %s", code)
		}
		delete(listed, code)
	}
	for code := range listed {
		t.Errorf("protocol.md lists the error code %s, which pkg/messages does not define", code)
	}
}

// definedErrorCodes returns the values of the ErrorCode constants of pkg/messages.
func definedErrorCodes(t *testing.T) []messages.ErrorCode {
	t.Helper()
	f, err := parser.ParseFile(token.NewFileSet(), "../pkg/messages/errors.go", nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	var codes []messages.ErrorCode
	for _, decl := range f.Decls {
		gen, ok := decl.(*ast.GenDecl)
		if !ok || gen.Tok != token.CONST {
			continue
		}
		for _, spec := range gen.Specs {
			vs := spec.(*ast.ValueSpec)
			if typ, ok := vs.Type.(*ast.Ident); !ok || typ.Name != "ErrorCode" {
				continue
			}
			for _, v := range vs.Values {
				lit, ok := v.(*ast.BasicLit)
				if !ok || lit.Kind != token.STRING {
					t.Fatalf("error code %v is not a string literal", v)
				}
				s, err := strconv.Unquote(lit.Value)
				if err != nil {
					t.Fatal(err)
				}
				codes = append(codes, messages.ErrorCode(s))
			}
		}
	}
	if len(codes) == 0 {
		t.Fatal("no ErrorCode constants found in pkg/messages/errors.go")
	}
	return codes
}

// TestProtocolJSONDepth checks the depth limit protocol.md states.
func TestProtocolJSONDepth(t *testing.T) {
	doc, err := os.ReadFile("protocol.md")
	if err != nil {
		t.Fatal(err)
	}
	if want := fmt.Sprintf("nest at most %d levels deep", messages.MaxJSONDepth); !bytes.Contains(bytes.Join(bytes.Fields(doc), []byte(" ")), []byte(want)) {
		t.Errorf("protocol.md does not say that JSON values %s", want)
	}
}
