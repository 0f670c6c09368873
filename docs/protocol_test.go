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
	"slices"
	"strconv"
	"strings"
	"testing"
	"unicode"

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
		"CallEventsRequest":    func() any { return &messages.CallEventsRequest{} },
		"CallEventsReply":      func() any { return &messages.CallEventsReply{} },
		"FullResultRequest":    func() any { return &messages.FullResultRequest{} },
		"FullResultReply":      func() any { return &messages.FullResultReply{} },
		"CallsListRequest":     func() any { return &messages.CallsListRequest{} },
		"CallsListReply":       func() any { return &messages.CallsListReply{} },
		"CallInfo":             func() any { return &messages.CallInfo{} },
		"CancelRequest":        func() any { return &messages.CancelRequest{} },
		"CancelReply":          func() any { return &messages.CancelReply{} },
		"GetTurnRequest":       func() any { return &messages.GetTurnRequest{} },
		"TurnInfo":             func() any { return &messages.TurnInfo{} },
		"Error":                func() any { return &messages.Error{} },
		"ToolDefinition":       func() any { return &messages.ToolDefinition{} },
		"WorkerHeartbeat":      func() any { return &messages.WorkerHeartbeat{} },
		"CatalogChange":        func() any { return &messages.CatalogChange{} },
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
		"AuditBatch":           func() any { return &messages.AuditBatch{} },
		"DiscoverRequest":      func() any { return &messages.DiscoverRequest{} },
		"DiscoverReply":        func() any { return &messages.DiscoverReply{} },
		"SubmitBatchRequest":   func() any { return &messages.SubmitBatchRequest{} },
		"SubmitBatchReply":     func() any { return &messages.SubmitBatchReply{} },
		"ResultsRequest":       func() any { return &messages.ResultsRequest{} },
		"ResultsReply":         func() any { return &messages.ResultsReply{} },
		"AuditListRequest":     func() any { return &messages.AuditListRequest{} },
		"AuditListReply":       func() any { return &messages.AuditListReply{} },
		"WorkersListRequest":   func() any { return &messages.WorkersListRequest{} },
		"WorkersListReply":     func() any { return &messages.WorkersListReply{} },
		"CallStatsRequest":     func() any { return &messages.CallStatsRequest{} },
		"CallStatsReply":       func() any { return &messages.CallStatsReply{} },
		"ConsumerRequest":      func() any { return &messages.ConsumerRequest{} },
		"ConsumerReply":        func() any { return &messages.ConsumerReply{} },
		"InfoReply":            func() any { return &messages.InfoReply{} },
		"PolicyExplainRequest": func() any { return &messages.PolicyExplainRequest{} },
		"PolicyExplainReply":   func() any { return &messages.PolicyExplainReply{} },

		"LearningStatusRequest": func() any { return &messages.LearningStatusRequest{} },
		"LearningStatus":        func() any { return &messages.LearningStatus{} },
		"LearningSwitchRequest": func() any { return &messages.LearningSwitchRequest{} },
		"LearningResetRequest":  func() any { return &messages.LearningResetRequest{} },
		"LearningResetReply":    func() any { return &messages.LearningResetReply{} },
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

// markdownHeadings renders the block structure of a Markdown document as
// CommonMark does for what protocol.md uses: fenced code blocks (``` or
// ~~~, indented by at most three spaces, closed by a fence of the same
// character at least as long with nothing after it but spaces, or left
// open to the end of the document) and ATX headings outside them. It
// returns the headings' texts, the line of a fence left open (0 if none),
// and the lines that look like headings inside a JSON or plain code block,
// where no example has one: headings that a fence left open swallowed.
func markdownHeadings(doc string) (headings []string, openFence int, swallowed []int) {
	var fence, info string // the opening fence's run of backticks or tildes, "" outside a block, and its info string
	for i, line := range strings.Split(doc, "\n") {
		trimmed := strings.TrimLeft(line, " ")
		if fence != "" {
			rest, isClose := strings.CutPrefix(trimmed, fence)
			if isClose && len(line)-len(trimmed) <= 3 && strings.Trim(rest, string(fence[0])+" \t") == "" {
				fence = ""
				openFence = 0
			} else if (info == "" || info == "json") && atxHeading.MatchString(trimmed) {
				swallowed = append(swallowed, i+1)
			}
			continue
		}
		if len(line)-len(trimmed) > 3 {
			continue
		}
		if run := leadingRun(trimmed); len(run) >= 3 && (run[0] == '`' || run[0] == '~') {
			// An info string after backticks may hold no backtick.
			if run[0] == '`' && strings.Contains(trimmed[len(run):], "`") {
				continue
			}
			fence, openFence = run, i+1
			info = strings.TrimSpace(trimmed[len(run):])
			continue
		}
		if m := atxHeading.FindStringSubmatch(trimmed); m != nil {
			headings = append(headings, strings.TrimSpace(m[1]))
		}
	}
	return headings, openFence, swallowed
}

