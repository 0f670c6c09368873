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
		{"unknown kind", "//msgpack:generate\ntype M struct {\n\tA []string `json:\"a,omitempty\"`\n}", "M.A: type []string is not supported"},
		{"map", "//msgpack:generate\ntype M struct {\n\tA map[string]int `json:\"a\"`\n}", "M.A: type map[string]int is not supported"},
		{"pointer without omitempty", "type N struct{}\n\n//msgpack:generate\ntype M struct {\n\tA *N `json:\"a\"`\n}", "M.A: a pointer needs omitempty"},
		{"slice without omitempty", "//msgpack:generate\ntype M struct {\n\tA []byte `json:\"a\"`\n}", "M.A: a slice needs omitempty"},
		{"msgpack tag", "//msgpack:generate\ntype M struct {\n\tA string `json:\"a\" msgpack:\"b\"`\n}", "M.A: a msgpack tag would name the field apart from JSON"},
		{"embedded", "type N struct{}\n\n//msgpack:generate\ntype M struct {\n\tN\n}", "M: embedded fields are not supported"},
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
