package jsonparse

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"reflect"
	"strings"
	"testing"
	"unicode/utf8"
)

// decodeWithEncodingJSON is what Parse must agree with: encoding/json,
// held to MaxDepth rather than its own 10,000 levels.
func decodeWithEncodingJSON(data []byte) (any, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, err
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, io.ErrUnexpectedEOF // anything: data after the value
	}
	if depthOf(v) > MaxDepth {
		return nil, errors.New("nested too deeply")
	}
	return v, nil
}

// depthOf counts the arrays and objects nested in v, v included.
func depthOf(v any) int {
	deepest := 0
	switch x := v.(type) {
	case []any:
		for _, e := range x {
			deepest = max(deepest, depthOf(e))
		}
	case map[string]any:
		for _, e := range x {
			deepest = max(deepest, depthOf(e))
		}
	default:
		return 0
	}
	return deepest + 1
}

var jsonCases = []string{
	`{}`, `[]`, ` {"a": [1, -2.5e+3, 0, -0, 1E2, true, false, null, "x"]} `, `"\u00e9\ud83d\ude00\n\t\\\/\""`,
	`"\ud83d"`, `"\ud83dx"`, `"\ude00\ud83d"`, `"\ud83d\u0041"`, "\"\xff\xfe ok\"", "\"\xef\xbf\xbd\"", `{"k":1,"k":2}`,
	`{"a":{"b":{"c":[[],[{}]]}}}`, `1`, `-0.0e-0`, `"plain"`, " [ 1 ,\t{ \"a b\" :\r\n\" x \" } ] ", `"\u00e9 é"`,
	// Refused.
	``, ` `, `{`, `[1,]`, `{"a":1,}`, `{"a" 1}`, `01`, `1.`, `.5`, `-`, `1e`, `+1`, `tru`, `nul`, `"\x"`, `"\u12"`,
	`"\ud83d\u12"`, "\"a\nb\"", `"open`, `{} {}`, `[1] x`, `{1:2}`, `NaN`, `[1 2]`,
}

func TestParseAgreesWithEncodingJSON(t *testing.T) {
	t.Parallel()
	for _, in := range jsonCases {
		checkAgreement(t, []byte(in))
	}
}

// Arrays and objects nest at most MaxDepth levels.
func TestParseDepthLimit(t *testing.T) {
	t.Parallel()
	deep := strings.Repeat(`[{"a":`, MaxDepth/2) + "1" + strings.Repeat("}]", MaxDepth/2)
	tooDeep := strings.Repeat("[", MaxDepth+1) + strings.Repeat("]", MaxDepth+1)
	if _, err := Parse([]byte(deep)); err != nil {
		t.Fatalf("%d levels: %v", MaxDepth, err)
	}
	for _, in := range []string{tooDeep, `{"a":` + tooDeep[1:len(tooDeep)-1] + `}`} {
		if _, err := Parse([]byte(in)); err == nil {
			t.Fatalf("%d levels parsed", MaxDepth+1)
		}
		p := Parser{Data: []byte(in)}
		if _, err := p.Skip(0); err == nil {
			t.Fatalf("%d levels skipped", MaxDepth+1)
		}
	}
}

func checkAgreement(t *testing.T, data []byte) {
	t.Helper()
	want, wantErr := decodeWithEncodingJSON(data)
	got, err := Parse(data)
	name := string(data)
	if len(name) > 40 {
		name = name[:40] + "…"
	}
	if (err == nil) != (wantErr == nil) {
		t.Fatalf("%q: error %v, encoding/json's %v", name, err, wantErr)
	}
	if err == nil && !reflect.DeepEqual(got, want) {
		t.Fatalf("%q: %#v, encoding/json %#v", name, got, want)
	}
	if err != nil {
		return
	}
	// ParseCompact reads the same value and compacts it as encoding/json does.
	v, compact, err := ParseCompact(data)
	if err != nil || !reflect.DeepEqual(v, got) {
		t.Fatalf("%q: ParseCompact %#v, %v; Parse %#v", name, v, err, got)
	}
	var wantCompact bytes.Buffer
	if err := json.Compact(&wantCompact, data); err != nil {
		t.Fatalf("%q: encoding/json does not compact it: %v", name, err)
	}
	if !bytes.Equal(compact, wantCompact.Bytes()) {
		t.Fatalf("%q: compacted to %q, encoding/json %q", name, compact, wantCompact.Bytes())
	}
}

func FuzzParseAgreesWithEncodingJSON(f *testing.F) {
	for _, c := range jsonCases {
		f.Add([]byte(c))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		checkAgreement(t, data)
	})
}

// Skip accepts what Parse accepts and returns the value's bytes.
func TestSkipAgreesWithParse(t *testing.T) {
	t.Parallel()
	for _, in := range jsonCases {
		_, parseErr := Parse([]byte(in))
		p := Parser{Data: []byte(in)}
		p.Space()
		raw, err := p.Skip(0)
		if err == nil {
			p.Space()
			if p.Pos < len(p.Data) {
				err = p.Fail("the end")
			}
		}
		if (err == nil) != (parseErr == nil) {
			t.Fatalf("%q: Skip %v, Parse %v", in, err, parseErr)
		}
		if err == nil && string(raw) != strings.TrimSpace(in) {
			t.Fatalf("%q: Skip returned %q", in, raw)
		}
	}
}

// Skip reads strings with escapes, numbers and literals without building
// them: once its scratch has grown, it allocates nothing.
func TestSkipAllocatesNothing(t *testing.T) {
	doc := []byte(`{"a\u00e9": ["x\ny", -1.5e3, true, null, {"k": "\ud83d\ude00 ` + "\xff" + `"}], "b": false}`)
	skip := func() {
		p := Parser{Data: doc}
		if _, err := p.Skip(0); err != nil || p.Pos != len(doc) {
			t.Fatalf("Skip: %v at %d", err, p.Pos)
		}
	}
	skip()
	p := Parser{Data: doc}
	if allocs := testing.AllocsPerRun(100, func() {
		p.Pos = 0
		if _, err := p.Skip(0); err != nil {
			t.Fatal(err)
		}
	}); allocs != 0 {
		t.Errorf("Skip allocated %v times", allocs)
	}
}

// StringBytes hands out a string without escapes in place, and decodes
// one with escapes or invalid UTF-8 as String does.
func TestStringBytes(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{`"plain é"`, "plain é"},
		{`"a\"b\u00e9\ud83d\ude00"`, "a\"bé😀"},
		{"\"bad \xff\"", "bad \ufffd"},
		{`"\ud83d"`, "\ufffd"},
	} {
		p := Parser{Data: []byte(tc.in)}
		got, err := p.StringBytes()
		if err != nil || string(got) != tc.want {
			t.Errorf("%q: %q, %v; want %q", tc.in, got, err, tc.want)
		}
		inPlace := len(got) > 0 && &got[0] == &p.Data[1]
		if escaped := strings.Contains(tc.in, "\\") || !utf8.ValidString(tc.in); inPlace == escaped {
			t.Errorf("%q: in place %v", tc.in, inPlace)
		}
	}
}
