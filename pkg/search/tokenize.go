package search

import (
	"strings"
	"unicode"
	"unicode/utf8"
)

// maxTokenBytes drops longer words (base64 blobs, hashes, URLs without
// separators): they never match a query and would only bloat the index.
const maxTokenBytes = 64

// Tokenize returns the terms that the index stores for text and that a query
// must hold to match it. See AppendTokens.
func Tokenize(text string) []string {
	return AppendTokens(nil, text)
}

// AppendTokens appends the terms of text to dst and returns the extended
// slice. Words are split at anything that is not a letter or a digit, at
// case changes of camelCase ("HTTPServer" gives "http", "server"), and
// between letters and digits ("sha256" gives "sha", "256"); they are folded
// to lower case, English stop words are dropped and the rest are stemmed.
// An apostrophe between letters joins them ("user's" is "users", stemmed to
// "user"). Runs of Chinese, Japanese or Korean characters become their
// overlapping character bigrams followed by their single characters.
func AppendTokens(dst []string, text string) []string {
	t := tokenizer{dst: dst}
	t.run(text)
	return t.dst
}

type runeClass uint8

const (
	classSeparator runeClass = iota
	classLower
	classUpper
	classCaseless // letters without case, and combining marks
	classDigit
	classCJK
)

func classify(r rune) runeClass {
	switch {
	case r < utf8.RuneSelf:
		switch {
		case 'a' <= r && r <= 'z':
			return classLower
		case 'A' <= r && r <= 'Z':
			return classUpper
		case '0' <= r && r <= '9':
			return classDigit
		}
		return classSeparator
	case isCJK(r):
		return classCJK
	case unicode.IsUpper(r) || unicode.IsTitle(r):
		return classUpper
	case unicode.IsLower(r):
		return classLower
	case unicode.IsLetter(r) || unicode.Is(unicode.Mn, r) || unicode.Is(unicode.Mc, r):
		return classCaseless
	case unicode.IsDigit(r):
		return classDigit
	}
	return classSeparator
}

func isCJK(r rune) bool {
	return unicode.Is(unicode.Han, r) || unicode.Is(unicode.Hiragana, r) ||
		unicode.Is(unicode.Katakana, r) || unicode.Is(unicode.Hangul, r) ||
		r == 'ー' // the Katakana length mark belongs to the word it lengthens
}

func isApostrophe(r rune) bool { return r == '\'' || r == '’' }

func isLetterClass(c runeClass) bool {
	return c == classLower || c == classUpper || c == classCaseless
}

type tokenizer struct {
	dst []string
	// stems caches stem results when not nil.
	stems map[string]string
	word  []byte // the word being built, when it is not a plain substring
	cjk   []rune
}

func (t *tokenizer) run(text string) {
	start := -1     // byte offset of the current letter or digit word
	joined := false // the current word skipped an apostrophe, so t.word holds it
	prev := classSeparator
	for i := 0; i < len(text); {
		r, size := utf8.DecodeRuneInString(text[i:])
		c := classify(r)
		if r == utf8.RuneError && size <= 1 {
			c = classSeparator
		}
		if c == classCJK {
			t.flush(text, start, i, joined)
			start, joined = -1, false
			t.cjk = append(t.cjk, r)
			prev = c
			i += size
			continue
		}
		if len(t.cjk) > 0 {
			t.flushCJK()
		}
		if isApostrophe(r) && isLetterClass(prev) && start >= 0 {
			next, nsize := utf8.DecodeRuneInString(text[i+size:])
			if nsize > 0 && isLetterClass(classify(next)) {
				if !joined {
					t.word = append(t.word[:0], text[start:i]...)
					joined = true
				}
				i += size
				continue
			}
		}
		if start >= 0 && boundary(prev, c, text[i+size:]) {
			t.flush(text, start, i, joined)
			start, joined = -1, false
		}
		if c == classSeparator {
			prev = c
			i += size
			continue
		}
		if start < 0 {
			start = i
		} else if joined {
			t.word = append(t.word, text[i:i+size]...)
		}
		prev = c
		i += size
	}
	t.flush(text, start, len(text), joined)
	if len(t.cjk) > 0 {
		t.flushCJK()
	}
}

// boundary reports whether a word ends before a rune of class c that
// follows one of class prev; rest is the text after that rune.
func boundary(prev, c runeClass, rest string) bool {
	switch {
	case c == classSeparator:
		return true
	case (prev == classDigit) != (c == classDigit):
		return true
	case c == classUpper && (prev == classLower || prev == classCaseless):
		return true
	case c == classUpper && prev == classUpper:
		// The last capital of an acronym starts the next word: HTTPServer.
		next, size := utf8.DecodeRuneInString(rest)
		return size > 0 && classify(next) == classLower
	}
	return false
}

func (t *tokenizer) flush(text string, start, end int, joined bool) {
	if start < 0 {
		return
	}
	word := text[start:end]
	if joined {
		word = string(t.word)
	}
	t.emit(word)
}

func (t *tokenizer) emit(word string) {
	word = lower(word)
	if len(word) == 0 || len(word) > maxTokenBytes {
		return
	}
	if isStopWord(word) {
		return
	}
	if t.stems == nil {
		t.dst = append(t.dst, stem(word))
		return
	}
	stemmed, ok := t.stems[word]
	if !ok {
		stemmed = stem(word)
		if len(t.stems) >= maxStemCache {
			clear(t.stems)
		}
		t.stems[strings.Clone(word)] = stemmed
	}
	t.dst = append(t.dst, stemmed)
}

// lower folds case without allocating when word is already lower-case ASCII.
func lower(word string) string {
	for i := 0; i < len(word); i++ {
		if c := word[i]; c >= utf8.RuneSelf || ('A' <= c && c <= 'Z') {
			return strings.ToLower(word)
		}
	}
	return word
}

func (t *tokenizer) flushCJK() {
	runes := t.cjk
	t.cjk = t.cjk[:0]
	if len(runes) == 1 {
		t.dst = append(t.dst, string(runes[0]))
		return
	}
	for i := 0; i+1 < len(runes); i++ {
		t.dst = append(t.dst, string(runes[i:i+2]))
	}
	// Unigrams too, since many words are one character long (书, 查, 買う)
	// and a bigram across a word boundary matches nothing.
	for _, r := range runes {
		t.dst = append(t.dst, string(r))
	}
}
