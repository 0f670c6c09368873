package policy

import (
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

// lookup returns the value that the pointer tokens select in doc, a value
// decodeJSON produced. Where an object held a key more than once the last
// value counts, as encoding/json and most decoders see it.
func lookup(doc any, tokens []string) (any, bool) {
	for _, tok := range tokens {
		switch x := doc.(type) {
		case map[string]any:
			v, ok := x[tok]
			if !ok {
				return nil, false
			}
			doc = v
		case []any:
			n, ok := arrayIndex(tok)
			if !ok || n >= len(x) {
				return nil, false
			}
			doc = x[n]
		default:
			return nil, false
		}
	}
	return doc, true
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
