package messages

import (
	"strings"
	"testing"
	"unicode/utf8"
)

func TestTruncate(t *testing.T) {
	t.Parallel()
	ref := &ObjectRef{Bucket: "toolbus_results", Name: "c1", Size: 123}
	long := strings.Repeat("abcdefghij", 1000) // 10,000 bytes
	cases := []struct {
		name  string
		in    CallResult
		limit int
		cut   bool
	}{
		{"fits", CallResult{Content: []ContentBlock{TextBlock("short")}}, 100, false},
		{"one long text", CallResult{Content: []ContentBlock{TextBlock(long)}}, 1000, true},
		{"text and json", CallResult{Content: []ContentBlock{TextBlock(long), JSONBlock(JSON(`{"a":"` + long + `"}`))}, StructuredContent: JSON(`{"a":"` + long + `"}`)}, 2000, true},
		{"image", CallResult{Content: []ContentBlock{TextBlock("caption"), ImageBlock(make([]byte, 5000), "image/png")}}, 500, true},
		{"multibyte", CallResult{Content: []ContentBlock{TextBlock(strings.Repeat("ä€😀", 1000))}}, 777, true},
		{"tiny limit", CallResult{Content: []ContentBlock{TextBlock(long)}}, 10, true},
	}
	for _, tc := range cases {
		got, cut := Truncate(tc.in, tc.limit, ref)
		if cut != tc.cut {
			t.Errorf("%s: cut = %v", tc.name, cut)
			continue
		}
		if size := ContentSize(&got); size > tc.limit && cut {
			t.Errorf("%s: %d bytes after truncation, limit %d", tc.name, size, tc.limit)
		}
		if !cut {
			continue
		}
		if !got.Truncated || got.FullResult != ref {
			t.Errorf("%s: not marked truncated", tc.name)
		}
		for _, b := range got.Content {
			if !utf8.ValidString(b.Text) {
				t.Errorf("%s: cut inside a character", tc.name)
			}
		}
		if tc.limit >= 500 {
			text := got.Content[len(got.Content)-1].Text
			if !strings.Contains(text, "the whole result is object c1") {
				t.Errorf("%s: no marker in %q", tc.name, text)
			}
			if tc.name == "one long text" && (!strings.HasPrefix(text, "abcdefghij") || !strings.HasSuffix(text, "abcdefghij")) {
				t.Errorf("%s: head or tail lost", tc.name)
			}
		}
	}
	// The input is not modified.
	in := CallResult{Content: []ContentBlock{TextBlock(long)}}
	Truncate(in, 100, nil)
	if in.Content[0].Text != long {
		t.Fatal("Truncate modified its input")
	}
}
