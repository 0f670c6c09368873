package policy

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"unicode/utf8"
)

// parsePointer splits an RFC 6901 JSON pointer into its unescaped tokens;
// "" (the whole document) has none.
func parsePointer(p string) ([]string, error) {
	if p == "" {
		return nil, nil
	}
	if p[0] != '/' {
		return nil, fmt.Errorf("invalid JSON pointer %q: must be empty or start with '/'", p)
	}
	if !utf8.ValidString(p) {
		return nil, fmt.Errorf("invalid JSON pointer %q: not valid UTF-8", p)
	}
	tokens := strings.Split(p[1:], "/")
	for i, t := range tokens {
		for j := 0; j < len(t); j++ {
			if t[j] == '~' && (j+1 == len(t) || (t[j+1] != '0' && t[j+1] != '1')) {
				return nil, fmt.Errorf("invalid JSON pointer %q: '~' must be followed by '0' or '1'", p)
			}
		}
		// RFC 6901 section 4: "~1" first, then "~0", so "~01" stays "~1".
		tokens[i] = strings.ReplaceAll(strings.ReplaceAll(t, "~1", "/"), "~0", "~")
	}
	return tokens, nil
}

// lookup returns the raw text of the value that the pointer tokens select
// in doc, which must be valid JSON. Where an object holds a key more than
// once the last value counts, as encoding/json and most decoders see it. It
// allocates only for keys written with escapes.
func lookup(doc []byte, tokens []string) ([]byte, bool) {
	i := skipSpace(doc, 0)
	for _, tok := range tokens {
		if i >= len(doc) {
			return nil, false
		}
		switch doc[i] {
		case '{':
			found := -1
			i = skipSpace(doc, i+1)
			for i < len(doc) && doc[i] == '"' {
				keyEnd := skipString(doc, i)
				match := keyEquals(doc[i:keyEnd], tok)
				i = skipSpace(doc, keyEnd)
				i = skipSpace(doc, i+1) // past ':'
				if match {
					found = i
				}
				i = skipSpace(doc, skipValue(doc, i))
				if i < len(doc) && doc[i] == ',' {
					i = skipSpace(doc, i+1)
				}
			}
			if found < 0 {
				return nil, false
			}
			i = found
		case '[':
			n, ok := arrayIndex(tok)
			if !ok {
				return nil, false
			}
			i = skipSpace(doc, i+1)
			for k := 0; ; k++ {
				if i >= len(doc) || doc[i] == ']' {
					return nil, false
				}
				if k == n {
					break
				}
				i = skipSpace(doc, skipValue(doc, i))
				if i < len(doc) && doc[i] == ',' {
					i = skipSpace(doc, i+1)
				}
			}
		default:
			return nil, false
		}
	}
	if i >= len(doc) {
		return nil, false
	}
	return doc[i:skipValue(doc, i)], true
}

func skipSpace(doc []byte, i int) int {
	for i < len(doc) && (doc[i] == ' ' || doc[i] == '\t' || doc[i] == '\n' || doc[i] == '\r') {
		i++
	}
	return i
}

// skipString returns the index just past the string that starts at doc[i].
func skipString(doc []byte, i int) int {
	j := i + 1
	for {
		q := bytes.IndexByte(doc[j:], '"')
		if q < 0 {
			return len(doc)
		}
		j += q
		// The quote ends the string unless an odd number of backslashes
		// escapes it.
		k := j - 1
		for k > i && doc[k] == '\\' {
			k--
		}
		if (j-1-k)%2 == 0 {
			return j + 1
		}
		j++
	}
}

// skipValue returns the index just past the value that starts at doc[i].
func skipValue(doc []byte, i int) int {
	if i >= len(doc) {
		return len(doc)
	}
	switch doc[i] {
	case '"':
		return skipString(doc, i)
	case '{', '[':
		depth := 0
		for j := i; j < len(doc); {
			switch doc[j] {
			case '"':
				j = skipString(doc, j)
				continue
			case '{', '[':
				depth++
			case '}', ']':
				depth--
				if depth == 0 {
					return j + 1
				}
			}
			j++
		}
		return len(doc)
	}
	j := i
	for j < len(doc) {
		switch doc[j] {
		case ',', '}', ']', ' ', '\t', '\n', '\r':
			return j
		}
		j++
	}
	return j
}

// keyEquals reports whether the quoted JSON string raw decodes to s, which
// is valid UTF-8.
func keyEquals(raw []byte, s string) bool {
	content := raw[1 : len(raw)-1]
	if bytes.IndexByte(content, '\\') < 0 {
		// Without escapes the decoded key is content itself, or longer
		// where invalid UTF-8 is replaced by U+FFFD.
		if len(content) >= len(s) {
			return string(content) == s
		}
		if utf8.Valid(content) {
			return false
		}
	}
	return string(stringContent(raw)) == s
}

// stringContent returns the decoded content of the quoted JSON string raw.
// Strings without escapes and with valid UTF-8 are returned in place;
// others are decoded as encoding/json does (invalid UTF-8 becomes U+FFFD).
func stringContent(raw []byte) []byte {
	if len(raw) < 2 {
		return nil
	}
	content := raw[1 : len(raw)-1]
	plain := utf8.Valid(content)
	for _, c := range content {
		if c == '\\' {
			plain = false
			break
		}
	}
	if plain {
		return content
	}
	var s string
	if json.Unmarshal(raw, &s) != nil {
		return nil
	}
	return []byte(s)
}

// arrayIndex reads an array index token: decimal without leading zeros.
// "-" (past the last element) selects nothing.
func arrayIndex(tok string) (int, bool) {
	if tok == "" || len(tok) > 9 || (len(tok) > 1 && tok[0] == '0') {
		return 0, false
	}
	for i := 0; i < len(tok); i++ {
		if tok[i] < '0' || tok[i] > '9' {
			return 0, false
		}
	}
	n, err := strconv.Atoi(tok)
	return n, err == nil
}