var atxHeading = regexp.MustCompile(`^#{1,6}(?:[ \t]+(.*?))?[ \t]*$`)

// leadingRun is the run of the first character at the start of s.
func leadingRun(s string) string {
	if s == "" {
		return ""
	}
	n := 1
	for n < len(s) && s[n] == s[0] {
		n++
	}
	return s[:n]
}

// anchor is the fragment of a heading's link, as GitHub makes it.
func anchor(heading string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(heading) {
		switch {
		case r == ' ' || r == '-':
			b.WriteByte('-')
		case r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r):
			b.WriteRune(r)
		}
	}
	return b.String()
}

// TestProtocolRendersItsHeadings renders protocol.md's blocks: no code
// fence is left open to swallow what follows it, every message with an
// example has its own heading, and every link within the document leads
// to a heading.
func TestProtocolRendersItsHeadings(t *testing.T) {
	doc, err := os.ReadFile("protocol.md")
	if err != nil {
		t.Fatal(err)
	}
	headings, open, swallowed := markdownHeadings(string(doc))
	if open != 0 {
		t.Errorf("the code fence opened on line %d is never closed: everything after it renders as code", open)
	}
	for _, line := range swallowed {
		t.Errorf("the heading on line %d renders as code: a code fence before it was not closed", line)
	}
	anchors := map[string]bool{}
	for _, h := range headings {
		anchors[anchor(h)] = true
	}
	for _, m := range regexp.MustCompile(`<!-- message: (\w+) -->`).FindAllStringSubmatch(string(doc), -1) {
		if !anchors[strings.ToLower(m[1])] && !anchors[anchor(m[1]+" (catalog value)")] {
			t.Errorf("the message %s has an example but no heading: a code fence before it swallowed it", m[1])
		}
	}
	for _, m := range regexp.MustCompile(`\]\(#([\w-]+)\)`).FindAllStringSubmatch(string(doc), -1) {
		if !anchors[m[1]] {
			t.Errorf("the link to #%s leads to no heading", m[1])
		}
	}
}

func TestMarkdownHeadings(t *testing.T) {
	for _, tc := range []struct {
		name, doc string
		headings  []string
		open      int
		swallowed []int
	}{
		{"closed fence", "# A\n```python\n# a comment\n```\n## B\n", []string{"A", "B"}, 0, nil},
		{"text after the closing fence", "# A\n```json\n{}\n``` more\n## B\n", []string{"A"}, 2, []int{5}},
		{"info string on a closing fence", "```\n{}\n```json\n## B\n```\n## C\n", []string{"C"}, 0, []int{4}},
		{"longer closing fence", "~~~~\n## B\n~~~~~~\n## C\n", []string{"C"}, 0, []int{2}},
		{"shorter closing fence", "````\n```\n## B\n", nil, 1, []int{3}},
		{"indented code is not a fence", "    ```\n## B\n", []string{"B"}, 0, nil},
	} {
		headings, open, swallowed := markdownHeadings(tc.doc)
		if !slices.Equal(headings, tc.headings) || open != tc.open || !slices.Equal(swallowed, tc.swallowed) {
			t.Errorf("%s: headings %q, open fence on line %d, swallowed %v; want %q, %d, %v", tc.name, headings, open, swallowed, tc.headings, tc.open, tc.swallowed)
		}
	}
}
