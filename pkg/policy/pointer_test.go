package policy

import "testing"

func TestLookup(t *testing.T) {
	t.Parallel()
	doc := []byte(` {"a": {"b": [10, {"c": "x"}, [true]], "": 1, "k~/": 2},
		"s": "a\"}b", "n": null, "a\u00e9": 3, "dup": 1, "dup": {"x": 2}} `)
	value, err := decodeJSON(doc)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		pointer string
		want    string // "" means not found
	}{
		{"", string(doc[1 : len(doc)-1])},
		{"/a/b/0", "10"},
		{"/a/b/1/c", `"x"`},
		{"/a/b/2/0", "true"},
		{"/a/b/3", ""},
		{"/a/b/-", ""},
		{"/a/b/01", ""},
		{"/a/b/x", ""},
		{"/a/", "1"},
		{"/a/k~0~1", "2"},
		{"/s", `"a\"}b"`},
		{"/n", "null"},
		{"/a\u00e9", "3"},
		{"/dup/x", "2"},
		{"/s/0", ""},
		{"/missing", ""},
		{"/a/b/1/c/d", ""},
	} {
		tokens, err := parsePointer(tc.pointer)
		if err != nil {
			t.Fatalf("parsePointer(%q): %v", tc.pointer, err)
		}
		got, ok := lookup(value, tokens)
		if (tc.want == "") == ok {
			t.Errorf("lookup(%q) found %v; want %q", tc.pointer, ok, tc.want)
			continue
		}
		if !ok {
			continue
		}
		want, err := canonicalize([]byte(tc.want))
		if err != nil {
			t.Fatal(err)
		}
		if c := appendCanonical(nil, got); string(c) != string(want) {
			t.Errorf("lookup(%q) = %s; want %s", tc.pointer, c, want)
		}
	}
}
