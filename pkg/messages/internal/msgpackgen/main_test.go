package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// A struct the generator cannot write a codec for is an error that names
// the field and what is wrong, never a codec that writes other bytes.
func TestGenerateRefusesWhatItCannotWrite(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name, src, want string
	}{
		{"unknown kind", "//msgpack:generate\ntype M struct {\n\tA []int `json:\"a,omitempty\"`\n}", "M.A: type []int is not supported"},
		{"map without omitempty", "//msgpack:generate\ntype M struct {\n\tA map[string]int `json:\"a\"`\n}", "M.A: a map needs omitempty"},
		{"pointer without omitempty", "type N struct{}\n\n//msgpack:generate\ntype M struct {\n\tA *N `json:\"a\"`\n}", "M.A: a pointer needs omitempty"},
		{"byte slice without omitempty", "//msgpack:generate\ntype M struct {\n\tA []byte `json:\"a\"`\n}", "M.A: a byte slice needs omitempty"},
		{"struct value with omitempty", "//msgpack:generate\ntype N struct{}\n\n//msgpack:generate\ntype M struct {\n\tA N `json:\"a,omitempty\"`\n}", "M.A: a struct value with omitempty is not supported"},
		{"msgpack tag", "//msgpack:generate\ntype M struct {\n\tA string `json:\"a\" msgpack:\"b\"`\n}", "M.A: a msgpack tag would name the field apart from JSON"},
		// The library writes an embedded struct that has an encoder of its
		// own as a value, not inlined.
		{"embedded generated struct", "//msgpack:generate\ntype N struct{}\n\n//msgpack:generate\ntype M struct {\n\tN\n}", "M: only an untagged embedded struct of the package that is not generated itself is supported"},
		{"embedded with a tag", "type N struct{}\n\n//msgpack:generate\ntype M struct {\n\tN `json:\"n\"`\n}", "M: only an untagged embedded struct"},
		{"key used twice", "type N struct {\n\tA string `json:\"a\"`\n}\n\n//msgpack:generate\ntype M struct {\n\tN\n\tB string `json:\"a\"`\n}", `M.B: key "a" is used twice`},
		{"not a struct", "//msgpack:generate\ntype M string", "M is marked //msgpack:generate but is not a struct"},
		{"bad option", "//msgpack:generate value\ntype M struct{}", `M: //msgpack:generate takes nothing or "pointer", not "value"`},
		{"values on a number", "//msgpack:generate\ntype M struct {\n\t//msgpack:values A\n\tN int `json:\"n\"`\n}", "M.N: //msgpack:values names the constants of a string field"},
	}
	for _, tc := range cases {
		dir := t.TempDir()
		if err := os.WriteFile(filepath.Join(dir, "m.go"), []byte("package messages\n\n"+tc.src+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		_, err := Generate(dir)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v; want %q", tc.name, err, tc.want)
		}
	}
}

// The keys are written as the library writes strings, whatever their length.
func TestKeyLiteral(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ key, want string }{
		{"tool", `"\xa4tool"`},
		{strings.Repeat("k", 31), `"\xbf` + strings.Repeat("k", 31) + `"`},
		{strings.Repeat("k", 32), `"\xd9 ` + strings.Repeat("k", 32) + `"`},
	} {
		if got := keyLiteral(tc.key); got != tc.want {
			t.Errorf("key of %d bytes: %s; want %s", len(tc.key), got, tc.want)
		}
	}
}
