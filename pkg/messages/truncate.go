package messages

import (
	"fmt"
	"unicode/utf8"
)

// DefaultMaxResultSize is the content size beyond which a result is
// truncated when the tool sets no MaxResultSize. It keeps a result event
// well under the 1 MiB message limit.
const DefaultMaxResultSize = 256 << 10

// ContentSize is the size in bytes of a result's content: the text, JSON
// and binary data of its blocks and its structured content.
func ContentSize(r *CallResult) int {
	n := len(r.StructuredContent)
	for _, b := range r.Content {
		n += len(b.Text) + len(b.JSON) + len(b.Data)
	}
	return n
}

// Truncate returns a copy of the result whose content fits in limit bytes,
// and whether anything was cut. Text (and JSON, which becomes text) is cut
// in the middle, keeping its head and its tail around a marker that says how
// much is missing; the marker counts against the limit. Binary blocks that
// do not fit are replaced by a short text. Structured content that does not
// fit is dropped; ref, when set, names where the whole result is kept.
func Truncate(r CallResult, limit int, ref *ObjectRef) (CallResult, bool) {
	if limit <= 0 || ContentSize(&r) <= limit {
		return r, false
	}
	where := ""
	if ref != nil {
		where = fmt.Sprintf("; the whole result is object %s in bucket %s", ref.Name, ref.Bucket)
	}
	budget := limit
	if len(r.StructuredContent) > budget/2 {
		r.StructuredContent = nil
	}
	budget -= len(r.StructuredContent)
	// Each block gets an equal share of what is left, and a block that
	// needs less passes the rest on.
	blocks := make([]ContentBlock, len(r.Content))
	copy(blocks, r.Content)
	for i := range blocks {
		share := budget / (len(blocks) - i)
		b := &blocks[i]
		switch {
		case b.Type == ContentJSON && len(b.JSON) > share:
			b.Type, b.Text, b.JSON = ContentText, cutMiddle(string(b.JSON), share, where), nil
		case b.Text != "" && len(b.Text) > share:
			b.Text = cutMiddle(b.Text, share, where)
		case len(b.Data) > 0 && len(b.Data) > share:
			*b = TextBlock(clip(fmt.Sprintf("[%s of %d bytes (%s) left out: too large%s]", b.Type, len(b.Data), b.MIMEType, where), share))
		}
		budget -= len(b.Text) + len(b.JSON) + len(b.Data)
	}
	r.Content = blocks
	r.Truncated = true
	r.FullResult = ref
	return r, true
}

// cutMiddle keeps the head and tail of s around a marker so that the whole
// is at most limit bytes, cutting only between UTF-8 characters.
func cutMiddle(s string, limit int, where string) string {
	if len(s) <= limit {
		return s
	}
	marker := func(cut int) string { return fmt.Sprintf("\n…[%d bytes cut%s]…\n", cut, where) }
	// The marker's length depends on the number it holds; a second pass settles it.
	keep := limit - len(marker(len(s)))
	if keep <= 0 {
		return clip(marker(len(s)), limit)
	}
	head := keep * 6 / 10
	tail := keep - head
	h, t := clip(s, head), clipTail(s, tail)
	return h + marker(len(s)-len(h)-len(t)) + t
}

// clip returns the longest prefix of s of at most n bytes that ends on a character boundary.
func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}

// clipTail returns the longest suffix of s of at most n bytes that starts on a character boundary.
func clipTail(s string, n int) string {
	if len(s) <= n {
		return s
	}
	i := len(s) - n
	for i < len(s) && !utf8.RuneStart(s[i]) {
		i++
	}
	return s[i:]
}
